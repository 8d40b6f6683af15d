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

// collect gathers the collect runs that join the session of s.run before
// its first pod exists, records them in its status.joined, then marks each
// (status.collectedInto) so it leaves the queue. Joined is written first:
// a manager that stops between the writes finds the entries and marks the
// runs on its next pass, before any pod; and a run is marked only while the
// session's run holds the rig it waits for, so no marked run is ever also
// run alone. An entry whose run cannot join any more (cancelled, deleted)
// is dropped before the pod is made, so every collected trigger the pod
// carries belongs to a run that ends with it.
func (s *step) collect(ctx context.Context) error {
	run := s.run
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
	if err := s.r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), &fresh); err != nil {
		return fmt.Errorf("read run before its first attempt: %w", err)
	}
	if fresh.Status.CollectedInto != "" {
		return fmt.Errorf("the cache does not show yet that run %s was collected into run %s", run.Name, fresh.Status.CollectedInto)
	}
	// Gather only while the first pod does not exist (the API server says,
	// not the cache): a trigger added after the pod was made would never
	// reach the session.
	if !s.hasCollected() {
		exists, err := s.podExists(ctx, attempt.PodName(run.Name, 1, 0))
		if err != nil || exists {
			return err
		}
		if err := s.gather(ctx); err != nil {
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
		ok, err := s.markCollected(ctx, j, i)
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
		if err := s.writeStatus(ctx); err != nil {
			return err
		}
	}
	if len(names) > 0 && s.before.Phase != farmv1.RunRunning {
		s.ev.collectedRuns(run, s.heldRig, names)
	}
	return nil
}

// hasCollected reports whether the run's joined list holds collected runs.
func (s *step) hasCollected() bool {
	for _, j := range s.run.Status.Joined {
		if j.Mode == farmv1.QueueModeCollect {
			return true
		}
	}
	return false
}

// gather appends the collect runs waiting for the held rig by rigRef, with
// the same model, oldest first, to status.joined, and writes it.
func (s *step) gather(ctx context.Context) error {
	waiting, err := s.r.listWaiting(ctx, s.run.Namespace, "rig/"+s.heldRig)
	if err != nil {
		return err
	}
	sort.Slice(waiting, func(i, k int) bool { return queuedBefore(waiting[i], waiting[k]) })
	added := false
	for _, w := range waiting {
		if w.UID == s.run.UID || w.Spec.Mode() != farmv1.QueueModeCollect || w.Status.CollectedInto != "" ||
			w.Status.SteeredInto != "" || !equality.Semantic.DeepEqual(w.Spec.Model, s.run.Spec.Model) {
			continue
		}
		j := farmv1.JoinedRun{Name: w.Name, Mode: farmv1.QueueModeCollect, Trigger: w.Spec.Trigger, Attempt: 1}
		if !attempt.OpeningFits(s.run, j) {
			break // the rest wait for a session of their own
		}
		s.run.Status.Joined = append(s.run.Status.Joined, j)
		added = true
	}
	if !added {
		return nil
	}
	return s.writeStatus(ctx)
}

// markCollected marks the run of entry j (task number i+2 of the session)
// as collected into s.run, read and written on the API server. It reports
// false when that run can no longer join.
func (s *step) markCollected(ctx context.Context, j farmv1.JoinedRun, i int) (bool, error) {
	var jr farmv1.AgentRun
	err := s.r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: j.Name}, &jr)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get collected run %s: %w", j.Name, err)
	case jr.Status.CollectedInto == s.run.Name:
		return true, nil
	case !jr.WaitsForRig() || jr.Status.SteeredInto != "":
		return false, nil
	}
	st := &jr.Status
	gen := jr.Generation
	st.CollectedInto = s.run.Name
	st.Phase = farmv1.RunRunning
	st.Rig = s.heldRig // where its task runs (kubectl get ar); the Lease is the session's
	if st.QueuedAt == nil {
		t := jr.CreationTimestamp
		st.QueuedAt = &t
	}
	msg := fmt.Sprintf("collected into run %s's session on rig %s, as task %d; the run ends with that session's outcome", s.run.Name, s.heldRig, i+2)
	conditions.True(&st.Conditions, gen, farmv1.ConditionJoined, farmv1.ReasonCollected, msg)
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonCollected,
		fmt.Sprintf("run %s holds rig %s for the session this run joined", s.run.Name, s.heldRig))
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonCollected, msg)
	st.ObservedGeneration = gen
	setFinished(st, gen)
	if err := s.r.Status().Update(ctx, &jr); err != nil {
		return false, fmt.Errorf("mark run %s collected: %w", j.Name, err)
	}
	s.r.notes.wrote(&jr, s.now)
	s.ev.collected(&jr, s.run.Name, s.heldRig, i+2)
	return true, nil
}

func (s *step) podExists(ctx context.Context, name string) (bool, error) {
	var pod corev1.Pod
	err := s.r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: name}, &pod)
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
func (s *step) follow(ctx context.Context) error {
	if s.heldRig != "" {
		if len(s.live) > 0 {
			return s.stopLive(ctx, "the run's trigger joined another run's session")
		}
		if err := s.releaseRig(ctx); err != nil {
			return err
		}
	}
	name, mode := joinedTo(s.run)
	var h farmv1.AgentRun
	err := s.r.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: name}, &h)
	if apierrors.IsNotFound(err) {
		if mode == farmv1.QueueModeSteer {
			s.unsteer(name, "was deleted")
			return nil
		}
		s.finishWith(farmv1.RunFailed, farmv1.ReasonCollected, fmt.Sprintf("run %s, whose session this run joined, was deleted before it ended", name))
		return nil
	}
	if err != nil {
		return fmt.Errorf("get session run %s: %w", name, err)
	}
	idx := joinedIndex(&h, s.run.Name, mode)
	ended := h.Status.Phase.Finished() || h.Status.Phase == farmv1.RunWaiting
	switch {
	case idx < 0 && mode == farmv1.QueueModeSteer && !ended:
		return s.appendSteer(ctx, &h) // the join was cut between its two writes
	case idx < 0 && mode == farmv1.QueueModeSteer:
		s.unsteer(name, "ended before this run's message reached it")
		return nil
	case idx < 0:
		s.wake(s.now.Add(time.Second)) // the cache does not show the session's joined list yet
		return nil
	case !ended:
		return nil
	case mode == farmv1.QueueModeSteer && !delivered(&h, idx):
		s.unsteer(name, "ended before its loop read this run's message")
		return nil
	}
	s.takeOutcome(&h)
	return nil
}

// takeOutcome gives the run the ended session's phase, sentinel and recap.
func (s *step) takeOutcome(h *farmv1.AgentRun) {
	st := &s.run.Status
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
		conditions.True(&st.Conditions, s.run.Generation, farmv1.ConditionSucceeded, farmv1.ReasonWaiting, msg)
		s.countFinished(farmv1.RunWaiting)
		s.ev.phase(s.run, farmv1.RunWaiting, farmv1.ReasonWaiting, msg)
		return
	}
	s.finishWith(h.Status.Phase, reason, msg)
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
