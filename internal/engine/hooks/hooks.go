// Package hooks are the loop's interception points (docs/engine.md,
// "Hooks"): before a tool call (which may block it — a block is final), after
// it, when its result is persisted into the transcript, around compaction,
// and at the session's and the agent's end. Policies implement Hooks,
// usually by embedding Base; Chain runs several in order.
package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
)

// Session describes a session at its start.
type Session struct {
	Run      string
	Attempt  int
	Provider string
	Model    string
	Tools    []string
}

// ToolCall is a call about to run, or that ran.
type ToolCall struct {
	Turn int
	ID   string
	Name string
	Args json.RawMessage
	// Screen is the latest element listing the session saw before the
	// call (nil: none yet).
	Screen []listing.Element
}

// ToolResult is a call's result. ToolResultPersist may change it.
type ToolResult struct {
	Text    string
	Images  []*provider.Image
	IsError bool
	// Verdict is what a gesture's result said of the screen, read from its
	// first text block only (internal/rig/wire).
	Verdict wire.Verdict
}

// Decision is BeforeToolCall's answer. Block with a reason stops the call;
// the model reads the reason as the call's error result. Approve holds the
// call until a person answers (the engine asks its Approver); a block from
// any hook still wins over it.
type Decision struct {
	Block   bool
	Reason  string
	Approve *Approval
}

// Approval is why a call waits for a person, and how long it may.
type Approval struct {
	Policy  string
	Rule    string
	Message string
	Timeout time.Duration
}

// Compaction describes one compaction cycle.
type Compaction struct {
	Turn     int
	Trigger  string
	Messages int // transcript length before (Before) or after (After)
	Changed  bool
}

// Hooks is the set of interception points. Implementations must be fast: they
// run on the loop's goroutine.
type Hooks interface {
	SessionStart(ctx context.Context, s Session)
	BeforeToolCall(ctx context.Context, c ToolCall) Decision
	AfterToolCall(ctx context.Context, c ToolCall, r ToolResult)
	ToolResultPersist(ctx context.Context, c ToolCall, r *ToolResult)
	BeforeCompaction(ctx context.Context, c Compaction)
	AfterCompaction(ctx context.Context, c Compaction)
	SessionEnd(ctx context.Context, m contract.TerminationMessage)
	AgentEnd(ctx context.Context, transcript []provider.Message, m contract.TerminationMessage)
}

// Base implements every hook as a no-op; embed it and override what you need.
type Base struct{}

func (Base) SessionStart(context.Context, Session)                                     {}
func (Base) BeforeToolCall(context.Context, ToolCall) Decision                         { return Decision{} }
func (Base) AfterToolCall(context.Context, ToolCall, ToolResult)                       {}
func (Base) ToolResultPersist(context.Context, ToolCall, *ToolResult)                  {}
func (Base) BeforeCompaction(context.Context, Compaction)                              {}
func (Base) AfterCompaction(context.Context, Compaction)                               {}
func (Base) SessionEnd(context.Context, contract.TerminationMessage)                   {}
func (Base) AgentEnd(context.Context, []provider.Message, contract.TerminationMessage) {}

// Chain runs hooks in order, highest priority first.
type Chain []Hooks

// SessionStart runs every hook.
func (c Chain) SessionStart(ctx context.Context, s Session) {
	for _, h := range c {
		h.SessionStart(ctx, s)
	}
}

// BeforeToolCall stops at the first block: a block is final, and a
// "don't block" answer never clears an earlier one. Without a block, the
// first hook that asks for approval decides.
func (c Chain) BeforeToolCall(ctx context.Context, call ToolCall) Decision {
	var approve *Approval
	for _, h := range c {
		d := h.BeforeToolCall(ctx, call)
		if d.Block {
			return d
		}
		if approve == nil {
			approve = d.Approve
		}
	}
	return Decision{Approve: approve}
}

// AfterToolCall runs every hook.
func (c Chain) AfterToolCall(ctx context.Context, call ToolCall, r ToolResult) {
	for _, h := range c {
		h.AfterToolCall(ctx, call, r)
	}
}

// ToolResultPersist lets each hook transform the result in turn.
func (c Chain) ToolResultPersist(ctx context.Context, call ToolCall, r *ToolResult) {
	for _, h := range c {
		h.ToolResultPersist(ctx, call, r)
	}
}

// BeforeCompaction runs every hook.
func (c Chain) BeforeCompaction(ctx context.Context, x Compaction) {
	for _, h := range c {
		h.BeforeCompaction(ctx, x)
	}
}

// AfterCompaction runs every hook.
func (c Chain) AfterCompaction(ctx context.Context, x Compaction) {
	for _, h := range c {
		h.AfterCompaction(ctx, x)
	}
}

// SessionEnd runs every hook.
func (c Chain) SessionEnd(ctx context.Context, m contract.TerminationMessage) {
	for _, h := range c {
		h.SessionEnd(ctx, m)
	}
}

// AgentEnd runs every hook.
func (c Chain) AgentEnd(ctx context.Context, t []provider.Message, m contract.TerminationMessage) {
	for _, h := range c {
		h.AgentEnd(ctx, t, m)
	}
}

// DenyTools is the built-in policy: it blocks the tools the AgentRun's spec
// denies (--deny-tools).
type DenyTools struct {
	Base
	denied map[string]bool
}

// NewDenyTools blocks the named tools.
func NewDenyTools(names []string) *DenyTools {
	d := &DenyTools{denied: map[string]bool{}}
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			d.denied[n] = true
		}
	}
	return d
}

// BeforeToolCall blocks a denied tool.
func (d *DenyTools) BeforeToolCall(_ context.Context, c ToolCall) Decision {
	if d.denied[c.Name] {
		return Decision{Block: true, Reason: fmt.Sprintf("%s is denied by this run's policy and was not run; "+
			"reach the goal with other tools, or end the session if it cannot be done without %s", c.Name, c.Name)}
	}
	return Decision{}
}
