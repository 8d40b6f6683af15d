package attempt

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// Outcome is how an attempt pod ended, as the controller acts on it.
type Outcome struct {
	// Class is one of the farmv1.Outcome* values.
	Class string
	// Counted is true when the attempt uses one of maxAttempts.
	Counted bool
	// Sentinel the loop reported, or the harness set.
	Sentinel string
	// ExitCode of the loop container, when it ran.
	ExitCode *int32
	// Message is the parsed termination message, when there was a valid one.
	Message *contract.TerminationMessage
	// Explanation says in a sentence what happened.
	Explanation string
	// Mismatch is set when the termination message and the exit code disagreed.
	Mismatch bool
	// Evict is set when the pod will not end by itself (never started, a
	// configuration error, a node gone) and must be deleted.
	Evict bool
	// ExitReason, when set, is the exit reason recorded instead of the
	// termination message's (the stall watchdog's ExitReasonStalled).
	ExitReason string
}

// The exit reasons the operator records itself, not ones the loop reports.
const (
	// ExitReasonStalled: the stall watchdog stopped the attempt.
	ExitReasonStalled = "stalled"
	// ExitReasonAttemptDeadline: the pod reached its activeDeadlineSeconds
	// (the session budget and its grace). A counted STUCK like any other: a
	// slow phone is not a lost task (docs/loop-contract.md).
	ExitReasonAttemptDeadline = "attempt_deadline"
)

// World is what the classifier needs to know beyond the pod.
type World struct {
	Now time.Time
	// NodeGone is true when the pod's node object was deleted or an operator
	// marked it out of service (the node.kubernetes.io/out-of-service taint):
	// nothing of the pod runs any more, or ever will report.
	NodeGone bool
	// NodeUnreachable is true while the pod's node is not Ready: its kubelet
	// cannot report, so a pod it may have started counts as alive.
	NodeUnreachable bool
	// Cancelling is true when the run asked for the stop (spec.cancel or a deadline).
	Cancelling bool
	// StartupTimeout bounds how long a pod may stay Pending before it counts as never started.
	StartupTimeout time.Duration
	// ConfigErrorGrace is how long a pod may show a configuration error (a
	// missing Secret, an image that does not exist) before the run fails: a
	// Secret created a moment after the run still counts.
	ConfigErrorGrace time.Duration
}

// waitingReasons are container waiting reasons that mean the pod cannot start.
var waitingReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// infraPodReasons are pod-level reasons that mean infrastructure, not the agent, ended the pod.
var infraPodReasons = map[string]bool{
	"Evicted": true, "NodeLost": true, "Shutdown": true, "Terminated": true,
	"NodeShutdown": true, "Preempting": true, "UnexpectedAdmissionError": true,
	"NodeAffinity": true, "OutOfcpu": true, "OutOfmemory": true, "OutOfpods": true,
}

