package fakekubelet

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Ending is how a script ends a pod: how its process exits, how it meets its
// pod's deletion, or why it never starts.
type Ending struct {
	// After is how long the process runs before it ends. With Evict it is
	// when the eviction comes; with Waiting "ErrImagePull", when the kubelet
	// turns to ImagePullBackOff.
	After time.Duration
	// ExitCode of the loop container.
	ExitCode int32
	// Message is the termination message (with Waiting, the waiting message).
	Message string
	// Reason is the container's terminated reason (e.g. OOMKilled).
	Reason string
	// PodReason and Disruption, when set, end the pod the way infrastructure
	// does: the pod's status reason, and a DisruptionTarget condition
	// (reason EvictionByEvictionAPI) on an otherwise ordinary ending. Evict
	// models a whole eviction.
	PodReason  string
	Disruption bool
	// Hang keeps the process running until its pod is deleted.
	Hang bool

	// IgnoreSIGTERM keeps the process running once its pod is deleted, until
	// SIGKILL at the end of the deletion's grace period, and no sooner than
	// a kubelet's least grace of 2 s (exit 137). Without it, SIGTERM ends
	// the process at once (exit 143).
	IgnoreSIGTERM bool
	// StuckTerminating keeps the process, and so its pod object, for this
	// long after the kubelet first signals it (a deletion, or a kill for a
	// pod that is gone), deaf to SIGTERM and SIGKILL; then it dies (exit 137).
	StuckTerminating time.Duration
	// Waiting, when set, never starts the process: the pod stays Pending,
	// its container waiting with this reason (ErrImagePull, ImagePullBackOff,
	// InvalidImageName, CreateContainerConfigError) and Message. ImageNotFound,
	// InvalidImageName and MissingSecret give a kubelet's own messages.
	Waiting string
	// Evict, when set, evicts the pod at After; its value is the reason of
	// the DisruptionTarget condition, which says who evicted it.
	Evict Eviction
}

// Eviction is who evicts a pod: the reason of its DisruptionTarget condition.
type Eviction string

const (
	// ByKubelet is the kubelet's node-pressure eviction: the process is
	// killed (exit 137, unless ExitCode says otherwise) and the pod ends
	// Failed with reason Evicted.
	ByKubelet Eviction = corev1.PodReasonTerminationByKubelet
	// ByEvictionAPI posts to the pod's eviction subresource: the API server
	// adds the condition and deletes the pod gracefully, and the process
	// meets SIGTERM as any deleted pod's does. It is posted whatever the
	// state of the pod's node, as a drain does.
	ByEvictionAPI Eviction = "EvictionByEvictionAPI"
)

// Waiting reasons a kubelet gives a container that cannot start.
const (
	ReasonErrImagePull               = "ErrImagePull"
	ReasonImagePullBackOff           = "ImagePullBackOff"
	ReasonInvalidImageName           = "InvalidImageName"
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
)

// pressureMessage is what the kubelet says of a pod it evicts for memory
// pressure (pkg/kubelet/eviction: nodeLowMessageFmt).
const pressureMessage = "The node was low on resource: memory. "

// ImageNotFound is a pull of an image the registry does not have: the
// container waits with ErrImagePull, and backOff later with
// ImagePullBackOff, each with the message a kubelet on containerd gives.
func ImageNotFound(image string, backOff time.Duration) Ending {
	return Ending{Waiting: ReasonErrImagePull, After: backOff, Message: fmt.Sprintf(
		"rpc error: code = NotFound desc = failed to pull and unpack image %q: failed to resolve reference %q: %s: not found",
		image, image, image)}
}

// InvalidImageName is an image reference that does not parse.
func InvalidImageName(image string) Ending {
	return Ending{Waiting: ReasonInvalidImageName, Message: fmt.Sprintf(
		"Failed to apply default image tag %q: couldn't parse image name %q: invalid reference format", image, image)}
}

// MissingSecret is a container whose environment names a Secret that does
// not exist.
func MissingSecret(name string) Ending {
	return Ending{Waiting: ReasonCreateContainerConfigError, Message: fmt.Sprintf("secret %q not found", name)}
}

// exit is how a process ended, as the kubelet reports it.
type exit struct {
	code              int32
	reason, message   string // the container's terminated state
	podReason         string
	podMessage        string
	disruption        Eviction // the DisruptionTarget condition's reason, if any
	disruptionMessage string
}

var (
	terminated = exit{code: 143, reason: "Error"} // SIGTERM
	killed     = exit{code: 137, reason: "Error"} // SIGKILL
)

// exit is how a process that ends by its script ends.
func (e Ending) exit() exit {
	x := exit{code: e.ExitCode, reason: e.Reason, message: e.Message, podReason: e.PodReason}
	if e.Disruption {
		x.disruption, x.disruptionMessage = ByEvictionAPI, "Eviction API: evicting"
	}
	if e.Evict == ByKubelet {
		if x.code == 0 {
			x.code = 137
		}
		x.podReason, x.podMessage = "Evicted", pressureMessage
		x.disruption, x.disruptionMessage = ByKubelet, pressureMessage
	}
	return x
}

// waitingNow is the waiting reason and message the container should show now,
// given what the kubelet last wrote and since when.
func (e Ending) waitingNow(image, written string, since, now time.Time) (string, string) {
	if e.Waiting == ReasonErrImagePull && written != "" && now.Sub(since) >= e.After {
		return ReasonImagePullBackOff, fmt.Sprintf("Back-off pulling image %q: %s: %s", image, ReasonErrImagePull, e.Message)
	}
	return e.Waiting, e.Message
}
