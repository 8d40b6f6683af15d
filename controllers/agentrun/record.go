package agentrun

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// recordEnded records the outcome of every attempt pod that ended. The status
// is written before any finalizer is removed, so a restarted manager finds
// either an unrecorded pod (and records it) or a recorded one (and only lets it go).
func (s *step) recordEnded(ctx context.Context) error {
	var done []ending
	recorded := false
	for _, pod := range s.pods {
		if !controllerutil.ContainsFinalizer(pod, farmv1.FinalizerOutcome) {
			if !terminal(pod) {
				s.live = append(s.live, pod)
			}
			continue
		}
		gone, unreachable := s.nodeOf(ctx, pod)
		o, ended := attempt.Classify(pod, attempt.World{
			Now: s.now, NodeGone: gone, NodeUnreachable: unreachable, Cancelling: s.stopReason() != nil,
			StartupTimeout: s.r.Config.StartupTimeout, ConfigErrorGrace: s.r.Config.configErrorGrace(),
		})
		if attempt.Recorded(&s.run.Status, pod.Name) {
			if !s.r.notes.stillLettingGo(client.ObjectKeyFromObject(s.run), pod) {
				done = append(done, ending{pod, o.Evict, gone, false})
			}
			continue
		}
		if !ended {
			s.live = append(s.live, pod)
			if pod.Status.Phase == corev1.PodPending {
				s.wake(pod.CreationTimestamp.Add(s.r.Config.StartupTimeout + time.Second))
			}
			if !gone && !unreachable && !s.run.Status.Phase.Finished() && s.stopReason() == nil {
				if err := s.watchStall(ctx, pod); err != nil {
					return err
				}
			}
			continue
		}
		s.record(ctx, pod, o)
		done = append(done, ending{pod, o.Evict, gone, true})
		recorded = true
	}
	s.noteApproval()
	if recorded {
		// A run that no longer needs its rig gives it back in the same write
		// that records the outcome: the pod has terminated, the record is the
		// durable memory, and a restart in between only repeats a no-op.
		if p := s.run.Status.Phase; (p.Finished() || p == farmv1.RunWaiting) && len(s.live) == 0 {
			if err := s.releaseRig(ctx); err != nil {
				return err
			}
		}
		if err := s.writeStatus(ctx); err != nil {
			return err
		}
	}
	for _, e := range done {
		if e.justRecorded && !e.evict && terminal(e.pod) {
			// The finalizer of a pod that ended by itself is bookkeeping:
			// the reconcile that the status write brings back removes it,
			// after the urgent work (urgency.go). The pod is recorded; a
			// restart in between only lets it go then.
			s.wake(s.now.Add(2 * time.Second))
			continue
		}
		if err := s.letGo(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// record appends one ended attempt to the status and moves the run on by its
// verdict (attempt.Apply holds the sentinel table).
func (s *step) record(ctx context.Context, pod *corev1.Pod, o attempt.Outcome) {
	n, retry := podAttempt(pod)
	rec := attempt.Record(pod, n, retry, o, s.now)
	cost := s.priceAttempt(ctx, &rec)
	if o.Mismatch {
		s.ev.mismatch(s.run, pod, o.Explanation)
	}
	if o.Message != nil && len(o.Message.Jobs) > 0 {
		s.materialiseJobs(ctx, pod.Labels[farmv1.LabelRig], o)
	}
	if m := o.Message; m != nil && m.Steered > 0 {
		// The loop's count of steer messages, which its last progress patch
		// may not have carried: steer runs end with the session by it.
		if s.run.Status.Progress == nil {
			s.run.Status.Progress = &farmv1.RunProgress{}
		}
		s.run.Status.Progress.Steered = max(s.run.Status.Progress.Steered, int32(m.Steered))
	}
	v := attempt.Apply(s.run, rec, o)
	if c := s.stopReason(); o.Class == farmv1.OutcomeCancelled && c != nil && c.phase != farmv1.RunCancelled {
		// The attempt was stopped for the run's deadline, not by spec.cancel:
		// the run fails as the stop says (DeadlineExceeded), not Cancelled.
		v = attempt.Verdict{Phase: c.phase, Reason: c.reason, Message: c.message}
	}
	if !v.Phase.Finished() {
		s.ev.attemptEnded(s.run, pod, rec) // a final phase's own event says how the run ended
	}
	s.enter(v, o)
	if s.run.Status.Phase == farmv1.RunRetrying && o.Counted {
		t := metav1.NewTime(s.now.Add(attempt.Backoff(rec.Attempt, s.r.Config.attemptBackoff())))
		s.run.Status.NextAttemptTime = &t
	}
	run := s.run
	s.written = append(s.written, func() {
		attemptsEnded.WithLabelValues(rec.Outcome).Inc()
		countUsage(run, rec.Usage, cost)
	})
}

// letGo lets a recorded pod go: the finalizer is removed, and a pod that will
// not end by itself (never started, a node gone) is deleted. The deletion is
// graceful — the node's kubelet confirms it, and the rig stays held until
// then — except on a node that is gone, where no kubelet ever will.
func (s *step) letGo(ctx context.Context, e ending) error {
	pod := e.pod
	patch := client.MergeFrom(pod.DeepCopy())
	controllerutil.RemoveFinalizer(pod, farmv1.FinalizerOutcome)
	switch err := s.r.Patch(ctx, pod, patch); {
	case err == nil:
		s.r.notes.letGo(client.ObjectKeyFromObject(s.run), pod)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("remove finalizer of pod %s: %w", pod.Name, err)
	}
	if (e.evict || !terminal(pod)) && (pod.DeletionTimestamp == nil || e.nodeGone) {
		var opts []client.DeleteOption
		if e.nodeGone {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		if err := s.r.Delete(ctx, pod, opts...); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// enter moves the run to the verdict's phase. A final phase never changes.
func (s *step) enter(v attempt.Verdict, o attempt.Outcome) {
	st := &s.run.Status
	if st.Phase.Finished() {
		return
	}
	gen := s.run.Generation
	switch v.Phase {
	case farmv1.RunSucceeded, farmv1.RunFailed, farmv1.RunCancelled:
		s.finishWith(v.Phase, v.Reason, v.Message)
	case farmv1.RunWaiting:
		st.Phase = farmv1.RunWaiting
		conditions.True(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonWaiting, v.Message)
		s.planFollowUp(o)
		s.countFinished(farmv1.RunWaiting)
		s.ev.phase(s.run, farmv1.RunWaiting, farmv1.ReasonWaiting, v.Message)
	case farmv1.RunRetrying:
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRetrying, v.Message)
		s.ev.phase(s.run, farmv1.RunRetrying, farmv1.ReasonRetrying, v.Message)
	}
}

// finishWith ends the run in a final phase, with the Succeeded condition's
// reason and message, its completion time, a metric and an Event.
func (s *step) finishWith(phase farmv1.RunPhase, reason, message string) {
	st := &s.run.Status
	st.Phase = phase
	status := metav1.ConditionFalse
	if phase == farmv1.RunSucceeded {
		status = metav1.ConditionTrue
	}
	conditions.Set(&st.Conditions, s.run.Generation, farmv1.ConditionSucceeded, status, reason, message)
	if st.CompletionTime == nil {
		t := metav1.NewTime(s.now)
		st.CompletionTime = &t
	}
	s.countFinished(phase)
	s.ev.phase(s.run, phase, reason, message)
}

// countFinished counts the run's end once the status that says so is
// written: a write that fails (a conflict) is retried by a reconcile that
// decides again, and must not count the run twice.
func (s *step) countFinished(phase farmv1.RunPhase) {
	sentinel := s.run.Status.Sentinel
	s.written = append(s.written, func() { runsFinished.WithLabelValues(string(phase), sentinel).Inc() })
}
