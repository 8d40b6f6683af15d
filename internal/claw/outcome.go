package claw

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Exit codes of `kubectl claw run --wait`, `wait` and `cancel --wait`: what
// the run's outcome means to a script. docs/kubectl-claw.md has the table.
const (
	// ExitSucceeded: the run Succeeded with DONE or IDLE (and, following
	// follow-ups, the last run of the chain did).
	ExitSucceeded = 0
	// ExitFail: the agent ended with FAIL (Failed, TaskFailed).
	ExitFail = 1
	// ExitStuck: the agent ended STUCK and no attempt can help: attempts
	// exhausted, an input token budget spent, or a provider that refused the key,
	// account or model (Failed: AttemptsExhausted, BudgetExhausted,
	// NotRetryable).
	ExitStuck = 2
	// ExitWait: the agent ended with WAIT; the run is Waiting for its
	// follow-up (or handed over to it, or could not get one). With
	// --follow-ups the chain is followed instead.
	ExitWait = 3
	// ExitCancelled: the run was cancelled (spec.cancel).
	ExitCancelled = 4
	// ExitOtherFailure: the run Failed for a reason outside the agent's
	// sentinel: InvalidConfig, QueueTimeout, DeadlineExceeded,
	// InfraRetriesExhausted, a follow-up that could not be made, or a reason
	// this version does not know.
	ExitOtherFailure = 5
	// ExitTimeout: --timeout passed before the run reached an outcome.
	ExitTimeout = 6
	// ExitError: kubectl claw itself failed: a bad flag, an API error, a run
	// that does not exist or was deleted while waited for.
	ExitError = 7
)

// Outcome is where a run stands for a waiting client.
type Outcome struct {
	// Final is true when waiting is over: the run is Succeeded, Failed,
	// Cancelled or Waiting (Waiting ends a wait unless follow-ups are followed).
	Final bool
	// Code is the exit code when Final.
	Code int
	// Phase and Reason as the operator wrote them (Reason: the Succeeded
	// condition's).
	Phase  farmv1.RunPhase
	Reason string
	// Message is the Succeeded condition's message.
	Message string
	// FollowUp names the run that carries on after a WAIT, once it exists.
	FollowUp string
}

// OutcomeOf reads a run's status as the operator writes it
// (internal/attempt/lifecycle.go:Apply, controllers/agentrun: finishWith,
// followedUp): the phase, then the Succeeded condition's reason.
func OutcomeOf(run *farmv1.AgentRun) Outcome {
	st := &run.Status
	o := Outcome{Phase: st.Phase}
	if c := meta.FindStatusCondition(st.Conditions, farmv1.ConditionSucceeded); c != nil {
		o.Reason, o.Message = c.Reason, c.Message
	}
	if st.FollowUp != nil {
		o.FollowUp = st.FollowUp.Run
	}
	switch st.Phase {
	case farmv1.RunWaiting:
		o.Final, o.Code = true, ExitWait
	case farmv1.RunCancelled:
		o.Final, o.Code = true, ExitCancelled
	case farmv1.RunSucceeded:
		o.Final, o.Code = true, ExitSucceeded
		// A WAIT succeeds once its follow-up exists (FollowedUp), or when
		// none may be made (FollowUpChainExhausted; Waiting: follow-ups off).
		if o.Reason == farmv1.ReasonFollowedUp || o.Reason == farmv1.ReasonWaiting || o.Reason == farmv1.ReasonFollowUpChainExhausted ||
			(o.Reason == "" && st.Sentinel == "WAIT") {
			o.Code = ExitWait
		}
	case farmv1.RunFailed:
		o.Final = true
		switch o.Reason {
		case farmv1.ReasonTaskFailed:
			o.Code = ExitFail
		case farmv1.ReasonAttemptsExhausted, farmv1.ReasonBudgetExhausted, farmv1.ReasonNotRetryable:
			o.Code = ExitStuck
		default:
			o.Code = ExitOtherFailure
		}
	}
	return o
}

// describe is the outcome in a few words: "Succeeded (Done)".
func (o Outcome) describe() string {
	if o.Reason == "" || o.Reason == string(o.Phase) {
		return string(o.Phase)
	}
	return fmt.Sprintf("%s (%s)", o.Phase, o.Reason)
}
