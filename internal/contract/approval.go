package contract

import (
	"strings"
	"time"
)

// The annotations that answer a run's approval request (Progress.Approval,
// status.progress.approval; docs/tool-policies.md, "Approval"): kubectl claw
// approve and deny write them, the loop reads them. An admission policy holds
// approved-by to the user who wrote the answer, so the trace's "who approved"
// is the API server's word.
const (
	// AnnotationApproval is the answer, "<Approve|Deny>/<request id>"
	// (ApprovalAnswer, ParseApprovalAnswer).
	AnnotationApproval = "farm.clawfarm.dev/approval"
	// AnnotationApprovedBy is the user who answered.
	AnnotationApprovedBy = "farm.clawfarm.dev/approved-by"
	// AnnotationApprovalReason is the answer's reason, which the model reads on a deny.
	AnnotationApprovalReason = "farm.clawfarm.dev/approval-reason"
)

// Decision is the verb of an approval answer.
type Decision string

// The two decisions.
const (
	Approve Decision = "Approve"
	Deny    Decision = "Deny"
)

// ApprovalAnswer is the value of AnnotationApproval that answers request id
// with d: "<Approve|Deny>/<request id>".
func ApprovalAnswer(d Decision, id string) string {
	return string(d) + "/" + id
}

// ParseApprovalAnswer reads a value of AnnotationApproval: the id of the
// request it answers (empty when the value has no "/") and its decision,
// matched in any case. ok is false when the decision is neither Approve nor
// Deny; the id still comes back, so that the loop tells a malformed answer
// to its own request from an answer to an earlier one.
func ParseApprovalAnswer(v string) (d Decision, id string, ok bool) {
	verb, id, found := strings.Cut(v, "/")
	if !found {
		return "", "", false
	}
	switch {
	case strings.EqualFold(verb, string(Approve)):
		return Approve, id, true
	case strings.EqualFold(verb, string(Deny)):
		return Deny, id, true
	}
	return "", id, false
}

// While a call waits for approval the loop reads its run for the answer
// every ApprovalPoll, and renews its progress heartbeat (Progress.UpdatedAt)
// every ApprovalHeartbeat, so that the manager's stall watchdog
// (limits.stallSeconds) leaves a waiting attempt alone
// (docs/loop-contract.md, "Progress").
const (
	ApprovalPoll      = 2 * time.Second
	ApprovalHeartbeat = 30 * time.Second
)
