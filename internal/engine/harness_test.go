package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/redact"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
	"github.com/clawfarm/clawfarm/internal/rig"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

const apiKey = "sk-live-TOPSECRETKEY-0123456789"

// fakeClock advances only when the engine sleeps.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.slept += d
	c.mu.Unlock()
	return ctx.Err()
}
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }
func (c *fakeClock) Slept() time.Duration    { c.mu.Lock(); defer c.mu.Unlock(); return c.slept }

// Script helpers: a turn is note plus one action.
func turn(action, args string) pt.Step {
	return pt.Step{Text: "working", Calls: []pt.Call{{ID: "", Name: "note", Args: `{"summary":"doing ` + action + `"}`}, {Name: action, Args: args}},
		PromptTokens: 1000, CompletionTokens: 50, CachedTokens: 500}
}

func end(status string) pt.Step {
	return pt.Step{Calls: []pt.Call{{Name: "note", Args: `{"summary":"closing"}`}, {Name: "end_session", Args: `{"status":"` + status + `","recap":"recap for ` + status + `"}`}},
		PromptTokens: 1000, CompletionTokens: 50}
}

func calls(cs ...pt.Call) pt.Step { return pt.Step{Calls: cs, PromptTokens: 10, CompletionTokens: 5} }

// withIDs gives every call in every step a unique id (the scripted server sends them as given).
func withIDs(steps []pt.Step) []pt.Step {
	for i := range steps {
		for k := range steps[i].Calls {
			if steps[i].Calls[k].ID == "" {
				steps[i].Calls[k].ID = fmt.Sprintf("call_%d_%d", i, k)
			}
		}
	}
	return steps
}

type harness struct {
	t      *testing.T
	model  *pt.Server
	rig    *rigtest.Rig
	clock  *fakeClock
	out    *bytes.Buffer
	logs   *bytes.Buffer
	cfg    engine.Config
	sess   *engine.Session
	rigCli *rig.Client
}

func newHarness(t *testing.T, steps ...pt.Step) *harness {
	return newHarnessScript(t, pt.Steps(withIDs(steps)...))
}

func newHarnessScript(t *testing.T, script pt.Script) *harness {
	t.Helper()
	h := &harness{t: t, model: pt.OpenAI(script), rig: rigtest.New(), clock: newClock(), out: &bytes.Buffer{}, logs: &bytes.Buffer{}}
	t.Cleanup(h.model.Close)
	t.Cleanup(h.rig.Close)
	rc, err := rig.Dial(context.Background(), rig.Config{Endpoint: h.rig.Endpoint(), BusyDelay: time.Millisecond,
		ReconnectWindow: 40 * time.Millisecond, ReconnectBackoff: 5 * time.Millisecond, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.rigCli = rc
	t.Cleanup(func() { rc.Close() })
	red := redact.New(apiKey)
	var mu sync.Mutex
	h.cfg = engine.Config{
		Run: "ns/run", Attempt: 1, Trigger: "open Settings",
		Provider: openai.New(openai.Config{Options: provider.Options{BaseURL: h.model.URL + "/v1", APIKey: apiKey, Model: "test-model", IdleTimeout: 200 * time.Millisecond}}),
		Rig:      rc, Events: events.NewEmitter(lockedWriter{&mu, h.out}, red, h.clock.Now), Redactor: red, Clock: h.clock,
		ContextWindow: 1_000_000,
		Logf:          func(f string, a ...any) { mu.Lock(); fmt.Fprintf(h.logs, red.String(f)+"\n", a...); mu.Unlock() },
	}
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (h *harness) run(ctx context.Context) contract.TerminationMessage {
	h.sess = engine.New(h.cfg)
	return h.sess.Run(ctx)
}

func (h *harness) events(typ string) []events.Event {
	var out []events.Event
	for _, line := range strings.Split(strings.TrimSpace(h.out.String()), "\n") {
		var ev events.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			h.t.Fatalf("event line is not JSON: %q", line)
		}
		if typ == "" || ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// checkPairing asserts the transcript rule: every call answered once, in order, right after it.
func checkPairing(t *testing.T, msgs []provider.Message) {
	t.Helper()
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == provider.RoleTool {
			t.Fatalf("message %d: a tool result that follows no call", i)
		}
		if m.Role != provider.RoleAssistant {
			continue
		}
		for k, c := range m.ToolCalls {
			r := msgs[i+1+k]
			if r.Role != provider.RoleTool || r.ToolCallID != c.ID {
				t.Fatalf("message %d call %d (%s %s): answered by %+v", i, k, c.Name, c.ID, r)
			}
		}
		i += len(m.ToolCalls)
	}
}

func want(t *testing.T, m contract.TerminationMessage, s contract.Sentinel, reason contract.ExitReason, code int) {
	t.Helper()
	if m.Sentinel != s || m.ExitReason != reason || m.ExitCode() != code {
		t.Fatalf("ended %s/%s (exit %d, recap %q), want %s/%s (exit %d)", m.Sentinel, m.ExitReason, m.ExitCode(), m.Recap, s, reason, code)
	}
}

// lastUserText is the newest user message's text.
func lastUserText(msgs []provider.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser && len(msgs[i].Images) == 0 {
			return msgs[i].Text
		}
	}
	return ""
}

// resultsFor returns the text of every tool result for a tool.
func resultsFor(msgs []provider.Message, tool string) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == provider.RoleTool && m.ToolName == tool {
			out = append(out, m.Text)
		}
	}
	return out
}

var _ = hooks.Base{}
