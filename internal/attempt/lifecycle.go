package attempt

import (
	"fmt"
	"time"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/pricing"
)

// MaxHistory bounds status.attempts (the CRD says 100; older records are dropped first).
const MaxHistory = 100

// Verdict is what a recorded outcome means for the run.
type Verdict struct {
	// Phase the run moves to: Retrying, Waiting, Succeeded or Failed.
	Phase farmv1.RunPhase
	// Reason is the Succeeded condition's reason.
	Reason string
	// Message explains the verdict.
	Message string
}

// Recorded reports whether the pod's outcome is already in the history.
func Recorded(st *farmv1.AgentRunStatus, pod string) bool {
	for i := range st.Attempts {
		if st.Attempts[i].Pod == pod {
			return true
		}
	}
	return false
}

// Apply records an attempt's outcome in the run's status and returns what it
// means, by the sentinel table of docs/loop-contract.md. It never moves a run
// backwards from a final phase.
func Apply(run *farmv1.AgentRun, rec farmv1.AttemptRecord, o Outcome) Verdict {
	st := &run.Status
	st.Attempts = append(st.Attempts, rec)
	// The record, not the stored field, says which attempt ended: the status
	// that would have said it was running may never have been written.
	st.Attempt = max(st.Attempt, rec.Attempt)
	if n := len(st.Attempts); n > MaxHistory {
		st.Attempts = st.Attempts[n-MaxHistory:]
	}
	if o.Class != farmv1.OutcomeInfrastructure && o.Class != farmv1.OutcomeCancelled {
		st.Sentinel, st.ExitReason = o.Sentinel, ""
		st.Recap = ""
		if m := o.Message; m != nil {
			st.Recap, st.ExitReason = m.Recap, string(m.ExitReason)
		}
		if o.ExitReason != "" {
			st.ExitReason = o.ExitReason
		}
	}
	if u := rec.Usage; u != nil {
		if st.Usage == nil {
			st.Usage = &farmv1.TokenUsage{}
		}
		st.Usage.PromptTokens += u.PromptTokens
		st.Usage.CompletionTokens += u.CompletionTokens
		st.Usage.CachedTokens += u.CachedTokens
		st.Usage.CacheWriteTokens += u.CacheWriteTokens
		if u.Cost != "" {
			// The run's cost is the sum of its attempts'; a total that does
			// not parse (written by hand) starts again from this attempt.
			if sum, err := pricing.Sum(st.Usage.Cost, u.Cost); err == nil {
				st.Usage.Cost = sum
			} else {
				st.Usage.Cost = u.Cost
			}
		}
	}
	lim := run.Spec.Limits
	switch o.Class {
	case farmv1.OutcomeDone:
		return Verdict{farmv1.RunSucceeded, farmv1.ReasonDone, "the agent ended the session with DONE"}
	case farmv1.OutcomeIdle:
		return Verdict{farmv1.RunSucceeded, farmv1.ReasonIdle, "the agent found nothing to do (IDLE)"}
	case farmv1.OutcomeWait:
		return Verdict{farmv1.RunWaiting, farmv1.ReasonWaiting, "the agent is waiting for something (WAIT); a follow-up is scheduled"}
	case farmv1.OutcomeFail:
		return Verdict{farmv1.RunFailed, farmv1.ReasonTaskFailed, "the agent ended the session with FAIL"}
	case farmv1.OutcomeBudget:
		return Verdict{farmv1.RunFailed, farmv1.ReasonBudgetExhausted, "the attempt spent an input token budget: " + o.Explanation}
	case farmv1.OutcomeNotRetryable:
		return Verdict{farmv1.RunFailed, farmv1.ReasonNotRetryable, o.Explanation}
	case farmv1.OutcomeInvalidConfig:
		return Verdict{farmv1.RunFailed, farmv1.ReasonInvalidConfig, "the run's configuration is wrong: " + o.Explanation}
	case farmv1.OutcomeCancelled:
		return Verdict{farmv1.RunCancelled, farmv1.ReasonCancelled, "the run was cancelled"}
	case farmv1.OutcomeInfrastructure:
		st.InfraRetries++
		if st.InfraRetries > lim.InfraRetryLimit() {
			return Verdict{farmv1.RunFailed, farmv1.ReasonInfraExhausted,
				fmt.Sprintf("infrastructure ended %d attempt pods (maxInfraRetries %d); last: %s", st.InfraRetries, lim.InfraRetryLimit(), o.Explanation)}
		}
		return Verdict{farmv1.RunRetrying, farmv1.ReasonRetrying, "free retry after an infrastructure failure: " + o.Explanation}
	}
	// STUCK, crashes, OOM, signals: counted.
	if rec.Attempt >= lim.MaxAttempts {
		return Verdict{farmv1.RunFailed, farmv1.ReasonAttemptsExhausted,
			fmt.Sprintf("attempt %d of %d ended STUCK: %s", rec.Attempt, lim.MaxAttempts, o.Explanation)}
	}
	return Verdict{farmv1.RunRetrying, farmv1.ReasonRetrying,
		fmt.Sprintf("attempt %d of %d ended STUCK (%s); starting a fresh attempt", rec.Attempt, lim.MaxAttempts, o.Explanation)}
}

// NextPod is the attempt pod a run that needs one should have.
type NextPod struct {
	Attempt int32
	Retry   int32
	// Resume is set for an infrastructure retry: the loop continues from its snapshot.
	Resume bool
}

// Next derives the next attempt pod from the recorded history: after an
// infrastructure failure the same attempt is retried (and resumes), after a
// counted failure a fresh attempt starts.
func Next(st *farmv1.AgentRunStatus) NextPod {
	if len(st.Attempts) == 0 {
		return NextPod{Attempt: 1}
	}
	last := st.Attempts[len(st.Attempts)-1]
	if last.Outcome == farmv1.OutcomeInfrastructure {
		return NextPod{Attempt: last.Attempt, Retry: last.Retry + 1, Resume: true}
	}
	return NextPod{Attempt: last.Attempt + 1}
}

// MaxBackoff caps the wait before a fresh attempt, as the Job controller
// caps its pod back-off.
const MaxBackoff = 5 * time.Minute

// Backoff is how long a run waits, after counted attempt n ended, before it
// starts attempt n+1: base, doubled for every attempt after the first (10 s,
// 20 s, 40 s … with the default base), at most MaxBackoff. A counted
// failure is the agent's or the phone's; retrying at once tends to meet the
// same screen in the same state.
func Backoff(n int32, base time.Duration) time.Duration {
	d := base
	for i := int32(1); i < n && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}