// Classify decides whether an attempt pod has ended and how. It returns false
// while the pod may still be running: on a live node, while it terminates,
// and on a node that cannot report — a pod counts as alive until its node
// says it ended, the node is deleted, or it is marked out of service.
func Classify(pod *corev1.Pod, w World) (Outcome, bool) {
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if !terminal {
		switch {
		case w.NodeGone && pod.Spec.NodeName != "":
			return infra(fmt.Sprintf("node %s is gone (deleted or marked out of service) with the attempt on it", pod.Spec.NodeName), true), true
		case pod.DeletionTimestamp != nil:
			if pod.Status.Phase == corev1.PodPending && pod.Spec.NodeName == "" {
				if w.Cancelling {
					return Outcome{Class: farmv1.OutcomeCancelled, Explanation: "the attempt was stopped before it was scheduled", Evict: true}, true
				}
				return infra("the pod was deleted before it was scheduled", true), true
			}
			return Outcome{}, false // terminating: wait for the container to stop
		case w.NodeUnreachable && pod.Spec.NodeName != "":
			return Outcome{}, false // its kubelet may have started it and cannot say so
		case pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "":
			age := w.Now.Sub(pod.CreationTimestamp.Time)
			if name, reason, msg := configError(pod); reason != "" && age >= w.ConfigErrorGrace {
				return Outcome{Class: farmv1.OutcomeInvalidConfig, Sentinel: string(contract.Fail), Evict: true,
					Explanation: fmt.Sprintf("the %s container cannot start (%s): %s", name, reason, msg)}, true
			}
			if reason := waitingReason(pod); reason != "" && age > w.StartupTimeout {
				return infra(fmt.Sprintf("the loop container never started (%s)", reason), true), true
			}
			if w.StartupTimeout > 0 && age > w.StartupTimeout && !anyStarted(pod) {
				return infra(fmt.Sprintf("the pod did not start within %s", w.StartupTimeout), true), true
			}
		}
		return Outcome{}, false
	}

	if w.Cancelling {
		o := fromContainer(pod)
		o.Class, o.Counted = farmv1.OutcomeCancelled, false
		o.Explanation = "the attempt was stopped: " + o.Explanation
		return o, true
	}
	if c := disruption(pod); c != "" {
		return infra("the pod was disrupted: "+c, false), true
	}
	if infraPodReasons[pod.Status.Reason] {
		return infra(fmt.Sprintf("the pod ended with reason %s: %s", pod.Status.Reason, pod.Status.Message), false), true
	}
	if why := pod.Annotations[farmv1.AnnotationStalled]; why != "" {
		// Stopped by the stall watchdog: whatever the loop said on its way
		// out (a SIGTERM's user_cancel), the attempt is a counted STUCK.
		o := fromContainer(pod)
		o.Class, o.Counted, o.Sentinel, o.Mismatch = farmv1.OutcomeStalled, true, string(contract.Stuck), false
		o.ExitReason = ExitReasonStalled
		o.Explanation = "stalled: " + why
		return o, true
	}
	if pod.Status.Reason == "DeadlineExceeded" {
		// Whatever the loop said as the kubelet stopped it (a SIGTERM's
		// user_cancel), the attempt is a counted, retryable STUCK.
		o := fromContainer(pod)
		o.Class, o.Counted, o.Sentinel, o.Mismatch = farmv1.OutcomeStuck, true, string(contract.Stuck), false
		o.ExitReason = ExitReasonAttemptDeadline
		o.Explanation = "the attempt ran past its deadline (activeDeadlineSeconds)"
		return o, true
	}
	if pod.DeletionTimestamp != nil {
		return infra("the pod was deleted while the attempt ran", false), true
	}
	if terminatedState(pod) == nil {
		if name, t := failedInit(pod); t != nil && t.ExitCode == contract.ExitInvalidConfig {
			// The own-state step said the state directory cannot be given
			// to the loop's user: the node's setup, which no retry changes.
			return Outcome{Class: farmv1.OutcomeInvalidConfig, Sentinel: string(contract.Fail),
				Explanation: fmt.Sprintf("the init step %s failed (exit %d): %s", name, t.ExitCode, clip(strings.TrimSpace(t.Message), 300))}, true
		}
		return infra("the pod ended before the loop container ran", false), true
	}
	return fromContainer(pod), true
}

