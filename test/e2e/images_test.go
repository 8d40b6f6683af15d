//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// A run whose pod names an image the registry does not have: the loop
// container waits ErrImagePull with the registry's "not found", and the run
// fails InvalidConfig with that message instead of waiting out its startup
// timeout or retrying.
func TestMissingImageFailsInvalidConfig(t *testing.T) {
	t.Parallel()
	image := cluster.RegistryHost() + "/clawfarm/no-such-image:v0"
	run := newRun("e2e-bad-image", rigBadImage, "timer", "Set a 5 minute timer in the Clock app and start it.")
	run.Spec.Pod = &farmv1.PodOverrides{Image: image}
	create(t, run)
	var pulled string
	waitRun(t, "e2e-bad-image", 2*time.Minute, "its pod waiting ErrImagePull", func(r *farmv1.AgentRun) bool {
		for _, p := range podsOf(t, "e2e-bad-image") {
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
					pulled = w.Reason + ": " + w.Message
				}
			}
		}
		return pulled != "" || r.Status.Phase.Finished()
	})
	r := waitFinished(t, "e2e-bad-image", farmv1.RunFailed)
	if succeededReason(r) != farmv1.ReasonInvalidConfig {
		t.Fatalf("reason %q, want InvalidConfig (%s)", succeededReason(r), attemptsSummary(r))
	}
	msg := ""
	for _, c := range r.Status.Conditions {
		if c.Type == farmv1.ConditionSucceeded {
			msg = c.Message
		}
	}
	if !strings.Contains(msg, image) || !strings.Contains(msg, "not found") || !strings.Contains(msg, "MANIFEST_UNKNOWN") {
		t.Fatalf("the run's message %q does not carry the registry's answer for %s", msg, image)
	}
	if r.Status.Attempt != 1 {
		t.Fatalf("%d attempts: a configuration error is not retried", r.Status.Attempt)
	}
	t.Logf("pod: %s; run: %s", pulled, msg)
	rigFree(t, rigBadImage)

	// An image from outside the nodes' --allowed-images is refused by the
	// node before any pull, and fails the run the same way.
	other := devcluster.ForeignImagePrefix + "loop:v0"
	run = newRun("e2e-foreign-image", rigBadImage, "timer", "Set a 5 minute timer in the Clock app and start it.")
	run.Spec.Pod = &farmv1.PodOverrides{Image: other}
	create(t, run)
	r = waitFinished(t, "e2e-foreign-image", farmv1.RunFailed)
	msg = ""
	for _, c := range r.Status.Conditions {
		if c.Type == farmv1.ConditionSucceeded {
			msg = c.Message
		}
	}
	if succeededReason(r) != farmv1.ReasonInvalidConfig || !strings.Contains(msg, "--allowed-images") || !strings.Contains(msg, other) {
		t.Fatalf("reason %q message %q; want InvalidConfig naming the image and --allowed-images", succeededReason(r), msg)
	}
	rigFree(t, rigBadImage)
}

// imageWatch records the imageID of every operator pod that started in the
// suite's cluster: the manager, loop pods and follow-up Jobs' pods.
type imageWatch struct {
	mu   sync.Mutex
	seen map[string]string // kind/namespace/name → imageID
	// where: kind/namespace/name → "<node> <runtime>" (containerd, rignode)
	where map[string]string
}

// watchImages watches the cluster's pods until ctx ends and records every
// imageID a pod's status shows. A watch, not a poll: a follow-up Job's pod
// lives a few seconds, and every status update of it must be seen.
func watchImages(ctx context.Context) *imageWatch {
	w := &imageWatch{seen: map[string]string{}, where: map[string]string{}}
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig)
	if err != nil {
		panic(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	go func() {
		for ctx.Err() == nil {
			list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			for i := range list.Items {
				w.record(&list.Items[i])
			}
			wi, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				continue
			}
			for ev := range wi.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok {
					w.record(p)
				}
			}
			wi.Stop()
		}
	}()
	return w
}

