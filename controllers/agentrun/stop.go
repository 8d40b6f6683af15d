package agentrun

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// stopCause says why a run is being stopped from outside the agent.
type stopCause struct {
	phase           farmv1.RunPhase
	reason, message string
}

// stopReason says why the run must stop now (spec.cancel, the run's
// deadline), or nil; before the deadline it says when that is.
func stopReason(run *farmv1.AgentRun, now time.Time) (*stopCause, time.Time) {
	if run.Spec.Cancel {
		return &stopCause{farmv1.RunCancelled, farmv1.ReasonCancelled, "the run was cancelled (spec.cancel)"}, time.Time{}
	}
	if t := run.Spec.Limits.RunTimeoutSeconds; t > 0 {
		deadline := run.CreationTimestamp.Add(time.Duration(t) * time.Second)
		if !now.Before(deadline) {
			return &stopCause{farmv1.RunFailed, farmv1.ReasonDeadlineExceeded,
				fmt.Sprintf("the run exceeded limits.runTimeoutSeconds (%ds)", t)}, time.Time{}
		}
		return nil, deadline
	}
	return nil, time.Time{}
}

// stop ends the run from outside (w.stop): live pods are deleted gracefully
// (the loop gets SIGTERM and its grace period), and once none is left the rig
// is released.
func (r *Reconciler) stop(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod) (decision, error) {
	cause := w.stop
	if err := r.dropFollowUp(ctx, run, cause); err != nil {
		return decision{}, err
	}
	if len(live) > 0 {
		decided(ctx, run, "stopping the live attempt", cause.reason, "pods", len(live))
		return decision{}, r.stopLive(ctx, run, live, cause.message) // the pods' updates bring us back
	}
	released, err := r.releaseRig(ctx, run, w)
	if err != nil || !released {
		// A pod the cache has not shown yet is still alive.
		return wakeAt(retryRelease(w, released)), err
	}
	r.finishWith(ctx, run, w.now, cause.phase, cause.reason, cause.message)
	r.notes.doneWithRigs(run, w.now) // the cache may show it queued a while yet
	return decision{}, nil
}

// finish keeps a finished run tidy: the rig is released once no pod of the run
// is alive, and the run is deleted after its TTL.
func (r *Reconciler) finish(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod) (decision, error) {
	if len(live) > 0 {
		return decision{}, r.stopLive(ctx, run, live, "") // a pod of a finished run must not go on
	}
	released, err := r.releaseRig(ctx, run, w)
	if err != nil {
		return decision{}, err
	}
	wake := retryRelease(w, released)
	ttl := run.Spec.TTLSecondsAfterFinished
	if ttl == nil || run.Status.CompletionTime == nil {
		return wakeAt(wake), nil
	}
	at := run.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second)
	if w.now.Before(at) {
		return wakeAt(earliest(wake, at)), nil
	}
	log.FromContext(ctx).Info("deleting finished run after its TTL", "run", run.Name, "ttlSecondsAfterFinished", *ttl)
	if err := r.Delete(ctx, run, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return decision{}, fmt.Errorf("delete run after TTL: %w", err)
	}
	return wakeAt(wake), nil
}

// stopLive stops the run's live pods; why, when set, is told in an Event per pod.
func (r *Reconciler) stopLive(ctx context.Context, run *farmv1.AgentRun, live []*corev1.Pod, why string) error {
	var told func(*corev1.Pod)
	if why != "" {
		told = func(pod *corev1.Pod) { r.ev().stopping(run, pod.Name, why) }
	}
	return r.stopPods(ctx, live, told)
}

// stopPods deletes, gracefully, every pod that has not ended and is not
// already being deleted: each loop gets SIGTERM and its grace period. told,
// when set, is called for each pod before its deletion.
func (r *Reconciler) stopPods(ctx context.Context, pods []*corev1.Pod, told func(*corev1.Pod)) error {
	for _, pod := range pods {
		if terminal(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		if told != nil {
			told(pod)
		}
		if err := r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stop pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// cleanUpOrphans finishes what a deleted run leaves behind: finalizers on its
// pods, and its rig's Lease once no pod of it is alive.
func (r *Reconciler) cleanUpOrphans(ctx context.Context, name types.NamespacedName) error {
	var list corev1.PodList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(name.Namespace), client.MatchingLabels{farmv1.LabelRun: name.Name}); err != nil {
		return fmt.Errorf("list pods of deleted run %s: %w", name, err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	if err := r.stopPods(ctx, pods, nil); err != nil {
		return err
	}
	alive := false
	for _, pod := range pods {
		if !terminal(pod) {
			alive = true
		}
		if controllerutil.ContainsFinalizer(pod, farmv1.FinalizerOutcome) && (terminal(pod) || pod.Spec.NodeName == "") {
			if err := r.dropOutcomeFinalizer(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("remove finalizer of pod %s: %w", pod.Name, err)
			}
		}
	}
	if alive {
		return nil // the pods' updates bring us back
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, client.InNamespace(name.Namespace), client.MatchingLabels{farmv1.LabelRun: name.Name}); err != nil {
		return fmt.Errorf("list leases of deleted run %s: %w", name, err)
	}
	var run farmv1.AgentRun
	runErr := r.Get(ctx, name, &run)
	for i := range leases.Items {
		l := &leases.Items[i]
		_, uid := lease.HolderRun(l)
		if runErr == nil && run.UID == uid {
			continue // a run of the same name holds it: not an orphan
		}
		if err := lease.ReleaseStale(ctx, r.Client, l); err != nil {
			return err
		}
	}
	return nil
}