// fromContainer classifies by the loop container's exit code and termination message.
func fromContainer(pod *corev1.Pod) Outcome {
	t := terminatedState(pod)
	if t == nil {
		return Outcome{Class: farmv1.OutcomeStuck, Counted: true, Sentinel: string(contract.Stuck),
			Explanation: "the loop container has no terminated state"}
	}
	code := t.ExitCode
	byCode := contract.ClassOfExitCode(int(code))
	o := Outcome{ExitCode: &code}
	if t.Message != "" {
		msg, err := contract.DecodeTerminationMessage([]byte(t.Message))
		switch {
		case err != nil:
			o.Explanation = fmt.Sprintf("exit code %d; %v", code, err)
		case msg.Class() != byCode:
			o.Mismatch = true
			o.Explanation = fmt.Sprintf("exit code %d (%s) disagrees with the termination message (%s %s); the exit code wins",
				code, byCode, msg.Sentinel, msg.Class())
		default:
			o.Message = msg
			o.Sentinel = string(msg.Sentinel)
		}
	}
	o.Class, o.Counted = classOutcome(byCode)
	if o.Class == farmv1.OutcomeStuck && o.Message != nil && o.Message.ExitReason == contract.ReasonRigNotReady {
		// The rig answered that its hardware is not set up: the rig's
		// state, not the task's. A free retry, once the rig is Ready again.
		o.Class, o.Counted = farmv1.OutcomeInfrastructure, false
		o.Explanation = "the rig's hardware is not set up (" + string(contract.ReasonRigNotReady) + "): " + clip(o.Message.Recap, 300)
	}
	if o.Class == farmv1.OutcomeBudget && o.Message != nil && o.Message.ExitReason != "" && o.Message.ExitReason != contract.ReasonBudgetExhausted {
		// Exit 13 for another cause (a provider that refused the key, the
		// account or the model): no fresh attempt can fix it.
		o.Class = farmv1.OutcomeNotRetryable
		o.Explanation = fmt.Sprintf("the loop ended STUCK and said no retry can help (%s): %s", o.Message.ExitReason, o.Message.Recap)
	}
	if o.Sentinel == "" {
		o.Sentinel = string(sentinelOf(byCode))
	}
	if o.Explanation == "" {
		o.Explanation = explain(code, t.Reason, byCode)
		if m := o.Message; m != nil && m.Recap != "" {
			// The agent's own words say more than the exit code.
			o.Explanation = fmt.Sprintf("%s (%s, exit %d): %s", m.Sentinel, m.ExitReason, code, clip(m.Recap, 300))
		}
	}
	return o
}

func classOutcome(c contract.Class) (string, bool) {
	switch c {
	case contract.ClassDone:
		return farmv1.OutcomeDone, true
	case contract.ClassFail:
		return farmv1.OutcomeFail, true
	case contract.ClassWait:
		return farmv1.OutcomeWait, true
	case contract.ClassIdle:
		return farmv1.OutcomeIdle, true
	case contract.ClassBudget:
		return farmv1.OutcomeBudget, true
	case contract.ClassInvalidConfig:
		return farmv1.OutcomeInvalidConfig, true
	}
	return farmv1.OutcomeStuck, true
}

func sentinelOf(c contract.Class) contract.Sentinel {
	switch c {
	case contract.ClassDone:
		return contract.Done
	case contract.ClassFail, contract.ClassInvalidConfig:
		return contract.Fail
	case contract.ClassWait:
		return contract.Wait
	case contract.ClassIdle:
		return contract.Idle
	}
	return contract.Stuck
}

func explain(code int32, reason string, c contract.Class) string {
	switch {
	case reason == "OOMKilled":
		return fmt.Sprintf("the loop was killed for running out of memory (exit %d); counted as STUCK", code)
	case code > 128 && code < 160:
		return fmt.Sprintf("the loop died from signal %d (exit %d); counted as STUCK", code-128, code)
	case c == contract.ClassStuck && code != contract.ExitStuck:
		return fmt.Sprintf("the loop crashed with exit code %d; counted as STUCK", code)
	case c == contract.ClassInvalidConfig:
		return "the loop refused its configuration (exit 2); see the pod's log for the setting it named"
	}
	return fmt.Sprintf("the loop exited with code %d (%s)", code, c)
}

func infra(why string, evict bool) Outcome {
	return Outcome{Class: farmv1.OutcomeInfrastructure, Explanation: why, Evict: evict}
}

func terminatedState(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// allStatuses are the init containers' statuses, then the containers': the
// own-state step pulls the loop's image first, so an image that cannot be
// pulled shows there.
func allStatuses(pod *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
}

// failedInit is the first init container that ended with a non-zero code.
func failedInit(pod *corev1.Pod) (string, *corev1.ContainerStateTerminated) {
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return cs.Name, t
		}
	}
	return "", nil
}

