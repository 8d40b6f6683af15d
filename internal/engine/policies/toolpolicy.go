package policies

import (
	"context"
	"fmt"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// ToolPolicies puts the farm's ToolPolicies (internal/toolpolicy) in the
// hook chain: their rules and webhooks decide each call before it runs, and
// their observe-only webhooks hear every result and the session's end.
type ToolPolicies struct {
	hooks.Base
	P *toolpolicy.Policies
}

// BeforeToolCall asks the policies.
func (t ToolPolicies) BeforeToolCall(ctx context.Context, c hooks.ToolCall) hooks.Decision {
	d := t.P.Before(ctx, c.Turn, toolpolicy.Call{Tool: c.Name, Args: c.Args, Screen: c.Screen})
	switch {
	case d.Blocked():
		reason := fmt.Sprintf("%s is refused by ToolPolicy %s (%s)", c.Name, d.Policy, d.Rule)
		if d.Message != "" {
			reason += ": " + d.Message
		}
		return hooks.Decision{Block: true, Reason: reason}
	case d.NeedsApproval():
		return hooks.Decision{Approve: &hooks.Approval{Policy: d.Policy, Rule: d.Rule, Message: d.Message, Timeout: d.ApprovalTimeout}}
	}
	return hooks.Decision{}
}

// AfterToolCall tells the AfterToolCall webhooks.
func (t ToolPolicies) AfterToolCall(_ context.Context, c hooks.ToolCall, r hooks.ToolResult) {
	t.P.After(c.Turn, toolpolicy.Call{Tool: c.Name, Args: c.Args}, r.Text, r.IsError)
}

// SessionEnd tells the SessionEnd webhooks, and waits for those in flight.
func (t ToolPolicies) SessionEnd(_ context.Context, m contract.TerminationMessage) {
	t.P.End(string(m.Sentinel), m.Recap)
}
