package agentrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// advance moves a run that is not finished: it takes a rig if it has none,
// and keeps an attempt pod running on it.
func (r *Reconciler) advance(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod, status *statusWriter) (decision, error) {
	st := &run.Status
	gen := run.Generation
	if w.held != "" && w.rig == nil {
		return r.rigLost(ctx, run, w, live)
	}
	if w.held != "" && run.WaitsForRig() && !rigMatches(run, w.rig) && len(live) == 0 {
		// Handed a rig its spec no longer names (a spec may change until the
		// run starts): give it back and queue like any other run.
		released, err := r.releaseRig(ctx, run, w)
		if err != nil || !released {
			return wakeAt(retryRelease(w, released)), err
		}
		w = w.afterRelease(released)
	}
	var wake time.Time
	leasedNow := false
	switch {
	case w.held == "":
		if len(live) > 0 {
			return decision{}, nil // a pod from a lost rig is still stopping
		}
		got, err := r.acquire(ctx, run, w, status)
		switch {
		case err != nil:
			return wakeAt(got.wake), err
		case got.claim == queuedLater:
			return decision{then: writeLater, wake: got.wake}, nil
		case got.claim != took:
			return wakeAt(got.wake), nil
		}
		w, wake, leasedNow = w.holding(got.rig), got.wake, true
	case run.WaitsForRig():
		r.took(run, w.now, w.rig) // handed over by the run that held it before
		if len(live) == 0 {
			// (with a live pod, a reconcile before this one started it and
			// the start is still to be written: nothing was taken now)
			decided(ctx, run, "took a rig handed over", farmv1.ReasonLeased, "took", w.held)
			leasedNow = true
		}
	}
	// Rebuilt from the world every time, so a status write lost to a conflict loses nothing.
	st.Rig = w.held
	conditions.True(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonLeased,
		fmt.Sprintf("holding rig %s on node %s", w.rig.Name, w.rig.Spec.NodeName))
	if len(live) > 0 {
		pod := live[len(live)-1]
		st.Attempt, _ = podAttempt(pod)
		st.Phase = farmv1.RunRunning
		st.NextAttemptTime = nil
		keyFound(run) // the pod was made once the key was
		msg, confirmAt := runningMessage(run, w, pod)
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRunning, msg)
		if at, ok := r.startToRecordLater(run, status, w.now); ok {
			return decision{then: writeLater, wake: earliest(wake, confirmAt, at)}, nil
		}
		return wakeAt(earliest(wake, confirmAt)), nil
	}
	if left, limited := attempt.RunInputTokensLeft(run); limited && left <= 0 {
		// A fresh attempt would be refused its first request: end the run
		// as a loop that spent the budget ends it, without starting one.
		return r.runBudgetSpent(ctx, run, w)
	}
	if p := w.rig.Status.Phase; p == farmv1.RigOffline || p == farmv1.RigNotReady {
		// Keep the rig for a while, but start nothing on a node or phone that
		// cannot run it: the rig's status change wakes this run when it is
		// back. Past the grace the rig goes back, and the run queues again.
		since := notReadySince(w.rig, w.now)
		if w.now.Sub(since) >= r.Config.rigNotReadyGrace() {
			released, err := r.releaseRig(ctx, run, w)
			if err != nil || !released {
				return wakeAt(earliest(wake, retryRelease(w, released))), err
			}
			st.Phase = farmv1.RunQueued
			conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonRigNotReady,
				fmt.Sprintf("rig %s has been %s since %s; it was given back and the run queues again", w.rig.Name, p, since.UTC().Format(time.RFC3339)))
			conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonQueued, "waiting for a rig: rig "+w.rig.Name+" is "+string(p))
			decided(ctx, run, "gave a rig that is not ready back", farmv1.ReasonRigNotReady, "released", w.held, "rigPhase", p)
			return wakeAt(wake), nil
		}
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRigNotReady,
			fmt.Sprintf("attempt %d waits for rig %s, which is %s", attempt.Next(st).Attempt, w.rig.Name, p))
		return wakeAt(earliest(wake, since.Add(r.Config.rigNotReadyGrace()))), nil
	}
	if at, ok := waitsForProbe(run, w.rig, w.now); ok {
		// The last attempt found the rig not set up; the rig's status may
		// not know yet. Its controller probes it at once (devicerig,
		// notsetup.go); a NotReady answer then holds the run above.
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRigNotReady,
			fmt.Sprintf("attempt %d waits for rig %s to be probed again: the last attempt found its hardware not set up", attempt.Next(st).Attempt, w.rig.Name))
		return wakeAt(earliest(wake, at)), nil
	}
	if t := st.NextAttemptTime; t != nil && w.now.Before(t.Time) {
		// Back off before a fresh attempt, holding the rig: the retry is meant
		// for this phone, in the state the last attempt left it.
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRetrying,
			fmt.Sprintf("attempt %d of %d starts at %s, after a back-off: attempt %d ended STUCK", attempt.Next(st).Attempt,
				run.Spec.Limits.MaxAttempts, t.UTC().Format(time.RFC3339), st.Attempt))
		return wakeAt(earliest(wake, t.Time)), nil
	}
	d, err := r.startAttempt(ctx, run, w, leasedNow, status)
	d.wake = earliest(d.wake, wake)
	return d, err
}

