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
func (s *step) advance(ctx context.Context) (then, error) {
	st := &s.run.Status
	gen := s.run.Generation
	if s.heldRig != "" && s.rig == nil {
		return writeNow, s.rigLost(ctx)
	}
	if s.heldRig != "" && s.run.WaitsForRig() && !rigMatches(s.run, s.rig) && len(s.live) == 0 {
		// Handed a rig its spec no longer names (a spec may change until the
		// run starts): give it back and queue like any other run.
		if err := s.releaseRig(ctx); err != nil || s.heldRig != "" {
			return writeNow, err
		}
	}
	leasedNow := false
	switch {
	case s.heldRig == "":
		if len(s.live) > 0 {
			return writeNow, nil // a pod from a lost rig is still stopping
		}
		c, err := s.acquire(ctx)
		switch {
		case err != nil:
			return writeNow, err
		case c == queuedLater:
			return deferStatus, nil
		case c == queued, c == steeredIn:
			return writeNow, nil
		}
		leasedNow = true
	case s.run.WaitsForRig():
		s.took(s.rig) // handed over by the run that held it before
		leasedNow = true
	}
	// Rebuilt from the world every time, so a status write lost to a conflict loses nothing.
	st.Rig = s.heldRig
	conditions.True(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonLeased,
		fmt.Sprintf("holding rig %s on node %s", s.rig.Name, s.rig.Spec.NodeName))
	if len(s.live) > 0 {
		st.Attempt, _ = podAttempt(s.live[len(s.live)-1])
		st.Phase = farmv1.RunRunning
		st.NextAttemptTime = nil
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRunning, s.runningMessage(s.live[len(s.live)-1]))
		return writeNow, nil
	}
	if left, limited := attempt.RunInputTokensLeft(s.run); limited && left <= 0 {
		// A fresh attempt would be refused its first request: end the run
		// as a loop that spent the budget ends it, without starting one.
		return writeNow, s.runBudgetSpent(ctx)
	}
	if p := s.rig.Status.Phase; p == farmv1.RigOffline || p == farmv1.RigNotReady {
		// Keep the rig for a while, but start nothing on a node or phone that
		// cannot run it: the rig's status change wakes this run when it is
		// back. Past the grace the rig goes back, and the run queues again.
		since := notReadySince(s.rig, s.now)
		if s.now.Sub(since) >= s.r.Config.rigNotReadyGrace() {
			if err := s.releaseRig(ctx); err != nil || s.heldRig != "" {
				return writeNow, err
			}
			st.Phase = farmv1.RunQueued
			conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonRigNotReady,
				fmt.Sprintf("rig %s has been %s since %s; it was given back and the run queues again", s.rig.Name, p, since.UTC().Format(time.RFC3339)))
			conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonQueued, "waiting for a rig: rig "+s.rig.Name+" is "+string(p))
			return writeNow, nil
		}
		s.wake(since.Add(s.r.Config.rigNotReadyGrace()))
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRigNotReady,
			fmt.Sprintf("attempt %d waits for rig %s, which is %s", attempt.Next(st).Attempt, s.rig.Name, p))
		return writeNow, nil
	}
	if t := st.NextAttemptTime; t != nil && s.now.Before(t.Time) {
		// Back off before a fresh attempt, holding the rig: the retry is meant
		// for this phone, in the state the last attempt left it.
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRetrying,
			fmt.Sprintf("attempt %d of %d starts at %s, after a back-off: attempt %d ended STUCK", attempt.Next(st).Attempt,
				s.run.Spec.Limits.MaxAttempts, t.UTC().Format(time.RFC3339), st.Attempt))
		s.wake(t.Time)
		return writeNow, nil
	}
	return s.startAttempt(ctx, leasedNow)
}

// runBudgetSpent fails a run whose recorded attempts have used all of
// spec.limits.maxRunInputTokens, with the reason and sentinel a loop that
// reports budget_exhausted gets, and gives the rig back.
func (s *step) runBudgetSpent(ctx context.Context) error {
	st := &s.run.Status
	var used int64
	if st.Usage != nil {
		used = st.Usage.PromptTokens
	}
	st.Sentinel, st.ExitReason = string(contract.Stuck), string(contract.ReasonBudgetExhausted)
	s.finishWith(farmv1.RunFailed, farmv1.ReasonBudgetExhausted, fmt.Sprintf(
		"the run's input token budget is spent: its %d recorded attempts used %d input tokens of limits.maxRunInputTokens %d; no attempt %d was started",
		len(st.Attempts), used, s.run.Spec.Limits.MaxRunInputTokens, attempt.Next(st).Attempt))
	return s.releaseRig(ctx)
}

