package agentrun

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeStatus writes the run's status when this reconcile changed it.
func (s *step) writeStatus(ctx context.Context) error {
	s.run.Status.ObservedGeneration = s.run.Generation
	if equality.Semantic.DeepEqual(s.before, &s.run.Status) {
		return nil
	}
	if err := s.r.Status().Update(ctx, s.run); err != nil {
		return fmt.Errorf("update status: %w", err)
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