// runBudgetSpent fails a run whose recorded attempts have used all of
// spec.limits.maxRunInputTokens, with the reason and sentinel a loop that
// reports budget_exhausted gets, and gives the rig back.
func (r *Reconciler) runBudgetSpent(ctx context.Context, run *farmv1.AgentRun, w world) (decision, error) {
	st := &run.Status
	var used int64
	if st.Usage != nil {
		used = st.Usage.PromptTokens
	}
	st.Sentinel, st.ExitReason = string(contract.Stuck), string(contract.ReasonBudgetExhausted)
	r.finishWith(ctx, run, w.now, farmv1.RunFailed, farmv1.ReasonBudgetExhausted, fmt.Sprintf(
		"the run's input token budget is spent: its %d recorded attempts used %d input tokens of limits.maxRunInputTokens %d; no attempt %d was started",
		len(st.Attempts), used, run.Spec.Limits.MaxRunInputTokens, attempt.Next(st).Attempt))
	return r.giveBack(ctx, run, w)
}

// startRecordDelay is how long after creating a run's first attempt pod the
// manager waits before it writes the run Running, as the Job controller
// batches a second of pod events into one Job status write: a session that
// ends sooner is recorded in one write, its start and its outcome together.
const startRecordDelay = time.Second

// startToRecordLater reports whether the status that records the run's start
// (Running, its first attempt, its rig) waits, and until when: while its
// first pod, created by this manager, is younger than startRecordDelay
// (startAttempt notes it). A manager that did not create the pod (it
// restarted since) writes at once, and so does a run already written
// Running, whose later attempts are news.
func (r *Reconciler) startToRecordLater(run *farmv1.AgentRun, status *statusWriter, now time.Time) (time.Time, bool) {
	if status.before.Phase == farmv1.RunRunning || status.before.StartTime != nil {
		return time.Time{}, false
	}
	due := r.notes.startRecordedAfter(client.ObjectKeyFromObject(run))
	if due.IsZero() || !now.Before(due) {
		return time.Time{}, false
	}
	return due, true
}

// startMayWait says whether the status recording a run's start may wait
// startRecordDelay: not when other runs decide by it — the runs queued for
// a capped model account count a run as waiting until its status says it
// holds a rig, and the runs that join a session (collect, steer) read the
// session's run's phase.
func startMayWait(run *farmv1.AgentRun, account modelAccount) bool {
	return !account.capped() && run.Spec.Mode() == farmv1.QueueModeQueue
}

// runningMessage says how the run's newest live pod stands: running, or — on
// a node that has not reported, or terminating a minute past its grace with
// no word from its kubelet — alive as far as anyone can tell, its rig held,
// and what an operator does when the node is gone for good. Before that
// minute is up, recheckAt is when it will be.
func runningMessage(run *farmv1.AgentRun, w world, pod *corev1.Pod) (msg string, recheckAt time.Time) {
	st := &run.Status
	goneForGood := fmt.Sprintf("if node %s is gone for good, `kubectl delete node` it or taint it %s=nodeshutdown:NoExecute",
		pod.Spec.NodeName, corev1.TaintNodeOutOfService)
	terminating := false
	if t := pod.DeletionTimestamp; t != nil {
		if terminating = w.now.After(t.Add(time.Minute)); !terminating {
			recheckAt = t.Add(time.Minute + time.Second)
		}
	}
	switch {
	case w.unreachable != "":
		return fmt.Sprintf("attempt %d on rig %s may still be running: %s. It counts as alive, and the rig stays held, "+
			"until the node reports again; %s", st.Attempt, w.held, w.unreachable, goneForGood), recheckAt
	case terminating:
		return fmt.Sprintf("pod %s has been terminating since %s and its node has not confirmed it ended; the rig stays held until it does (%s)",
			pod.Name, pod.DeletionTimestamp.UTC().Format(time.RFC3339), goneForGood), recheckAt
	}
	return fmt.Sprintf("attempt %d is running on rig %s", st.Attempt, w.held), recheckAt
}

