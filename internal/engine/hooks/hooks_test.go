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
