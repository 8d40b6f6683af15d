package agentrun

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// Queue modes (spec.queueMode). A queue run waits its turn and gets a
// session of its own. The two others join a session that another run holds
// the rig for, and end with that session's outcome:
//
//   - collect (this file): when a rig is handed to a collect run, the other
//     collect runs waiting for that rig by rigRef, with an equal spec.model,
//     join its session before its first pod is made. They cannot take
//     another rig, and the Lease the session's run holds keeps them from
//     this one, so joining them races with nothing. A collect run with a
//     rigSelector is collected only as a session's own run.
//   - steer (steer.go): a steer run naming by rigRef a rig whose holder is
//     Running is appended to the holder's status.joined; the loop reads it
//     at its next turn boundary.
//
// A joined run holds no rig and has no pod. Its reconcile follows the
// session's run (follow), which status.collectedInto or status.steeredInto
// names.

// collect gathers the collect runs that join the session of run before
// its first pod exists, records them in its status.joined, then marks each
// (status.collectedInto) so it leaves the queue. Joined is written first:
// a manager that stops between the writes finds the entries and marks the
// runs on its next pass, before any pod; and a run is marked only while the
// session's run holds the rig it waits for, so no marked run is ever also
// run alone. An entry whose run cannot join any more (cancelled, deleted)
// is dropped before the pod is made, so every collected trigger the pod
// carries belongs to a run that ends with it.
func (r *Reconciler) collect(ctx context.Context, run *farmv1.AgentRun, w world, status *statusWriter) error {
	if run.Spec.Mode() != farmv1.QueueModeCollect || len(run.Status.Attempts) > 0 {
		return nil
	}
	next := attempt.Next(&run.Status)
	if next.Attempt != 1 || next.Retry != 0 {
		return nil
	}
	// The run itself may have been collected into a session that has since
	// given the rig up, on a cache that does not show it yet.
	var fresh farmv1.AgentRun
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), &fresh); err != nil {
		return fmt.Errorf("read run before its first attempt: %w", err)
	}
	if fresh.Status.CollectedInto != "" {
		return fmt.Errorf("the cache does not show yet that run %s was collected into run %s", run.Name, fresh.Status.CollectedInto)
	}
	// Gather only while the first pod does not exist (the API server says,
	// not the cache): a trigger added after the pod was made would never
	// reach the session.
	if !hasCollected(run) {
		exists, err := r.podExists(ctx, run.Namespace, attempt.PodName(run.Name, 1, 0))
		if err != nil || exists {
			return err
		}
		if err := r.gather(ctx, run, w, status); err != nil {
			return err
		}
	}
	var names []string
	kept := run.Status.Joined[:0:0]
	for i, j := range run.Status.Joined {
		if j.Mode != farmv1.QueueModeCollect {
			kept = append(kept, j)
			continue
		}
		ok, err := r.markCollected(ctx, run, w, j, i)
		if err != nil {
			return err
		}
		if ok {
			kept = append(kept, j)
			names = append(names, j.Name)
		}
	}
	if len(kept) != len(run.Status.Joined) {
		run.Status.Joined = kept
		if err := status.write(ctx); err != nil {
			return err
		}
	}
	if len(names) > 0 && status.before.Phase != farmv1.RunRunning {
		r.ev().collectedRuns(run, w.held, names)
		decided(ctx, run, "collected waiting runs into the session", farmv1.ReasonCollected, "runs", names)
	}
	return nil
}

// hasCollected reports whether the run's joined list holds collected runs.
func hasCollected(run *farmv1.AgentRun) bool {
	for _, j := range run.Status.Joined {
		if j.Mode == farmv1.QueueModeCollect {
			return true
		}
	}
	return false
}

// gather appends the collect runs waiting for the held rig by rigRef, with
// the same model, oldest first, to status.joined, and writes it.
func (r *Reconciler) gather(ctx context.Context, run *farmv1.AgentRun, w world, status *statusWriter) error {
	waiting, err := r.listWaiting(ctx, run.Namespace, "rig/"+w.held)
	if err != nil {
		return err
	}
	sort.Slice(waiting, func(i, k int) bool { return queuedBefore(waiting[i], waiting[k]) })
	added := false
	for _, wr := range waiting {
		if wr.UID == run.UID || wr.Spec.Mode() != farmv1.QueueModeCollect || wr.Status.CollectedInto != "" ||
			wr.Status.SteeredInto != "" || !equality.Semantic.DeepEqual(wr.Spec.Model, run.Spec.Model) {
			continue
		}
		j := farmv1.JoinedRun{Name: wr.Name, Mode: farmv1.QueueModeCollect, Trigger: wr.Spec.Trigger, Attempt: 1}
		if !attempt.OpeningFits(run, j) {
			break // the rest wait for a session of their own
		}
		run.Status.Joined = append(run.Status.Joined, j)
		added = true
	}
	if !added {
		return nil
	}
	return status.write(ctx)
}