// startAttempt creates the next attempt pod on the held rig. leasedNow says
// the run took the rig in this reconcile, so the Event names the rig too.
func (r *Reconciler) startAttempt(ctx context.Context, run *farmv1.AgentRun, w world, leasedNow bool, status *statusWriter) (decision, error) {
	st := &run.Status
	gen := run.Generation
	next := attempt.Next(st)
	key, err := r.checkModelKey(ctx, run)
	switch {
	case err != nil:
		return decision{}, err
	case key.refused != "":
		return r.refuse(ctx, run, w, errors.New(key.refused), key.refused)
	case key.missing:
		return r.awaitModelKey(ctx, run, w)
	}
	keyFound(run)
	if d, ok, err := r.ensureSlot(ctx, run, w, key.account); err != nil || !ok {
		return d, err
	}
	policies, why, err := r.toolPolicies(ctx, run)
	if err != nil {
		return decision{}, err
	} else if why != "" {
		return r.refuse(ctx, run, w, errors.New(why), why)
	}
	// A collect run's first attempt takes the waiting collect runs into its
	// session first (joined.go): the pod's opening message numbers them all.
	if err := r.collect(ctx, run, w, status); err != nil {
		return decision{}, err
	}
	pod := attempt.BuildPod(attempt.Spec{
		Run: run, Rig: w.rig, Attempt: next.Attempt, Retry: next.Retry, Resume: next.Resume, Defaults: r.Config.Loop,
		ToolPolicies: policies, ModelKeySHA256: key.sha256,
	})
	created := false
	err = r.Create(ctx, pod)
	switch {
	case err == nil:
		// A run's first start is routine, and its RigLeased condition, its
		// status.attempts and the pod tell it; an Event marks the starts
		// that follow a STUCK or an infrastructure failure.
		switch {
		case next.Attempt <= 1 && next.Retry == 0:
		case leasedNow:
			r.ev().rigLeasedAndStarted(run, w.rig, pod, next.Attempt, next.Retry)
		default:
			r.ev().attemptStarted(run, pod, next.Attempt, next.Retry)
		}
		if st.StartTime == nil {
			r.notes.podCreated(client.ObjectKeyFromObject(run), w.now)
			if startMayWait(run, key.account) {
				r.notes.recordStartAfter(client.ObjectKeyFromObject(run), w.now.Add(startRecordDelay))
			}
		}
		r.notes.created(client.ObjectKeyFromObject(run), pod, w.now)
		created = true
	case apierrors.IsAlreadyExists(err):
		// created by an earlier reconcile the cache has not shown yet
		r.notes.madeUnknown(client.ObjectKeyFromObject(run))
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		// Refused for good (admission, a quota, a policy): retrying the same
		// pod would hold the phone forever.
		return r.refuse(ctx, run, w, err, fmt.Sprintf("the attempt pod was refused: %v", err))
	default:
		r.notes.madeUnknown(client.ObjectKeyFromObject(run)) // it may exist all the same
		r.ev().podCreateFailed(run, err)
		return decision{}, fmt.Errorf("create attempt pod %s: %w", pod.Name, err)
	}
	st.Attempt = next.Attempt
	st.Phase = farmv1.RunRunning
	st.NextAttemptTime = nil
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRunning,
		fmt.Sprintf("attempt %d is running on rig %s", next.Attempt, w.held))
	if created {
		decided(ctx, run, "started an attempt", farmv1.ReasonRunning, "pod", pod.Name, "retry", next.Retry)
		return decision{then: awaitPodEvent}, nil
	}
	return decision{}, nil
}

// refuse fails the run InvalidConfig instead of starting its attempt: a
// Warning Event tells cause, the Succeeded condition tells why, and the rig
// goes back.
func (r *Reconciler) refuse(ctx context.Context, run *farmv1.AgentRun, w world, cause error, why string) (decision, error) {
	r.ev().podCreateFailed(run, cause)
	r.finishWith(ctx, run, w.now, farmv1.RunFailed, farmv1.ReasonInvalidConfig, why)
	return r.giveBack(ctx, run, w)
}

// notReadySince is when the rig's Ready condition last changed (it is not
// Ready now); a rig with no such condition yet counts from now.
func notReadySince(rig *farmv1.DeviceRig, now time.Time) time.Time {
	if c := conditions.Get(rig.Status.Conditions, farmv1.ConditionReady); c != nil {
		return c.LastTransitionTime.Time
	}
	return now
}

// probeWait bounds how long a run waits for its rig to be probed after an
// attempt found it not set up; past it the next attempt starts on what the
// rig's status says (a manager whose DeviceRig controller is elsewhere, or
// slow).
const probeWait = 30 * time.Second

// waitsForProbe says whether the run's last attempt ended with the rig not
// set up and the rig has not been probed since, and when to look again.
func waitsForProbe(run *farmv1.AgentRun, rig *farmv1.DeviceRig, now time.Time) (time.Time, bool) {
	ended := attempt.RigNotSetUpAt(run)
	if ended.IsZero() {
		return time.Time{}, false
	}
	if p := rig.Status.LastProbeTime; (p != nil && !p.Time.Before(attempt.ProbeAnswersFrom(ended))) || !now.Before(ended.Add(probeWait)) {
		return time.Time{}, false
	}
	return earliest(now.Add(time.Second), ended.Add(probeWait)), true
}
