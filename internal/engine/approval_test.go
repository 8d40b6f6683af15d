package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

const payScreen = `0 [text] "Checkout" [0.100,0.050,0.300,0.090] 0.95
1 [text] "Pay now" [0.300,0.800,0.700,0.860] 0.97`

// A tap on the Pay now button's centre, and one elsewhere.
const (
	tapPay   = `{"bbox":[0.40,0.81,0.60,0.85]}`
	tapOther = `{"bbox":[0.12,0.06,0.20,0.08]}`
)

func toolPolicies(t *testing.T, action toolpolicy.Action, timeout int) hooks.Hooks {
	t.Helper()
	p, err := toolpolicy.Compile(toolpolicy.Set{Policies: []toolpolicy.Policy{{Name: "shop", ApprovalTimeoutSeconds: timeout, Rules: []toolpolicy.Rule{{
		Name: "pay", Tools: []string{"tap"}, Expression: `targets.exists(e, e.label.matches('(?i)pay|buy|send'))`,
		Action: action, Message: "money leaves the farm",
	}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return hooks.Chain{hooks.NewDenyTools(nil), policies.ToolPolicies{P: p}}
}

// A rule blocks a tap on "Pay now" (the screen the peek before it showed),
// the model reads the rule's message as the call's result, the tap never
// reaches the rig, and the block counts toward maxErrors.
func TestToolPolicyBlocksPayTap(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("tap", tapPay), turn("tap", tapOther), end("DONE"))
	h.rig.SetScreen(payScreen)
	h.cfg.Hooks = toolPolicies(t, toolpolicy.Block, 0)
	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)
	taps := resultsFor(h.sess.Transcript(), "tap")
	if len(taps) != 2 || !strings.HasPrefix(taps[0], "blocked: tap is refused by ToolPolicy shop (pay): money leaves the farm") {
		t.Fatalf("tap results %q", taps)
	}
	for _, l := range h.rig.Log() {
		if strings.Contains(l, "0.81") {
			t.Fatalf("the blocked tap reached the rig: %q", h.rig.Log())
		}
	}
	if blocked := h.events("tool_result"); !blockedFor(blocked, "tap") {
		t.Errorf("no blocked tool_result for the tap in the trace")
	}

	// Blocked calls end the session at maxErrors, as any error in a row does.
	h2 := newHarness(t, turn("peek", `{}`), turn("tap", tapPay), turn("tap", tapPay), turn("tap", tapPay), end("DONE"))
	h2.rig.SetScreen(payScreen)
	h2.cfg.Hooks, h2.cfg.MaxErrors = toolPolicies(t, toolpolicy.Block, 0), 3
	want(t, h2.run(context.Background()), contract.Stuck, contract.ReasonMaxErrors, contract.ExitStuck)
}

func blockedFor(evs []events.Event, tool string) bool {
	for _, e := range evs {
		if e.Tool == tool && e.Blocked {
			return true
		}
	}
	return false
}

// scriptedApprover answers after advancing the session's clock by wait,
// recording what it was asked and the progress published meanwhile.
type scriptedApprover struct {
	mu     sync.Mutex
	clock  *fakeClock
	wait   time.Duration
	answer engine.ApprovalAnswer
	asked  []engine.ApprovalRequest
	prog   *progressSeen
	seen   []*contract.Approval // progress.approval as published while waiting
}

func (a *scriptedApprover) Await(_ context.Context, req engine.ApprovalRequest) engine.ApprovalAnswer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, req)
	a.prog.mu.Lock()
	if n := len(a.prog.all); n > 0 {
		a.seen = append(a.seen, a.prog.all[n-1].Approval)
	}
	a.prog.mu.Unlock()
	a.clock.Advance(a.wait)
	req.Heartbeat()
	return a.answer
}

// An approval holds the call: the request is published in progress and the
// trace, the session waits with its clock stopped, and on approve the same
// session runs the tap and goes on; the trace records who approved.
func TestApprovalPausesAndResumesTheSession(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("tap", tapPay), end("DONE"))
	h.rig.SetScreen(payScreen)
	prog := &progressSeen{}
	ap := &scriptedApprover{clock: h.clock, wait: 50 * time.Minute, prog: prog, answer: engine.ApprovalAnswer{Approved: true, By: "alice@farm"}}
	h.cfg.Hooks, h.cfg.Approver, h.cfg.Progress = toolPolicies(t, toolpolicy.Approve, 3600), ap, prog
	h.cfg.SessionBudget = 30 * time.Minute // shorter than the wait: the wait does not count
	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)

	if len(ap.asked) != 1 {
		t.Fatalf("asked %d times, want 1", len(ap.asked))
	}
	req := ap.asked[0]
	if req.Tool != "tap" || req.Policy != "shop" || req.Rule != "pay" || req.Message != "money leaves the farm" || req.Turn != 2 {
		t.Errorf("request %+v", req)
	}
	if len(ap.seen) != 1 || ap.seen[0] == nil || ap.seen[0].ID != req.ID || ap.seen[0].Tool != "tap" || !strings.Contains(ap.seen[0].Args, "0.81") {
		t.Fatalf("progress while waiting: %+v, want the request", ap.seen)
	}
	requested, _ := time.Parse(time.RFC3339, ap.seen[0].RequestedAt)
	if ap.seen[0].DeadlineAt != requested.Add(time.Hour).UTC().Format(time.RFC3339) || !req.Deadline.Equal(requested.Add(time.Hour)) {
		t.Errorf("requested at %s, deadline %s (%s): want the policy's hour", ap.seen[0].RequestedAt, ap.seen[0].DeadlineAt, req.Deadline)
	}
	prog.mu.Lock()
	last := prog.all[len(prog.all)-1]
	prog.mu.Unlock()
	if last.Approval != nil {
		t.Errorf("the last progress still holds the request: %+v", last.Approval)
	}
	taps := resultsFor(h.sess.Transcript(), "tap")
	if len(taps) != 1 || !strings.HasPrefix(taps[0], "tap done") {
		t.Errorf("the approved tap: %q", taps)
	}
	asked, answered := h.events("approval_requested"), h.events("approval_answered")
	if len(asked) != 1 || asked[0].ApprovalID != req.ID || asked[0].Policy != "shop" || asked[0].Rule != "pay" {
		t.Errorf("approval_requested %+v", asked)
	}
	if len(answered) != 1 || answered[0].By != "alice@farm" || answered[0].Approved == nil || !*answered[0].Approved || answered[0].WaitedMs != (50*time.Minute).Milliseconds() {
		t.Errorf("approval_answered %+v", answered)
	}
}