// runningMessage says how the run's newest live pod stands: running, or — on
// a node that has not reported, or terminating a minute past its grace with
// no word from its kubelet — alive as far as anyone can tell, its rig held,
// and what an operator does when the node is gone for good.
func (s *step) runningMessage(pod *corev1.Pod) string {
	st := &s.run.Status
	goneForGood := fmt.Sprintf("if node %s is gone for good, `kubectl delete node` it or taint it %s=nodeshutdown:NoExecute",
		pod.Spec.NodeName, corev1.TaintNodeOutOfService)
	terminating := false
	if t := pod.DeletionTimestamp; t != nil {
		if terminating = s.now.After(t.Add(time.Minute)); !terminating {
			s.wake(t.Add(time.Minute + time.Second))
		}
	}
	switch {
	case s.unreachable != "":
		return fmt.Sprintf("attempt %d on rig %s may still be running: %s. It counts as alive, and the rig stays held, "+
			"until the node reports again; %s", st.Attempt, s.heldRig, s.unreachable, goneForGood)
	case terminating:
		return fmt.Sprintf("pod %s has been terminating since %s and its node has not confirmed it ended; the rig stays held until it does (%s)",
			pod.Name, pod.DeletionTimestamp.UTC().Format(time.RFC3339), goneForGood)
	}
	return fmt.Sprintf("attempt %d is running on rig %s", st.Attempt, s.heldRig)
}

// startAttempt creates the next attempt pod on the held rig. leasedNow says
// the run took the rig in this reconcile, so the Event names the rig too.
func (s *step) startAttempt(ctx context.Context, leasedNow bool) (then, error) {
	st := &s.run.Status
	gen := s.run.Generation
	next := attempt.Next(st)
	if why, err := s.modelKeyRefused(ctx); err != nil {
		return writeNow, err
	} else if why != "" {
		s.ev.podCreateFailed(s.run, errors.New(why))
		s.finishWith(farmv1.RunFailed, farmv1.ReasonInvalidConfig, why)
		return writeNow, s.releaseRig(ctx)
	}
	policies, why, err := s.toolPolicies(ctx)
	if err != nil {
		return writeNow, err
	} else if why != "" {
		s.ev.podCreateFailed(s.run, errors.New(why))
		s.finishWith(farmv1.RunFailed, farmv1.ReasonInvalidConfig, why)
		return writeNow, s.releaseRig(ctx)
	}
	// A collect run's first attempt takes the waiting collect runs into its
	// session first (joined.go): the pod's opening message numbers them all.
	if err := s.collect(ctx); err != nil {
		return writeNow, err
	}
	pod := attempt.BuildPod(attempt.Spec{
		Run: s.run, Rig: s.rig, Attempt: next.Attempt, Retry: next.Retry, Resume: next.Resume, Defaults: s.r.Config.Loop,
		ToolPolicies: policies,
	})
	created := false
	err = s.r.Create(ctx, pod)
	switch {
	case err == nil:
		if leasedNow {
			s.ev.rigLeasedAndStarted(s.run, s.rig, pod, next.Attempt, next.Retry)
		} else {
			s.ev.attemptStarted(s.run, pod, next.Attempt, next.Retry)
		}
		if st.StartTime == nil {
			s.r.notes.podCreated(client.ObjectKeyFromObject(s.run), s.now)
		}
		s.r.notes.created(client.ObjectKeyFromObject(s.run), pod, s.now)
		created = true
	case apierrors.IsAlreadyExists(err):
		// created by an earlier reconcile the cache has not shown yet
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		// Refused for good (admission, a quota, a policy): retrying the same
		// pod would hold the phone forever.
		s.ev.podCreateFailed(s.run, err)
		s.finishWith(farmv1.RunFailed, farmv1.ReasonInvalidConfig, fmt.Sprintf("the attempt pod was refused: %v", err))
		return writeNow, s.releaseRig(ctx)
	default:
		s.ev.podCreateFailed(s.run, err)
		return writeNow, fmt.Errorf("create attempt pod %s: %w", pod.Name, err)
	}
	st.Attempt = next.Attempt
	st.Phase = farmv1.RunRunning
	st.NextAttemptTime = nil
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRunning,
		fmt.Sprintf("attempt %d is running on rig %s", next.Attempt, s.heldRig))
	if created {
		return awaitPodEvent, nil
	}
	return writeNow, nil
}

// notReadySince is when the rig's Ready condition last changed (it is not
// Ready now); a rig with no such condition yet counts from now.
func notReadySince(rig *farmv1.DeviceRig, now time.Time) time.Time {
	if c := conditions.Get(rig.Status.Conditions, farmv1.ConditionReady); c != nil {
		return c.LastTransitionTime.Time
	}
	return now
}
