package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
)

func steps(statuses ...string) string {
	var parts []string
	for i, s := range statuses {
		parts = append(parts, fmt.Sprintf(`{"title":"step %d","status":%q}`, i+1, s))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func update(p *Policy, args string) engine.Output {
	return p.Tool().Run(context.Background(), &engine.Call{Name: contract.ToolUpdateProgress, Args: json.RawMessage(args), State: p.State})
}

func TestUpdateProgressRule(t *testing.T) {
	p := New(&engine.State{})
	for _, bad := range []string{
		`{"steps":` + steps("pending", "pending") + `}`,
		`{"steps":` + steps("in_progress", "in_progress") + `}`,
		`{"steps":[]}`,
		`{"user_said":"hi"}`, // no steps yet
		`{"steps":` + steps(strings.Split(strings.Repeat("pending,", 20)+"in_progress", ",")...) + `}`,
	} {
		if out := update(p, bad); !out.IsError || p.State.Plan != nil {
			t.Errorf("%s accepted: %+v", bad, out)
		}
	}
	out := update(p, `{"user_said":"set a timer","understanding":"5 minutes","steps":`+steps("done", "in_progress", "pending")+`}`)
	if out.IsError || p.State.Plan.Current() != "2. step 2" {
		t.Fatalf("%+v, current %q", out, p.State.Plan.Current())
	}
	// Fields left out keep their value; a bad change leaves the plan as it was.
	update(p, `{"understanding":"five minutes"}`)
	if p.State.Plan.UserSaid != "set a timer" || p.State.Plan.Understanding != "five minutes" || len(p.State.Plan.Steps) != 3 {
		t.Fatalf("plan %+v", p.State.Plan)
	}
	if out := update(p, `{"steps":`+steps("done", "done", "done")+`}`); !out.IsError || p.State.Plan.Current() != "2. step 2" {
		t.Fatalf("a plan with no step in progress: %+v", out)
	}
}

func TestTailHasPlanAndScratchpad(t *testing.T) {
	s := &engine.State{Scratchpad: "code is 4411"}
	p := New(s)
	tail := p.Tail(s)[0].Text
	if !strings.Contains(tail, "Plan: none yet") || !strings.Contains(tail, "code is 4411") {
		t.Fatalf("tail %q", tail)
	}
	update(p, `{"user_said":"set a timer","steps":`+steps("in_progress", "pending")+`}`)
	tail = p.Tail(s)[0].Text
	for _, want := range []string{"User said: set a timer", "1. [in_progress] step 1", "2. [pending] step 2", "Scratchpad:\ncode is 4411"} {
		if !strings.Contains(tail, want) {
			t.Errorf("tail lacks %q:\n%s", want, tail)
		}
	}
}

func TestPlanGate(t *testing.T) {
	s := &engine.State{}
	p := New(s)
	ctx := context.Background()
	for turn := 1; turn <= GateTurns; turn++ {
		if d := p.BeforeToolCall(ctx, hooks.ToolCall{Turn: turn, Name: "tap"}); d.Block {
			t.Fatalf("turn %d blocked", turn)
		}
		p.AfterRound(ctx, s, nil)
	}
	d := p.BeforeToolCall(ctx, hooks.ToolCall{Turn: GateTurns + 1, Name: "tap"})
	if !d.Block || !strings.Contains(d.Reason, "8 turns have passed without a plan") || !strings.Contains(d.Reason, "update_progress") {
		t.Fatalf("turn 9 without a plan: %+v", d)
	}
	for _, free := range []string{"note", "update_progress", "end_session"} {
		if p.BeforeToolCall(ctx, hooks.ToolCall{Turn: 20, Name: free}).Block {
			t.Errorf("%s blocked by the gate", free)
		}
	}
	if !p.BeforeToolCall(ctx, hooks.ToolCall{Turn: 20, Name: "save_memory"}).Block {
		t.Error("save_memory got through the gate")
	}
	update(p, `{"steps":`+steps("in_progress")+`}`)
	if p.BeforeToolCall(ctx, hooks.ToolCall{Turn: 20, Name: "tap"}).Block {
		t.Error("blocked with a plan")
	}
}

func TestStepWatchdog(t *testing.T) {
	s := &engine.State{}
	p := New(s)
	ctx := context.Background()
	update(p, `{"steps":`+steps("in_progress", "pending")+`}`)
	for turn := 1; turn <= ForceTurns; turn++ {
		if turn <= WarnTurns && strings.Contains(p.Tail(s)[0].Text, "Warning") {
			t.Fatalf("warned before turn %d", turn)
		}
		if d := p.BeforeToolCall(ctx, hooks.ToolCall{Turn: turn, Name: "tap"}); d.Block {
			t.Fatalf("turn %d blocked: %s", turn, d.Reason)
		}
		p.AfterRound(ctx, s, nil)
	}
	if !strings.Contains(p.Tail(s)[0].Text, `Warning: 12 turns on step "1. step 1"`) {
		t.Fatalf("no warning after 12 turns: %s", p.Tail(s)[0].Text)
	}
	// A look is not a gesture; the next gesture is refused, once.
	if p.BeforeToolCall(ctx, hooks.ToolCall{Turn: 13, Name: "peek"}).Block {
		t.Error("peek refused")
	}
	d := p.BeforeToolCall(ctx, hooks.ToolCall{Turn: 13, Name: "tap"})
	if !d.Block || !strings.Contains(d.Reason, "re-plan") {
		t.Fatalf("turn 13's gesture: %+v", d)
	}
	p.AfterRound(ctx, s, nil)
	if p.BeforeToolCall(ctx, hooks.ToolCall{Turn: 14, Name: "tap"}).Block {
		t.Error("refused twice on one step")
	}
	// A new step starts a new count.
	update(p, `{"steps":`+steps("done", "in_progress")+`}`)
	p.AfterRound(ctx, s, nil)
	if s.Watchdog.Turns != 1 || s.Watchdog.Fired || strings.Contains(p.Tail(s)[0].Text, "Warning") {
		t.Fatalf("after a step change: %+v", s.Watchdog)
	}
}

func TestWarningAfterEightTurns(t *testing.T) {
	s := &engine.State{}
	p := New(s)
	update(p, `{"steps":`+steps("in_progress")+`}`)
	for i := 0; i < WarnTurns-1; i++ {
		p.AfterRound(context.Background(), s, nil)
	}
	if strings.Contains(p.Tail(s)[0].Text, "Warning") {
		t.Fatal("warned after 7 turns")
	}
	p.AfterRound(context.Background(), s, nil)
	if !strings.Contains(p.Tail(s)[0].Text, "Warning: 8 turns") {
		t.Fatalf("no warning after 8 turns: %s", p.Tail(s)[0].Text)
	}
}
