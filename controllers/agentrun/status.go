package agentrun

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// statusWriter writes one run's status for a reconcile: only when it changed
// since it was read or last written, and then counts what the write made
// true. The chapters that must write mid-way, for the order of a protocol
// (collect, steer), are handed it; the others leave the writing to
// Reconcile.
type statusWriter struct {
	r      *Reconciler
	run    *farmv1.AgentRun
	before *farmv1.AgentRunStatus
}

func (r *Reconciler) statusWriter(run *farmv1.AgentRun) *statusWriter {
	return &statusWriter{r: r, run: run, before: run.Status.DeepCopy()}
}

// write writes the run's status when this reconcile changed it.
func (sw *statusWriter) write(ctx context.Context) error {
	run := sw.run
	run.Status.ObservedGeneration = run.Generation
	setFinished(&run.Status, run.Generation)
	if equality.Semantic.DeepEqual(sw.before, &run.Status) {
		return nil
	}
	if err := sw.r.Status().Update(ctx, run); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	count(sw.before, run)
	if sw.before.StartTime == nil && run.Status.StartTime != nil {
		sw.r.observeStarted(run)
	}
	sw.r.notes.wrote(run, sw.r.Clock.Now())
	sw.before = run.Status.DeepCopy()
	return nil
}

// count moves the attempt, token, cost and finished-run counters by what a
// written status holds that the one before it did not: a write lost to a
// conflict counts nothing, and the reconcile that decides again counts it.
func count(before *farmv1.AgentRunStatus, run *farmv1.AgentRun) {
	st := &run.Status
	for i := range st.Attempts {
		rec := &st.Attempts[i]
		if attempt.Recorded(before, rec.Pod) {
			continue
		}
		attemptsEnded.WithLabelValues(rec.Outcome).Inc()
		countUsage(run, rec.Usage)
	}
	if p := st.Phase; p != before.Phase && (p.Finished() || p == farmv1.RunWaiting) {
		runsFinished.WithLabelValues(string(p), st.Sentinel).Inc()
	}
}

// observeStarted observes the queue wait and the time to pod once, when the
// status that first records the start has been written.
func (r *Reconciler) observeStarted(run *farmv1.AgentRun) {
	created := run.CreationTimestamp.Time
	started := run.Status.StartTime.Time
	leased := started
	leasedAt, podAt := r.notes.takeStart(client.ObjectKeyFromObject(run))
	if !podAt.IsZero() {
		started = podAt
	}
	if !leasedAt.IsZero() {
		leased = leasedAt
	}
	observe := r.observeStart
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
	setKstatus(st, gen)
}

// setKstatus derives the conditions kstatus reads from Finished and
// Succeeded: without them it counts a custom resource Current as soon as
// it has a status, so a GitOps tool would call a run healthy while it runs.
// They are abnormal-true: present only while True (conditions.Remove).
func setKstatus(st *farmv1.AgentRunStatus, gen int64) {
	fin := conditions.Get(st.Conditions, farmv1.ConditionFinished)
	if fin == nil {
		return
	}
	if fin.Status == metav1.ConditionTrue {
		conditions.Remove(&st.Conditions, farmv1.ConditionReconciling)
	} else {
		conditions.True(&st.Conditions, gen, farmv1.ConditionReconciling, fin.Reason, fin.Message)
	}
	if st.Phase == farmv1.RunFailed {
		reason, msg := farmv1.ReasonFailed, fin.Message
		if c := conditions.Get(st.Conditions, farmv1.ConditionSucceeded); c != nil {
			reason = c.Reason
			if c.Message != "" {
				msg = c.Message
			}
		}
		conditions.True(&st.Conditions, gen, farmv1.ConditionStalled, reason, msg)
	} else {
		conditions.Remove(&st.Conditions, farmv1.ConditionStalled)
	}
}
