package agentrun

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// ending is an attempt pod whose outcome is recorded and that may now go.
type ending struct {
	pod *corev1.Pod
	// evict: the pod will not end by itself (never started, a node gone).
	evict bool
	// nodeGone: the pod's node is deleted or out of service; no kubelet will
	// ever confirm its end.
	nodeGone bool
	// justRecorded: this reconcile recorded the pod's outcome.
	justRecorded bool
}

// recorded is what recording the ended attempts found: the live pods, the
// recorded pods that may now go, whether this reconcile recorded an outcome
// (the status then holds it, unwritten), and when to look again.
type recorded struct {
	live    []*corev1.Pod // pods whose loop may still be running
	endings []ending
	any     bool
	wake    time.Time
}

// recordEnded records, in the run's status, the outcome of every attempt
// pod that ended; Reconcile writes it, then lets the pods go (letGoAll).
func (r *Reconciler) recordEnded(ctx context.Context, run *farmv1.AgentRun, w world) (recorded, error) {
	var res recorded
	for _, pod := range w.pods {
		if !controllerutil.ContainsFinalizer(pod, farmv1.FinalizerOutcome) {
			if !terminal(pod) {
				res.live = append(res.live, pod)
			}
			continue
		}
		node := w.nodes[pod.Name]
		o, ended := attempt.Classify(pod, attempt.World{
			Now: w.now, NodeGone: node.gone, NodeUnreachable: node.unreachable, Cancelling: w.stop != nil,
			StartupTimeout: r.Config.StartupTimeout, ConfigErrorGrace: r.Config.configErrorGrace(),
		})
		if attempt.Recorded(&run.Status, pod.Name) {
			if !r.notes.stillLettingGo(client.ObjectKeyFromObject(run), pod) {
				res.endings = append(res.endings, ending{pod, o.Evict, node.gone, false})
			}
			continue
		}
		if !ended {
			res.live = append(res.live, pod)
			if pod.Status.Phase == corev1.PodPending {
				res.wake = earliest(res.wake, pod.CreationTimestamp.Add(r.Config.StartupTimeout+time.Second))
			}
			continue
		}
		r.record(ctx, run, w, pod, o)
		res.endings = append(res.endings, ending{pod, o.Evict, node.gone, true})
		res.any = true
	}
	return res, nil
}

// letGoAll lets the recorded pods go (letGo), once their outcome is written.
// The finalizer of a pod that ended by itself is bookkeeping: the reconcile
// that the status write brings back removes it, after the urgent work
// (urgency.go), and letGoAll returns when to look again for it. The pod is
// recorded; a restart in between only lets it go then.
func (r *Reconciler) letGoAll(ctx context.Context, run *farmv1.AgentRun, now time.Time, endings []ending) (time.Time, error) {
	var wake time.Time
	for _, e := range endings {
		if e.justRecorded && !e.evict && terminal(e.pod) {
			wake = now.Add(2 * time.Second)
			continue
		}
		if err := r.letGo(ctx, run, e); err != nil {
			return wake, err
		}
	}
	return wake, nil
}

// record appends one ended attempt to the status and moves the run on by its
// verdict (attempt.Apply holds the sentinel table).
func (r *Reconciler) record(ctx context.Context, run *farmv1.AgentRun, w world, pod *corev1.Pod, o attempt.Outcome) {
	n, retry := podAttempt(pod)
	rec := attempt.Record(pod, n, retry, o, w.now)
	r.priceAttempt(ctx, run, &rec)
	if o.Mismatch {
		r.ev().mismatch(run, pod, o.Explanation)
	}
	if o.Message != nil && len(o.Message.Jobs) > 0 {
		r.materialiseJobs(ctx, run, w.now, pod.Labels[farmv1.LabelRig], o)
	}
	if m := o.Message; m != nil && m.Steered > 0 {
		// The loop's count of steer messages, which its last progress patch
		// may not have carried: steer runs end with the session by it.
		if run.Status.Progress == nil {
			run.Status.Progress = &farmv1.RunProgress{}
		}
		run.Status.Progress.Steered = max(run.Status.Progress.Steered, int32(m.Steered))
	}
	if run.Status.Rig == "" {
		// The pod ended before a status recorded its start (startRecordDelay,
		// or a busy manager): the pod says which rig it ran on.
		run.Status.Rig = pod.Labels[farmv1.LabelRig]
	}
	v := attempt.Apply(run, rec, o)
	if c := w.stop; o.Class == farmv1.OutcomeCancelled && c != nil && c.phase != farmv1.RunCancelled {
		// The attempt was stopped for the run's deadline, not by spec.cancel:
		// the run fails as the stop says (DeadlineExceeded), not Cancelled.
		v = attempt.Verdict{Phase: c.phase, Reason: c.reason, Message: c.message}
	}
	decided(ctx, run, "attempt ended", rec.Outcome, "pod", pod.Name, "phase", v.Phase)
	if !v.Phase.Finished() {
		r.ev().attemptEnded(run, pod, rec) // a final phase's own event says how the run ended
	}
	r.enter(ctx, run, w.now, v, o)
	if run.Status.Phase == farmv1.RunRetrying && o.Counted {
		t := metav1.NewTime(w.now.Add(attempt.Backoff(rec.Attempt, r.Config.attemptBackoff())))
		run.Status.NextAttemptTime = &t
	}
}