func (w *imageWatch) record(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.ImageID != "" {
			key := podKind(p) + " " + p.Namespace + "/" + p.Name + " " + cs.Name
			w.seen[key] = cs.ImageID
			runtime, _, _ := strings.Cut(cs.ContainerID, "://")
			w.where[key] = p.Spec.NodeName + " " + runtime
		}
	}
}

func podKind(p *corev1.Pod) string {
	switch {
	case p.Labels[farmv1.LabelRun] != "":
		return "loop"
	case p.Labels["batch.kubernetes.io/job-name"] != "" || p.Labels["job-name"] != "":
		return "follow-up"
	case p.Namespace == devcluster.OperatorNamespace && p.Labels["app.kubernetes.io/component"] == "server":
		return "trace-server"
	case p.Namespace == devcluster.OperatorNamespace:
		return "manager"
	}
	return "other"
}

// check: every pod's imageID is <registry>/clawfarm/<name>@sha256:<64 hex>,
// the digest the cluster pushed for that image, and each kind was seen.
func (w *imageWatch) check() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(cluster.RegistryHost()) + `/clawfarm/([a-z-]+)@sha256:[0-9a-f]{64}$`)
	kinds := map[string]int{}
	for pod, id := range w.seen {
		m := re.FindStringSubmatch(id)
		if m == nil {
			return fmt.Errorf("%s: imageID %q is not a digest in the registry %s", pod, id, cluster.RegistryHost())
		}
		if want := cluster.Image(m[1]); id != want {
			return fmt.Errorf("%s: imageID %q, but the cluster pushed %q", pod, id, want)
		}
		kinds[strings.Fields(pod)[0]]++
	}
	for _, k := range []string{"manager", "trace-server", "loop", "follow-up"} {
		if kinds[k] == 0 {
			return fmt.Errorf("no %s pod seen (seen: %v)", k, kinds)
		}
	}
	// Where a real kubelet runs them, the operator's pods are containers:
	// loop pods on the kubelet rig host, the manager (chart mode) and the
	// trace server on the operator's kubelet node, and nowhere else.
	containerd := map[string]int{}
	for pod, place := range w.where {
		kind := strings.Fields(pod)[0]
		switch {
		case place == devcluster.KubeletNode+" containerd" && kind == "loop":
			containerd[kind]++
		case place == devcluster.KubeletSystemNode+" containerd" && (kind == "manager" || kind == "trace-server"):
			containerd[kind]++
		case (kind == "trace-server" || (kind == "manager" && cluster.Manager == devcluster.ManagerChart)) && cluster.KubeletSystem:
			return fmt.Errorf("%s ran on %s, want %s under containerd", pod, place, devcluster.KubeletSystemNode)
		}
	}
	want := []string{"loop"}
	if cluster.KubeletSystem {
		want = append(want, "trace-server")
		if cluster.Manager == devcluster.ManagerChart {
			want = append(want, "manager")
		}
	}
	for _, k := range want {
		if containerd[k] == 0 {
			return fmt.Errorf("no %s container ran under containerd on a kubelet node (%v)", k, containerd)
		}
	}
	return nil
}

// nodeRuntimes maps each node to the container runtime it reports, or
// is empty if the nodes cannot be listed (the summary then shows none).
func nodeRuntimes() map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := cluster.NodeRuntimes(ctx)
	return out
}

func (w *imageWatch) summary(runtimes map[string]string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	kinds := map[string]int{}
	where := map[string]map[string]int{}
	for pod := range w.seen {
		k := strings.Fields(pod)[0]
		kinds[k]++
		if where[k] == nil {
			where[k] = map[string]int{}
		}
		where[k][w.where[pod]]++
	}
	var parts []string
	for k, n := range kinds {
		var on []string
		for place, m := range where[k] {
			node, _, _ := strings.Cut(place, " ")
			on = append(on, fmt.Sprintf("%d on %s (%s)", m, node, runtimes[node]))
		}
		sort.Strings(on)
		parts = append(parts, fmt.Sprintf("%d %s containers (%s)", n, k, strings.Join(on, ", ")))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
