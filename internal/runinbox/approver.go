package runinbox

import (
	"context"
	"fmt"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
)

// Approver waits for a person's answer in the run's annotations
// (contract.AnnotationApproval and the two beside it), reading the run every
// contract.ApprovalPoll. The attempt may spend at most allowance waiting in
// all (the operator gave the pod's hard deadline that much room); past it a
// request is denied at once.
type Approver struct {
	read      progress.ReadFunc
	clock     engine.Clock
	allowance time.Duration
	logf      func(string, ...any)
}

// NewApprover is the approver of an attempt that may wait allowance in all,
// reading its run with read.
func NewApprover(read progress.ReadFunc, clock engine.Clock, allowance time.Duration, logf func(string, ...any)) *Approver {
	return &Approver{read: read, clock: clock, allowance: allowance, logf: logf}
}

// Await polls the run until its approval annotation names the request, the
// request's deadline (or the attempt's allowance) passes, or ctx ends.
func (a *Approver) Await(ctx context.Context, req engine.ApprovalRequest) engine.ApprovalAnswer {
	start := a.clock.Now()
	if a.allowance <= 0 {
		return engine.ApprovalAnswer{Reason: "this attempt has spent the time it may wait for approvals"}
	}
	deadline := req.Deadline
	if byAllowance := start.Add(a.allowance); byAllowance.Before(deadline) {
		deadline = byAllowance
	}
	defer func() { a.allowance -= a.clock.Now().Sub(start) }()
	beat := start
	for {
		if ans, ok := a.answer(ctx, req.ID); ok {
			return ans
		}
		now := a.clock.Now()
		if !now.Before(deadline) {
			return engine.ApprovalAnswer{TimedOut: true}
		}
		if now.Sub(beat) >= contract.ApprovalHeartbeat && req.Heartbeat != nil {
			req.Heartbeat()
			beat = now
		}
		if err := a.clock.Sleep(ctx, min(contract.ApprovalPoll, deadline.Sub(now))); err != nil {
			return engine.ApprovalAnswer{Reason: "the attempt was stopped while the call waited for approval"}
		}
	}
}

// answer reads the run once: the answer to request id, if there is one. A
// read that fails is logged and tried again at the next poll.
func (a *Approver) answer(ctx context.Context, id string) (engine.ApprovalAnswer, bool) {
	var run struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if !readRunInto(ctx, a.read, &run, a.logf, "an approval answer", fmt.Sprintf("(tried again in %s)", contract.ApprovalPoll)) {
		return engine.ApprovalAnswer{}, false
	}
	ann := run.Metadata.Annotations
	decision, forID, ok := contract.ParseApprovalAnswer(ann[contract.AnnotationApproval])
	if forID != id {
		return engine.ApprovalAnswer{}, false // no answer yet, or an answer to an earlier request
	}
	if !ok {
		a.logf("the run's %s is %q: want %s or %s; still waiting", contract.AnnotationApproval, ann[contract.AnnotationApproval],
			contract.ApprovalAnswer(contract.Approve, id), contract.ApprovalAnswer(contract.Deny, id))
		return engine.ApprovalAnswer{}, false
	}
	return engine.ApprovalAnswer{Approved: decision == contract.Approve,
		By: ann[contract.AnnotationApprovedBy], Reason: ann[contract.AnnotationApprovalReason]}, true
}
