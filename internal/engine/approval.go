package engine

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
)

// awaitApproval holds a call a policy sent for approval: the request is
// published in the run's progress and the trace, the session waits for the
// Approver's answer with its clock stopped (the wait is added to the
// session's deadline), and the answer is recorded. It returns "" when the
// call may run, else the text the model reads as the call's result.
func (s *Session) awaitApproval(ctx context.Context, hc hooks.ToolCall, a *hooks.Approval) string {
	what := fmt.Sprintf("%s needs a person's approval (ToolPolicy %s, rule %s)", hc.Name, a.Policy, a.Rule)
	if a.Message != "" {
		what += ": " + a.Message
	}
	if s.cfg.Approver == nil {
		return "denied: " + what + "; this loop has no way to ask anyone, so the call does not run"
	}
	s.approvals++
	start := s.cfg.Clock.Now()
	req := ApprovalRequest{
		// Unique across processes: a retry that resumes this attempt at the
		// same turn must not find its predecessor's answer to its own question.
		ID:   fmt.Sprintf("a%d-t%d-%d-%s", s.cfg.Attempt, s.state.Turn, s.approvals, strings.ToLower(rand.Text()[:6])),
		Turn: s.state.Turn, CallID: hc.ID, Tool: hc.Name, Args: hc.Args,
		Policy: a.Policy, Rule: a.Rule, Message: a.Message, Deadline: start.Add(a.Timeout),
		Heartbeat: s.report,
	}
	args := s.cfg.Redactor.String(string(hc.Args))
	if len(args) > contract.MaxApprovalArgsBytes {
		args = clipText(args, contract.MaxApprovalArgsBytes)
	}
	s.approval = &contract.Approval{ID: req.ID, Tool: hc.Name, Args: args, Policy: a.Policy, Rule: a.Rule,
		Message: s.cfg.Redactor.String(a.Message), Turn: s.state.Turn,
		RequestedAt: start.UTC().Format(time.RFC3339), DeadlineAt: req.Deadline.UTC().Format(time.RFC3339)}
	s.emit(events.ApprovalRequested(s.state.Turn, req.ID, hc.Name, hc.ID, hc.Args, a.Policy, a.Rule, a.Message))
	s.cfg.Logf("turn %d: %s; waiting until %s for kubectl claw approve/deny (request %s)", s.state.Turn, what, req.Deadline.UTC().Format(time.RFC3339), req.ID)
	s.report()

	ans := s.cfg.Approver.Await(ctx, req)

	waited := s.cfg.Clock.Now().Sub(start)
	s.deadline = s.deadline.Add(waited) // a person's thinking time is not the agent's
	s.approval = nil
	s.emit(events.ApprovalAnswered(s.state.Turn, req.ID, hc.Name, hc.ID, ans.By, ans.Approved, ans.Reason, waited))
	s.report()
	switch {
	case ans.Approved:
		return ""
	case ans.TimedOut:
		return fmt.Sprintf("denied: %s, and no answer came within %s", what, a.Timeout)
	case ans.By != "" && ans.Reason != "":
		return fmt.Sprintf("denied by %s: %s. (%s)", ans.By, ans.Reason, what)
	case ans.By != "":
		return fmt.Sprintf("denied by %s (%s)", ans.By, what)
	case ans.Reason != "":
		return fmt.Sprintf("denied: %s (%s)", ans.Reason, what)
	}
	return "denied: " + what
}
