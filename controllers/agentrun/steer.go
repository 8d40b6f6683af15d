package agentrun

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// steer delivers a steer run into the running session of the rig it names:
// the run whose Lease holds the rig, Running, with a live attempt pod. It
// reports whether the run joined. The run marks itself first
// (status.steeredInto, written before the holder is touched), then appends
// itself to the holder's status.joined (optimistic concurrency on the
// holder's status): a manager that stops between the two finds the mark
// and completes the append while the session runs (follow), or sends the
// run back to the queue if it has ended. The loop reads the entry at its
// next turn boundary.
//
// A steer run with a rigSelector, one whose rig has no running session, and
// one that already went back to the queue once (ReasonSteerUndelivered)
// queue like queue runs.
func (r *Reconciler) steer(ctx context.Context, run *farmv1.AgentRun, w world, status *statusWriter) (bool, error) {
	ref := run.Spec.RigRef
	if run.Spec.Mode() != farmv1.QueueModeSteer || ref == nil {
		return false, nil
	}
	if c := conditions.Get(run.Status.Conditions, farmv1.ConditionJoined); c != nil && c.Reason == farmv1.ReasonSteerUndelivered {
		return false, nil
	}
	l, err := lease.Get(ctx, r.Client, run.Namespace, ref.Name)
	if err != nil || l == nil {
		return false, err
	}
	name, uid := lease.HolderRun(l)
	if uid == run.UID || name == "" {
		return false, nil
	}
	var h farmv1.AgentRun
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &h); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("get run %s holding rig %s: %w", name, ref.Name, err)
	}
	if h.UID != uid || h.Status.Phase != farmv1.RunRunning || h.Spec.Cancel || h.DeletionTimestamp != nil {
		return false, nil
	}
	if live, err := r.hasLivePod(ctx, &h); err != nil || !live {
		return false, err
	}
	j := farmv1.JoinedRun{Name: run.Name, Mode: farmv1.QueueModeSteer, Trigger: run.Spec.Trigger, Attempt: h.Status.Attempt}
	if !attempt.OpeningFits(&h, j) {
		return false, nil // no room in the session: a session of its own
	}
	st := &run.Status
	gen := run.Generation
	markQueued(run, w.now)
	st.SteeredInto, st.Phase = h.Name, farmv1.RunRunning
	st.Rig = ref.Name // where its message goes (kubectl get ar); the Lease is the holder's
	msg := fmt.Sprintf("steered into run %s's running session on rig %s; its loop reads this run's trigger at its next turn, "+
		"and the run ends with that session's outcome", h.Name, ref.Name)
	conditions.True(&st.Conditions, gen, farmv1.ConditionJoined, farmv1.ReasonSteered, msg)
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonSteered,
		fmt.Sprintf("run %s holds rig %s for the session this run joined", h.Name, ref.Name))
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonSteered, msg)
	r.ev().steered(run, h.Name, ref.Name)
	decided(ctx, run, "steered into a running session", farmv1.ReasonSteered, "session", h.Name)
	if err := status.write(ctx); err != nil {
		return true, err
	}
	return true, r.appendSteer(ctx, run, w.now, &h)
}

// appendSteer appends run to h's status.joined as a steer entry, unless
// it is there. A conflict is an error: the next reconcile (follow) reads h
// again and decides again.
func (r *Reconciler) appendSteer(ctx context.Context, run *farmv1.AgentRun, now time.Time, h *farmv1.AgentRun) error {
	if joinedIndex(h, run.Name, farmv1.QueueModeSteer) >= 0 {
		return nil
	}
	j := farmv1.JoinedRun{Name: run.Name, Mode: farmv1.QueueModeSteer, Trigger: run.Spec.Trigger, Attempt: h.Status.Attempt}
	if !attempt.OpeningFits(h, j) {
		r.unsteer(ctx, run, now, h.Name, "has no room for another run")
		return nil
	}
	h = h.DeepCopy()
	h.Status.Joined = append(h.Status.Joined, j)
	if err := r.Status().Update(ctx, h); err != nil {
		return fmt.Errorf("append steer run %s to run %s: %w", run.Name, h.Name, err)
	}
	r.notes.wroteAnother(h, now)
	r.ev().steerJoined(h, run.Name, joinedIndex(h, run.Name, farmv1.QueueModeSteer)+1)
	return nil
}

// unsteer sends a steer run back to the queue, as a plain run: the session
// it was steered into (run name) ended — or is gone — before its loop had
// the run's message.
func (r *Reconciler) unsteer(ctx context.Context, run *farmv1.AgentRun, now time.Time, name, why string) {
	st := &run.Status
	gen := run.Generation
	st.SteeredInto, st.Rig = "", ""
	st.Phase = farmv1.RunQueued
	// Back at its place by creation time; limits.queueTimeoutSeconds
	// counts from now, as for a run that gave a rig back.
	t := metav1.NewTime(now)
	st.QueuedAt = &t
	msg := fmt.Sprintf("run %s's session %s; the run queues again as a plain run", name, why)
	conditions.False(&st.Conditions, gen, farmv1.ConditionJoined, farmv1.ReasonSteerUndelivered, msg)
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonSteerUndelivered, msg)
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonQueued, "waiting for a rig: "+msg)
	r.ev().steerUndelivered(run, msg)
	decided(ctx, run, "queued again", farmv1.ReasonSteerUndelivered, "session", name)
}

// hasLivePod reports whether run has an attempt pod whose loop may be
// running: not ended and not being deleted.
func (r *Reconciler) hasLivePod(ctx context.Context, run *farmv1.AgentRun) (bool, error) {
	pods, err := r.podsOf(ctx, run)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if !terminal(p) && p.DeletionTimestamp == nil {
			return true, nil
		}
	}
	return false, nil
}