// markCollected marks the run of entry j (task number i+2 of the session)
// as collected into run, read and written on the API server. It reports
// false when that run can no longer join.
func (r *Reconciler) markCollected(ctx context.Context, run *farmv1.AgentRun, w world, j farmv1.JoinedRun, i int) (bool, error) {
	var jr farmv1.AgentRun
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: j.Name}, &jr)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get collected run %s: %w", j.Name, err)
	case jr.Status.CollectedInto == run.Name:
		return true, nil
	case !jr.WaitsForRig() || jr.Status.SteeredInto != "":
		return false, nil
	}
	st := &jr.Status
	gen := jr.Generation
	st.CollectedInto = run.Name
	st.Phase = farmv1.RunRunning
	st.Rig = w.held // where its task runs (kubectl get ar); the Lease is the session's
	if st.QueuedAt == nil {
		t := jr.CreationTimestamp
		st.QueuedAt = &t
	}
	msg := fmt.Sprintf("collected into run %s's session on rig %s, as task %d; the run ends with that session's outcome", run.Name, w.held, i+2)
	conditions.True(&st.Conditions, gen, farmv1.ConditionJoined, farmv1.ReasonCollected, msg)
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonCollected,
		fmt.Sprintf("run %s holds rig %s for the session this run joined", run.Name, w.held))
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonCollected, msg)
	st.ObservedGeneration = gen
	setFinished(st, gen)
	if err := r.Status().Update(ctx, &jr); err != nil {
		return false, fmt.Errorf("mark run %s collected: %w", j.Name, err)
	}
	r.notes.wroteAnother(&jr, w.now)
	r.ev().collected(&jr, run.Name, w.held, i+2)
	return true, nil
}

func (r *Reconciler) podExists(ctx context.Context, namespace, name string) (bool, error) {
	var pod corev1.Pod
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get pod %s: %w", name, err)
	}
	return true, nil
}

// joinedTo names the session's run a joined run follows, and how it joined.
func joinedTo(run *farmv1.AgentRun) (string, farmv1.QueueMode) {
	switch st := run.Status; {
	case st.CollectedInto != "":
		return st.CollectedInto, farmv1.QueueModeCollect
	case st.SteeredInto != "":
		return st.SteeredInto, farmv1.QueueModeSteer
	}
	return "", ""
}

// follow moves a joined run with its session: it runs while the session
// runs, and takes the session's phase, sentinel and recap when the session
// ends (a final phase, or Waiting and later what the wait ends in). A steer
// run whose message the session's loop never read goes back to the queue
// instead. A joined run holds no rig: one it holds (taken on a cache that
// did not show it joined yet) goes back at once.
func (r *Reconciler) follow(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod) (decision, error) {
	var wake time.Time
	if w.held != "" {
		if len(live) > 0 {
			return decision{}, r.stopLive(ctx, run, live, "the run's trigger joined another run's session")
		}
		released, err := r.releaseRig(ctx, run, w)
		if err != nil {
			return decision{}, err
		}
		wake = retryRelease(w, released)
	}
	d, err := r.followSession(ctx, run, w)
	d.wake = earliest(d.wake, wake)
	return d, err
}

// followSession reads the session's run that run joined and moves run with
// it (follow).
func (r *Reconciler) followSession(ctx context.Context, run *farmv1.AgentRun, w world) (decision, error) {
	name, mode := joinedTo(run)
	var h farmv1.AgentRun
	err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &h)
	if apierrors.IsNotFound(err) {
		if mode == farmv1.QueueModeSteer {
			r.unsteer(ctx, run, w.now, name, "was deleted")
			return decision{}, nil
		}
		r.finishWith(ctx, run, w.now, farmv1.RunFailed, farmv1.ReasonCollected, fmt.Sprintf("run %s, whose session this run joined, was deleted before it ended", name))
		return decision{}, nil
	}
	if err != nil {
		return decision{}, fmt.Errorf("get session run %s: %w", name, err)
	}
	idx := joinedIndex(&h, run.Name, mode)
	ended := h.Status.Phase.Finished() || h.Status.Phase == farmv1.RunWaiting
	switch {
	case idx < 0 && mode == farmv1.QueueModeSteer && !ended:
		return decision{}, r.appendSteer(ctx, run, w.now, &h) // the join was cut between its two writes
	case idx < 0 && mode == farmv1.QueueModeSteer:
		r.unsteer(ctx, run, w.now, name, "ended before this run's message reached it")
		return decision{}, nil
	case idx < 0:
		return wakeAt(w.now.Add(time.Second)), nil // the cache does not show the session's joined list yet
	case !ended:
		return decision{}, nil
	case mode == farmv1.QueueModeSteer && !delivered(&h, idx):
		r.unsteer(ctx, run, w.now, name, "ended before its loop read this run's message")
		return decision{}, nil
	}
	r.takeOutcome(ctx, run, w.now, &h)
	return decision{}, nil
}

