package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

func repeat(n int, s pt.Step) []pt.Step {
	out := make([]pt.Step, n)
	for i := range out {
		out[i] = s
		out[i].Calls = append([]pt.Call(nil), s.Calls...)
	}
	return out
}

// A model that never writes a plan: the plan gate lets 8 taps through, then
// blocks every one. The blocked calls count toward maxErrors, so the session
// ends max_errors 8 turns after the blocking starts instead of at the turn limit.
func TestBlockedCallsEndMaxErrors(t *testing.T) {
	h := newHarness(t, repeat(300, step("tapping", "tap", `{"bbox":[0.1,0.1,0.2,0.2]}`))...)
	withPolicies(t, h, openDir(t), nil, false)
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonMaxErrors, contract.ExitStuck)
	if !m.Retryable {
		t.Error("max_errors is a retryable STUCK")
	}
	if h.rig.Calls() != 8 {
		t.Errorf("%d taps reached the rig, want 8", h.rig.Calls())
	}
	if m.Turns != 8+engine.DefaultMaxErrors {
		t.Errorf("ended at turn %d, want %d (8 taps, then %d blocked)", m.Turns, 8+engine.DefaultMaxErrors, engine.DefaultMaxErrors)
	}
	if !strings.Contains(m.Recap, "8 tool errors in a row") || !strings.Contains(m.Recap, "tap: blocked:") {
		t.Errorf("recap %q does not say what went wrong", m.Recap)
	}
	if len(h.events("error")) == 0 {
		t.Error("no error event for max_errors")
	}
}

// Every kind of tool error counts (the rig's error results, the deny-list,
// a tool the model made up), and a clean result starts the count again.
func TestMaxErrorsCountsEveryErrorAndResets(t *testing.T) {
	tap := step("tapping", "tap", `{"bbox":[0.1,0.1,0.2,0.2]}`)
	swipe := step("swiping", "swipe", `{"from":[0.5,0.8],"to":[0.5,0.2]}`)
	peek := step("looking", "peek", `{}`)
	made := step("inventing", "teleport", `{}`)

	t.Run("rig errors", func(t *testing.T) {
		h := newHarness(t, repeat(20, tap)...)
		h.rig.Fail.Store("tap", true)
		h.cfg.MaxErrors = 4
		m := h.run(context.Background())
		want(t, m, contract.Stuck, contract.ReasonMaxErrors, contract.ExitStuck)
		if m.Turns != 4 || h.rig.Calls() != 4 {
			t.Errorf("turn %d, %d rig calls; want 4 and 4", m.Turns, h.rig.Calls())
		}
		if !strings.Contains(m.Recap, "the stylus did not reach the screen") {
			t.Errorf("recap %q does not carry the rig's error", m.Recap)
		}
	})
	t.Run("deny-list and made-up tools", func(t *testing.T) {
		h := newHarness(t, swipe, made, swipe, tap, end("DONE"))
		h.cfg.Hooks = hooks.NewDenyTools([]string{"swipe"})
		h.cfg.MaxErrors = 3
		m := h.run(context.Background())
		want(t, m, contract.Stuck, contract.ReasonMaxErrors, contract.ExitStuck)
		if m.Turns != 3 || h.rig.Calls() != 0 {
			t.Errorf("turn %d, %d rig calls; want 3 and 0", m.Turns, h.rig.Calls())
		}
	})
	t.Run("a clean result resets", func(t *testing.T) {
		steps := append(repeat(3, tap), peek)
		steps = append(steps, repeat(3, tap)...)
		h := newHarness(t, append(steps, end("DONE"))...)
		h.rig.Fail.Store("tap", true)
		h.cfg.MaxErrors = 4
		m := h.run(context.Background())
		want(t, m, contract.Done, contract.ReasonEndTurn, contract.ExitDone)
	})
}

// The attempt's input token budget ends the session before the request that
// would overrun it, not retryable; without a budget the same script runs on.
func TestInputTokenBudget(t *testing.T) {
	peek := step("looking", "peek", `{}`) // the server reports 1000 input tokens a turn
	steps := append(repeat(10, peek), end("DONE"))

	h := newHarness(t, steps...)
	h.cfg.MaxInputTokens = 4500
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonBudgetExhausted, contract.ExitStuckNonRetryable)
	if m.Retryable {
		t.Error("a spent token budget is not retryable")
	}
	if m.Usage.PromptTokens > 4500 || m.Turns >= 10 {
		t.Errorf("used %d input tokens in %d turns under a budget of 4500", m.Usage.PromptTokens, m.Turns)
	}
	if !strings.Contains(m.Recap, "the attempt's input token budget (4500) is spent") {
		t.Errorf("recap %q does not name the budget", m.Recap)
	}

	h = newHarness(t, steps...)
	m = h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, contract.ExitDone)
	if m.Usage.PromptTokens != 11000 {
		t.Errorf("used %d input tokens without a budget, want 11000", m.Usage.PromptTokens)
	}
}

// The run's budget counts what this process spends: a resumed attempt's
// earlier spending was charged to the run already. The attempt's budget
// counts the whole attempt.
func TestRunInputTokenBudget(t *testing.T) {
	peek := step("looking", "peek", `{}`)
	steps := append(repeat(10, peek), end("DONE"))

	h := newHarness(t, steps...)
	h.cfg.State = &engine.State{Usage: contract.Usage{PromptTokens: 50000}}
	h.cfg.RunInputTokensLeft = 3500
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonBudgetExhausted, contract.ExitStuckNonRetryable)
	if spent := m.Usage.PromptTokens - 50000; spent == 0 || spent > 3500 {
		t.Errorf("this process spent %d input tokens with 3500 left", spent)
	}
	if !strings.Contains(m.Recap, "the run's input token budget (3500 left when this attempt started)") {
		t.Errorf("recap %q does not name the run's budget", m.Recap)
	}

	h = newHarness(t, steps...)
	h.cfg.State = &engine.State{Usage: contract.Usage{PromptTokens: 50000}}
	h.cfg.MaxInputTokens = 50500
	m = h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonBudgetExhausted, contract.ExitStuckNonRetryable)
	if m.Turns != 0 {
		t.Errorf("the attempt's budget was spent before the first turn, yet %d turns ran", m.Turns)
	}
}
