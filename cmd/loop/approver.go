package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// The annotations that answer an approval request (kubectl claw approve and
// deny write them; an admission policy holds approved-by to the user who
// wrote them). The loop never imports the operator's API types.
const (
	annotationApproval       = "farm.clawfarm.dev/approval"
	annotationApprovedBy     = "farm.clawfarm.dev/approved-by"
	annotationApprovalReason = "farm.clawfarm.dev/approval-reason"
)

// approvalPoll is how often the loop reads its run while a call waits, and
// approvalHeartbeat how often it renews its progress heartbeat meanwhile
// (the stall watchdog reads it).
const (
	approvalPoll      = 2 * time.Second
	approvalHeartbeat = 30 * time.Second
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
		if now.Sub(beat) >= approvalHeartbeat && req.Heartbeat != nil {
			req.Heartbeat()
			beat = now
		}
		if err := a.clock.Sleep(ctx, min(approvalPoll, deadline.Sub(now))); err != nil {
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
	if !readRunInto(ctx, a.read, &run, a.logf, "an approval answer", fmt.Sprintf("(tried again in %s)", approvalPoll)) {
		return engine.ApprovalAnswer{}, false
	}
	ann := run.Metadata.Annotations
	decision, forID, ok := strings.Cut(ann[annotationApproval], "/")
	if !ok || forID != id {
		return engine.ApprovalAnswer{}, false // no answer yet, or an answer to an earlier request
	}
	ans := engine.ApprovalAnswer{By: ann[annotationApprovedBy], Reason: ann[annotationApprovalReason]}
	switch {
	case strings.EqualFold(decision, "Approve"):
		ans.Approved = true
	case strings.EqualFold(decision, "Deny"):
	default:
		a.logf("the run's %s is %q: want Approve/%s or Deny/%s; still waiting", annotationApproval, ann[annotationApproval], id, id)
		return engine.ApprovalAnswer{}, false
	}
	return ans, true
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
