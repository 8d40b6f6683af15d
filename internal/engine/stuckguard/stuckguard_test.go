package stuckguard

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
)

// press runs one gesture through the guard: refused, or its result (with any warning).
func press(g *Guard, name, args string, changed bool) (blocked bool, text string) {
	c := hooks.ToolCall{Name: name, Args: json.RawMessage(args)}
	if d := g.BeforeToolCall(context.Background(), c); d.Block {
		return true, d.Reason
	}
	r := hooks.ToolResult{Text: "Tapped\nscreen: changed", Verdict: wire.Changed}
	if !changed {
		r.Text, r.Verdict = "Tapped\n"+wire.UnchangedText, wire.Unchanged
	}
	g.ToolResultPersist(context.Background(), c, &r)
	return false, r.Text
}

const send = `{"bbox":[0.80,0.90,0.90,0.95]}`

func TestSameTargetNoChange(t *testing.T) {
	g := New(&engine.State{})
	for i := 1; i <= 4; i++ {
		blocked, text := press(g, "tap", send, false)
		if blocked {
			t.Fatalf("press %d refused", i)
		}
		if warned := strings.Contains(text, "warning"); warned != (i >= WarnAt) {
			t.Fatalf("press %d: warning %v: %q", i, warned, text)
		}
	}
	// A slightly re-aimed press of the same button is the same target.
	if blocked, reason := press(g, "tap", `{"bbox":[0.81,0.90,0.91,0.95]}`, false); !blocked || !strings.Contains(reason, "press 5") {
		t.Fatalf("press 5: %v %q", blocked, reason)
	}
	// Elsewhere is fine; and a press that changes the screen resets the count.
	if blocked, _ := press(g, "tap", `{"bbox":[0.1,0.1,0.2,0.2]}`, true); blocked {
		t.Fatal("another target refused")
	}
	if blocked, _ := press(g, "tap", send, false); blocked {
		t.Fatal("still refused after the screen changed")
	}
}

func TestCounterResetsOnStepChange(t *testing.T) {
	s := &engine.State{Plan: &engine.Plan{Steps: []engine.PlanStep{{Title: "a", Status: "in_progress"}, {Title: "b", Status: "pending"}}}}
	g := New(s)
	for i := 0; i < 4; i++ {
		press(g, "tap", send, false)
	}
	s.Plan.Steps[0].Status, s.Plan.Steps[1].Status = "done", "in_progress"
	if blocked, _ := press(g, "tap", send, false); blocked {
		t.Fatal("refused after the plan step changed")
	}
}

func TestCycles(t *testing.T) {
	for _, cyc := range [][]string{
		{`{"bbox":[0.1,0.1,0.2,0.2]}`, `{}`},                               // tap X, go_back, tap X, go_back…
		{`{"bbox":[0.1,0.1,0.2,0.2]}`, `{"bbox":[0.5,0.5,0.6,0.6]}`, `{}`}, // a 3-cycle
	} {
		g := New(&engine.State{})
		name := func(i int) string {
			if cyc[i%len(cyc)] == `{}` {
				return "go_back"
			}
			return "tap"
		}
		p := len(cyc)
		for i := 0; i < 5*p-1; i++ {
			blocked, text := press(g, name(i), cyc[i%p], true)
			if blocked {
				t.Fatalf("period %d: action %d refused", p, i+1)
			}
			round := (i + 1) / p
			endsRound := (i+1)%p == 0
			if warned := strings.Contains(text, "cycle"); warned != (endsRound && round >= WarnAt) {
				t.Fatalf("period %d: action %d (round %d): warning %v", p, i+1, round, warned)
			}
		}
		if blocked, reason := press(g, name(5*p-1), cyc[(5*p-1)%p], true); !blocked || !strings.Contains(reason, "cycle") {
			t.Fatalf("period %d: the action completing round 5 was not refused: %q", p, reason)
		}
		if blocked, _ := press(g, "swipe", `{"bbox":[0.1,0.4,0.9,0.6],"direction":"up"}`, true); blocked {
			t.Fatalf("period %d: something new refused", p)
		}
	}
}

func TestLooksAreNotCounted(t *testing.T) {
	g := New(&engine.State{})
	for i := 0; i < 10; i++ {
		if blocked, _ := press(g, "peek", `{}`, false); blocked {
			t.Fatal("peek refused")
		}
	}
}