// A deny is the call's result, naming who denied and why: the agent then
// does what it will (here it gives up with FAIL). A timeout is a deny.
func TestApprovalDeniedOrTimedOut(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer engine.ApprovalAnswer
		says   string
	}{
		{"denied", engine.ApprovalAnswer{By: "bob", Reason: "not this card"}, "denied by bob: not this card. (tap needs a person's approval (ToolPolicy shop, rule pay): money leaves the farm)"},
		{"timed out", engine.ApprovalAnswer{TimedOut: true}, "denied: tap needs a person's approval (ToolPolicy shop, rule pay): money leaves the farm, and no answer came within 10m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, turn("peek", `{}`), turn("tap", tapPay), end("FAIL"))
			h.rig.SetScreen(payScreen)
			prog := &progressSeen{}
			h.cfg.Hooks, h.cfg.Progress = toolPolicies(t, toolpolicy.Approve, 600), prog
			h.cfg.Approver = &scriptedApprover{clock: h.clock, wait: time.Minute, prog: prog, answer: c.answer}
			want(t, h.run(context.Background()), contract.Fail, contract.ReasonEndTurn, 1)
			if taps := resultsFor(h.sess.Transcript(), "tap"); len(taps) != 1 || taps[0] != c.says {
				t.Errorf("tap result %q, want %q", taps, c.says)
			}
			if n := len(h.rig.Log()); n != 1 { // the peek only
				t.Errorf("the rig served %q", h.rig.Log())
			}
		})
	}
	// Without an approver (no cluster), such a call is denied and says why.
	h := newHarness(t, turn("peek", `{}`), turn("tap", tapPay), end("FAIL"))
	h.rig.SetScreen(payScreen)
	h.cfg.Hooks = toolPolicies(t, toolpolicy.Approve, 600)
	h.run(context.Background())
	if taps := resultsFor(h.sess.Transcript(), "tap"); len(taps) != 1 || !strings.Contains(taps[0], "no way to ask anyone") {
		t.Errorf("tap result %q", taps)
	}
}
