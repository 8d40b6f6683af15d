package main

import (
	"context"
	"fmt"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// runApprover waits for a person's answer in the run's annotations. The
// attempt may spend at most allowance waiting in all (the operator gave the
// pod's hard deadline that much room); past it a request is denied at once.
type runApprover struct {
	read      progress.ReadFunc
	clock     engine.Clock
	allowance time.Duration
	logf      func(string, ...any)
}

// Await polls the run until its approval annotation names the request, the
// request's deadline (or the attempt's allowance) passes, or ctx ends.
func (a *runApprover) Await(ctx context.Context, req engine.ApprovalRequest) engine.ApprovalAnswer {
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
func (a *runApprover) answer(ctx context.Context, id string) (engine.ApprovalAnswer, bool) {
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

// toolPoliciesFor compiles the run's ToolPolicies into the hook chain's
// member and the approver their Approve decisions need (nil without a run
// to read: such calls are then denied, saying why).
func toolPoliciesFor(c config, clock engine.Clock, logf func(string, ...any)) (*toolpolicy.Policies, engine.Approver, error) {
	set, err := toolpolicy.Decode(c.ToolPolicies)
	if err != nil {
		return nil, nil, err
	}
	p, err := toolpolicy.Compile(set)
	if err != nil {
		return nil, nil, fmt.Errorf("tool policies: %w", err)
	}
	p.Bind(c.Run, c.Attempt, logf)
	if p.Empty() || !set.MayAskApproval() || c.Run == "" {
		return p, nil, nil
	}
	read, err := newRunReader(c.Run)
	if err != nil {
		logf("calls that need approval will be denied: %v", err)
		return p, nil, nil
	}
	allowance := time.Duration(set.LongestApprovalTimeout()*toolpolicy.ApprovalWaitsPerAttempt) * time.Second
	return p, &runApprover{read: read, clock: clock, allowance: allowance, logf: logf}, nil
}
