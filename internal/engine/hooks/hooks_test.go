package hooks

import (
	"context"
	"testing"
)

type blocker struct {
	Base
	block bool
	calls *int
}

func (b blocker) BeforeToolCall(context.Context, ToolCall) Decision {
	*b.calls++
	return Decision{Block: b.block, Reason: "no"}
}

func TestChainBlockIsFinal(t *testing.T) {
	n := 0
	c := Chain{blocker{block: false, calls: &n}, blocker{block: true, calls: &n}, blocker{block: false, calls: &n}}
	if d := c.BeforeToolCall(context.Background(), ToolCall{Name: "tap"}); !d.Block || n != 2 {
		t.Errorf("decision %+v after %d hooks", d, n)
	}
	d := NewDenyTools([]string{" force_quit ", ""})
	if !d.BeforeToolCall(context.Background(), ToolCall{Name: "force_quit"}).Block || d.BeforeToolCall(context.Background(), ToolCall{Name: "tap"}).Block {
		t.Error("deny-list")
	}
}

type approver struct {
	Base
	rule string
}

func (a approver) BeforeToolCall(context.Context, ToolCall) Decision {
	return Decision{Approve: &Approval{Rule: a.rule}}
}

// Without a block the first hook that asks for approval decides; a block
// from any hook, before or after it, wins.
func TestChainApprovalYieldsToABlock(t *testing.T) {
	calls := 0
	d := Chain{approver{rule: "first"}, approver{rule: "second"}, blocker{calls: &calls}}.BeforeToolCall(context.Background(), ToolCall{})
	if d.Block || d.Approve == nil || d.Approve.Rule != "first" {
		t.Errorf("approvals only: %+v", d)
	}
	d = Chain{approver{rule: "first"}, blocker{block: true, calls: &calls}}.BeforeToolCall(context.Background(), ToolCall{})
	if !d.Block || d.Approve != nil {
		t.Errorf("approval then block: %+v, want the block", d)
	}
}