// letGo lets a recorded pod go: the finalizer is removed, and a pod that will
// not end by itself (never started, a node gone) is deleted. The deletion is
// graceful — the node's kubelet confirms it, and the rig stays held until
// then — except on a node that is gone, where no kubelet ever will.
func (r *Reconciler) letGo(ctx context.Context, run *farmv1.AgentRun, e ending) error {
	pod := e.pod
	switch err := r.dropOutcomeFinalizer(ctx, pod); {
	case err == nil:
		r.notes.letGo(client.ObjectKeyFromObject(run), pod)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("remove finalizer of pod %s: %w", pod.Name, err)
	}
	if (e.evict || !terminal(pod)) && (pod.DeletionTimestamp == nil || e.nodeGone) {
		var opts []client.DeleteOption
		if e.nodeGone {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		if err := r.Delete(ctx, pod, opts...); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// enter moves the run to the verdict's phase. A final phase never changes.
func (r *Reconciler) enter(ctx context.Context, run *farmv1.AgentRun, now time.Time, v attempt.Verdict, o attempt.Outcome) {
	st := &run.Status
	if st.Phase.Finished() {
		return
	}
	gen := run.Generation
	switch v.Phase {
	case farmv1.RunSucceeded, farmv1.RunFailed, farmv1.RunCancelled:
		r.finishWith(ctx, run, now, v.Phase, v.Reason, v.Message)
	case farmv1.RunWaiting:
		st.Phase = farmv1.RunWaiting
		conditions.True(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonWaiting, v.Message)
		planFollowUp(run, now, o)
		r.ev().phase(run, farmv1.RunWaiting, farmv1.ReasonWaiting, v.Message)
	case farmv1.RunRetrying:
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRetrying, v.Message)
		r.ev().phase(run, farmv1.RunRetrying, farmv1.ReasonRetrying, v.Message)
	}
}

// finishWith ends the run in a final phase, with the Succeeded condition's
// reason and message, its completion time and an Event. The finished-run
// counter moves once the status that says so is written (status.go).
func (r *Reconciler) finishWith(ctx context.Context, run *farmv1.AgentRun, now time.Time, phase farmv1.RunPhase, reason, message string) {
	st := &run.Status
	st.Phase = phase
	status := metav1.ConditionFalse
	if phase == farmv1.RunSucceeded {
		status = metav1.ConditionTrue
	}
	conditions.Set(&st.Conditions, run.Generation, farmv1.ConditionSucceeded, status, reason, message)
	if st.CompletionTime == nil {
		t := metav1.NewTime(now)
		st.CompletionTime = &t
	}
	decided(ctx, run, "run finished", reason, "phase", phase)
	r.ev().phase(run, phase, reason, message)
}

// dropOutcomeFinalizer removes the outcome finalizer from the pod with a
// merge patch of its finalizers alone, the same patch client.MergeFrom
// would compute from a copy of the whole pod, without the copy and the
// two encodings of the pod that computing it takes.
func (r *Reconciler) dropOutcomeFinalizer(ctx context.Context, pod *corev1.Pod) error {
	var keep []string
	for _, f := range pod.Finalizers {
		if f != farmv1.FinalizerOutcome {
			keep = append(keep, f)
		}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep}})
	if err != nil {
		return err
	}
	return r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, data))
}