func waitingReason(pod *corev1.Pod) string {
	for _, cs := range allStatuses(pod) {
		if cs.State.Waiting != nil && waitingReasons[cs.State.Waiting.Reason] {
			return cs.State.Waiting.Reason
		}
	}
	return ""
}

func anyStarted(pod *corev1.Pod) bool {
	for _, cs := range allStatuses(pod) {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

func disruption(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return ""
}

// Record turns an outcome into the attempt's status record.
func Record(pod *corev1.Pod, attemptN, retry int32, o Outcome, now time.Time) farmv1.AttemptRecord {
	r := farmv1.AttemptRecord{
		Attempt: attemptN, Retry: retry, Pod: pod.Name, Node: pod.Spec.NodeName,
		StartTime: pod.Status.StartTime, Sentinel: o.Sentinel, ExitCode: o.ExitCode,
		Outcome: o.Class, Counted: o.Counted, Message: o.Explanation,
	}
	if r.StartTime == nil && !pod.CreationTimestamp.IsZero() {
		r.StartTime = pod.CreationTimestamp.DeepCopy()
	}
	fin := metav1.NewTime(now)
	r.FinishTime = &fin
	if m := o.Message; m != nil {
		r.ExitReason = string(m.ExitReason)
		r.SystemPromptSHA256 = m.SystemPromptSHA256
		r.Usage = &farmv1.TokenUsage{PromptTokens: m.Usage.PromptTokens, CompletionTokens: m.Usage.CompletionTokens,
			CachedTokens: m.Usage.CachedTokens, CacheWriteTokens: m.Usage.CacheWriteTokens}
	}
	if o.ExitReason != "" {
		r.ExitReason = o.ExitReason
	}
	return r
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// definitivePull are the words in an image pull error that no retry fixes.
var definitivePull = []string{"not found", "manifest unknown", "repository does not exist", "pull access denied",
	"unauthorized", "authentication required", "forbidden", "denied", "invalid reference format"}

// configError returns the waiting reason and the kubelet's message when the
// loop container cannot start for a reason only a change of the run's
// configuration can fix: a Secret or ConfigMap it names does not exist, or an
// image that cannot exist or cannot be pulled with these credentials. A pull
// that failed for another reason (the registry is down) is not one: it is
// retried, and the startup timeout bounds it.
func configError(pod *corev1.Pod) (container, reason, message string) {
	for _, cs := range allStatuses(pod) {
		wt := cs.State.Waiting
		if wt == nil {
			continue
		}
		switch wt.Reason {
		case "InvalidImageName", "CreateContainerConfigError":
			return cs.Name, wt.Reason, wt.Message
		case "ErrImagePull", "ImagePullBackOff":
			low := strings.ToLower(wt.Message)
			for _, w := range definitivePull {
				if strings.Contains(low, w) {
					return cs.Name, wt.Reason, wt.Message
				}
			}
		}
	}
	return "", "", ""
}

// RigNotSetUpAt is when the run's last attempt ended because its rig
// answered that its hardware is not set up (exit reason rig_not_ready), or
// zero when it did not: the rig is then probed at once, and the next attempt
// waits for that probe (docs/rig-contract.md, "A rig that is not set up").
func RigNotSetUpAt(run *farmv1.AgentRun) time.Time {
	as := run.Status.Attempts
	if len(as) == 0 {
		return time.Time{}
	}
	last := as[len(as)-1]
	if last.ExitReason != string(contract.ReasonRigNotReady) || last.FinishTime == nil {
		return time.Time{}
	}
	return last.FinishTime.Time
}

// ProbeAnswersFrom is the earliest probe time that answers an attempt that
// found its rig not set up at the given finish time. Both times are recorded
// in whole seconds, so a probe in the second the attempt finished may have
// come before the rig said so: only a probe from the next second on counts.
func ProbeAnswersFrom(finished time.Time) time.Time {
	return finished.Truncate(time.Second).Add(time.Second)
}