// takeOutcome gives the run the ended session's phase, sentinel and recap.
func (r *Reconciler) takeOutcome(ctx context.Context, run *farmv1.AgentRun, now time.Time, h *farmv1.AgentRun) {
	st := &run.Status
	if st.Phase == h.Status.Phase {
		return
	}
	st.Sentinel, st.Recap, st.ExitReason = h.Status.Sentinel, h.Status.Recap, h.Status.ExitReason
	reason, how := farmv1.ReasonWaiting, ""
	if c := conditions.Get(h.Status.Conditions, farmv1.ConditionSucceeded); c != nil {
		reason, how = c.Reason, ": "+c.Message
	}
	msg := fmt.Sprintf("the session of run %s, which this run joined, ended %s%s", h.Name, h.Status.Phase, how)
	if h.Status.Phase == farmv1.RunWaiting {
		st.Phase = farmv1.RunWaiting
		conditions.True(&st.Conditions, run.Generation, farmv1.ConditionSucceeded, farmv1.ReasonWaiting, msg)
		r.ev().phase(run, farmv1.RunWaiting, farmv1.ReasonWaiting, msg)
		return
	}
	carryFollowUp(run, h)
	r.finishWith(ctx, run, now, h.Status.Phase, reason, msg)
}

// carryFollowUp records on a joined run the follow-up that the session's
// run made on WAIT: that follow-up's trigger carries every task of the
// session (sessionTask), this run's too, so it is where this run's task
// goes on. Only the made run is recorded, not the CronJob: the CronJob is
// the session's, and stopping this run must not drop it.
func carryFollowUp(run, h *farmv1.AgentRun) {
	fu := h.Status.FollowUp
	c := conditions.Get(h.Status.Conditions, farmv1.ConditionFollowUpScheduled)
	if fu == nil || fu.Run == "" || c == nil || c.Status != metav1.ConditionTrue || c.Reason != farmv1.ReasonFollowUpCreated {
		return
	}
	run.Status.FollowUp = &farmv1.FollowUpStatus{Run: fu.Run, Chain: fu.Chain, Context: fu.Context}
	conditions.True(&run.Status.Conditions, run.Generation, farmv1.ConditionFollowUpScheduled, farmv1.ReasonFollowUpCreated,
		fmt.Sprintf("follow-up run %s of run %s's session carries this run's task on", fu.Run, h.Name))
}

// joinedIndex is the place of name among h's joined runs of mode: among
// the steer entries alone for steer (the loop counts them so), or -1.
func joinedIndex(h *farmv1.AgentRun, name string, mode farmv1.QueueMode) int {
	n := 0
	for _, j := range h.Status.Joined {
		if j.Mode != mode {
			continue
		}
		if j.Name == name {
			return n
		}
		n++
	}
	return -1
}

// delivered reports whether the session's loop had steer message idx: in
// an opening message, or from its inbox, as the loop's progress (or, once
// recorded, its termination message) counts them.
func delivered(h *farmv1.AgentRun, idx int) bool {
	return h.Status.Progress != nil && int(h.Status.Progress.Steered) > idx
}

// sessionTask is the run as its WAIT follow-up sees it: when other runs
// joined its session, its trigger is every task of the session (the opening
// message a fresh attempt would get), so the follow-up carries them all on.
func sessionTask(run *farmv1.AgentRun) *farmv1.AgentRun {
	if len(run.Status.Joined) == 0 {
		return run
	}
	c := run.DeepCopy()
	c.Spec.Trigger = followup.OriginalTask(run)
	c.Spec.Trigger, _ = attempt.Opening(c)
	return c
}

// runNames lists names for an Event.
func runNames(names []string) string { return strings.Join(names, ", ") }
