package agentrun

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// watchdog watches the run's live attempts for a stall (watchStall): those
// whose outcome is not recorded yet, on a node that can report, of a run not
// finished and not being stopped. It returns when a heartbeat would go stale.
func (r *Reconciler) watchdog(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod) (time.Time, error) {
	if run.Status.Phase.Finished() || w.stop != nil {
		return time.Time{}, nil
	}
	var wake time.Time
	for _, pod := range live {
		node, watched := w.nodes[pod.Name] // the pods that keep their outcome finalizer
		if !watched || node.gone || node.unreachable {
			continue
		}
		staleAt, err := r.watchStall(ctx, run, w.now, pod)
		if err != nil {
			return wake, err
		}
		wake = earliest(wake, staleAt)
	}
	return wake, nil
}

// watchStall is the stall watchdog of a running attempt pod. The loop's
// heartbeat is status.progress.updatedAt, renewed on every turn and every
// tool result; before its first one, the pod's start. A pod with no
// heartbeat for spec.limits.stallSeconds is marked stalled (an annotation
// that says what was last seen, so a restarted manager records it the same
// way) and stopped gracefully, as cancel stops a pod: it stays the run's
// live attempt, and its rig stays held, until its kubelet reports it ended.
// Its ending is then recorded a counted STUCK (Stalled) and retried like
// one. Otherwise it returns when the heartbeat would be stale.
func (r *Reconciler) watchStall(ctx context.Context, run *farmv1.AgentRun, now time.Time, pod *corev1.Pod) (time.Time, error) {
	if pod.Annotations[farmv1.AnnotationStalled] != "" {
		return time.Time{}, r.stopPods(ctx, []*corev1.Pod{pod}, nil) // marked, but the deletion did not go through
	}
	timeout := run.Spec.Limits.StallTimeout()
	if timeout <= 0 || pod.Status.Phase != corev1.PodRunning || pod.Status.StartTime == nil || pod.DeletionTimestamp != nil {
		return time.Time{}, nil
	}
	beat, _ := heartbeat(pod, run.Status.Progress)
	if now.Before(beat.Add(timeout)) {
		return beat.Add(timeout), nil
	}
	// The cache may lag the loop's newest patch by a moment: judge by the
	// API server's copy before stopping anything.
	var fresh farmv1.AgentRun
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), &fresh); err != nil {
		return time.Time{}, fmt.Errorf("read the run's progress: %w", err)
	}
	beat, seen := heartbeat(pod, fresh.Status.Progress)
	if now.Before(beat.Add(timeout)) {
		return beat.Add(timeout), nil
	}
	why := fmt.Sprintf("no progress for %ds: last heartbeat %s", int64(timeout/time.Second), beat.UTC().Format(time.RFC3339))
	if seen != nil {
		why += fmt.Sprintf(", turn %d", seen.Turn)
		if seen.LastTool != "" {
			why += ", last tool " + seen.LastTool
		}
	} else {
		why += " (the pod's start; the loop reported no progress)"
	}
	patch := client.MergeFrom(pod.DeepCopy())
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, farmv1.AnnotationStalled, why)
	if err := r.Patch(ctx, pod, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return time.Time{}, nil
		}
		return time.Time{}, fmt.Errorf("mark pod %s stalled: %w", pod.Name, err)
	}
	r.ev().stalled(run, pod, why)
	decided(ctx, run, "stopping a stalled attempt", farmv1.OutcomeStalled, "pod", pod.Name, "why", why)
	return time.Time{}, r.stopPods(ctx, []*corev1.Pod{pod}, nil)
}

// heartbeat is the attempt pod's last sign of life: the later of its start
// and the progress's updatedAt, when that progress is this attempt's. seen
// is that progress (nil when the loop has reported none for this attempt).
func heartbeat(pod *corev1.Pod, p *farmv1.RunProgress) (beat time.Time, seen *farmv1.RunProgress) {
	beat = pod.Status.StartTime.Time
	n, _ := podAttempt(pod)
	if p == nil || p.Attempt != n {
		return beat, nil
	}
	if t, err := time.Parse(time.RFC3339, p.UpdatedAt); err == nil && t.After(beat) {
		return t, p
	}
	return beat, p
}
