package agentrun

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// writeStatus writes the run's status when this reconcile changed it.
func (s *step) writeStatus(ctx context.Context) error {
	s.run.Status.ObservedGeneration = s.run.Generation
	setFinished(&s.run.Status, s.run.Generation)
	counts := s.written
	s.written = nil // counted once, by the write that makes them true
	if equality.Semantic.DeepEqual(s.before, &s.run.Status) {
		return nil
	}
	if err := s.r.Status().Update(ctx, s.run); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	for _, count := range counts {
		count()
	}
	if s.before.StartTime == nil && s.run.Status.StartTime != nil {
		s.observeStart()
	}
	s.r.notes.wrote(s.run, s.r.Clock.Now())
	s.before = s.run.Status.DeepCopy()
	return nil
}

// observeStart observes the queue wait and the time to pod once, when the
// status that first records the start has been written.
func (s *step) observeStart() {
	created := s.run.CreationTimestamp.Time
	started := s.run.Status.StartTime.Time
	leased := started
	leasedAt, podAt := s.r.notes.takeStart(client.ObjectKeyFromObject(s.run))
	if !podAt.IsZero() {
		started = podAt
	}
	if !leasedAt.IsZero() {
		leased = leasedAt
	}
	observe := s.r.observeStart
	if observe == nil {
		observe = func(wait, toPod time.Duration) {
			queueWait.Observe(wait.Seconds())
			timeToPod.Observe(toPod.Seconds())
		}
	}
	observe(leased.Sub(created), started.Sub(created))
}

// setFinished derives the Finished condition from the phase. Every status
// write passes through writeStatus, which calls it, so no path that ends a
// run (a sentinel, cancel, a deadline, a queue timeout, InvalidConfig, a
// follow-up made) can leave Finished behind its phase, and a run written by
// an operator that did not know the condition gets it on its next reconcile.
// Waiting is not finished: a follow-up is still to come, and the run ends
// Succeeded (FollowedUp) or Failed once it has.
func setFinished(st *farmv1.AgentRunStatus, gen int64) {
	phase := st.Phase
	if phase == "" {
		phase = farmv1.RunPending
	}
	how := ""
	if c := conditions.Get(st.Conditions, farmv1.ConditionSucceeded); c != nil && c.Message != "" {
		how = ": " + c.Message
	}
	switch {
	case phase.Finished():
		if c := conditions.Get(st.Conditions, farmv1.ConditionSucceeded); c != nil {
			how = " (" + c.Reason + ")" + how
		}
		conditions.True(&st.Conditions, gen, farmv1.ConditionFinished, string(phase), "the run ended "+string(phase)+how)
	case phase == farmv1.RunWaiting:
		msg := "the run waits for its follow-up" + how
		if fu := st.FollowUp; fu != nil && fu.Run != "" && fu.FireTime != nil {
			msg = fmt.Sprintf("the run waits for its follow-up %s at %s%s", fu.Run, fu.FireTime.UTC().Format(time.RFC3339), how)
		}
		conditions.False(&st.Conditions, gen, farmv1.ConditionFinished, farmv1.ReasonWaiting, msg)
	default:
		conditions.False(&st.Conditions, gen, farmv1.ConditionFinished, farmv1.ReasonInProgress, "the run is "+string(phase)+how)
	}
}
