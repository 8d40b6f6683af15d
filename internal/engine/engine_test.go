package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/anthropic"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

func TestHappySession(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("tap", `{"bbox":[0.1,0.2,0.3,0.4]}`), end("DONE"))
	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)
	if m.Turns != 3 || m.Usage.PromptTokens != 3000 || m.Usage.CachedTokens != 1000 || m.Recap != "recap for DONE" {
		t.Errorf("message %+v", m)
	}
	tr := h.sess.Transcript()
	checkPairing(t, tr)
	// The screen follows the results of its turn in a user message.
	var images int
	for i, msg := range tr {
		if len(msg.Images) > 0 {
			images++
			if msg.Role != provider.RoleUser || tr[i-1].Role != provider.RoleTool {
				t.Errorf("image message %d is %s after %s", i, msg.Role, tr[i-1].Role)
			}
		}
	}
	if images != 2 || h.rig.Calls() != 2 {
		t.Errorf("images %d, rig calls %d", images, h.rig.Calls())
	}
	for _, typ := range []string{"session_start", "text_delta", "tool_start", "tool_result", "done"} {
		if len(h.events(typ)) == 0 {
			t.Errorf("no %s event", typ)
		}
	}
	if d := h.events("done")[0]; d.Sentinel != contract.Done || d.Turns != 3 {
		t.Errorf("done event %+v", d)
	}
	// The request carries the system prompt with the rig's instructions and the rig's tools as listed.
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(h.model.Body(2), &req); err != nil {
		t.Fatal(err)
	}
	if sys, _ := req.Messages[0].Content.(string); !strings.Contains(sys, "Fake rig") {
		t.Errorf("system prompt lacks the rig's instructions: %q", sys)
	}
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Function.Name)
		if tl.Function.Name == "tap" && !strings.Contains(string(tl.Function.Parameters), `"minItems":4`) {
			t.Errorf("tap's schema was not passed through: %s", tl.Function.Parameters)
		}
	}
	if strings.Join(names, ",") != "note,end_session,force_quit,home_screen,peek,tap" { // the rig lists its tools sorted
		t.Errorf("tools %v", names)
	}
}

func TestEverySentinel(t *testing.T) {
	cases := []struct {
		status string
		s      contract.Sentinel
		code   int
	}{{"DONE", contract.Done, 0}, {"FAIL", contract.Fail, 1}, {"WAIT", contract.Wait, 10}, {"IDLE", contract.Idle, 11}, {"STUCK", contract.Stuck, 12}}
	for _, c := range cases {
		t.Run(c.status, func(t *testing.T) {
			h := newHarness(t, turn("peek", `{}`), end(c.status))
			m := h.run(context.Background())
			want(t, m, c.s, contract.ReasonEndTurn, c.code)
			// The agent chose no delay, so afterMinutes is 0: the
			// controller applies the run's spec.followUp.defaultDelayMinutes.
			if c.s == contract.Wait && (m.FollowUp == nil || m.FollowUp.AfterMinutes != 0 || m.FollowUp.Context == "") {
				t.Errorf("WAIT without a job should leave the delay to the run's default and keep the recap as context: %+v", m.FollowUp)
			}
			if c.s == contract.Stuck && !m.Retryable {
				t.Error("a STUCK from the agent is retryable")
			}
		})
	}
}

func TestWrongTurnShapes(t *testing.T) {
	note := pt.Call{Name: "note", Args: `{"summary":"s"}`}
	tap := pt.Call{Name: "tap", Args: `{"bbox":[0.1,0.2,0.3,0.4]}`}
	peek := pt.Call{Name: "peek", Args: `{}`}
	cases := []struct {
		name      string
		step      pt.Step
		offending string
	}{
		{"no tool calls", pt.Step{Text: "I will now tap the button."}, "called no tools"},
		{"note only", calls(note), "only note"},
		{"action without note", calls(tap), "called tap without note"},
		{"two notes", calls(note, note), "note 2 times"},
		{"two actions", calls(note, tap, peek), "tap, peek in one turn"},
		{"two actions no note", calls(tap, peek), "and no note"},
		{"three notes and action", calls(note, note, tap), "note 2 times"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.step, turn("peek", `{}`), end("DONE"))
			m := h.run(context.Background())
			want(t, m, contract.Done, contract.ReasonEndTurn, 0)
			tr := h.sess.Transcript()
			checkPairing(t, tr)
			found := false
			for _, msg := range tr {
				if msg.Role == provider.RoleUser && strings.Contains(msg.Text, c.offending) {
					found = true
				}
			}
			if !found {
				t.Errorf("no corrective naming %q", c.offending)
			}
			if h.rig.Calls() != 1 {
				t.Errorf("a rejected turn ran something: %v", h.rig.Log())
			}
		})
	}
}

func TestMalformedLimit(t *testing.T) {
	tap := pt.Call{Name: "tap", Args: `{"bbox":[0.1,0.2,0.3,0.4]}`}
	h := newHarness(t, calls(tap))
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonMalformedTurns, 12)
	if m.Turns != engine.MaxMalformedTurns {
		t.Errorf("turns %d", m.Turns)
	}
	h = newHarness(t, pt.Step{Text: "just talking"})
	m = h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonNoToolCalls, 12)
}

func TestModelOutputErrorsBecomeResults(t *testing.T) {
	note := pt.Call{Name: "note", Args: `{"summary":"s"}`}
	cases := []struct {
		name, tool, want string
		call             pt.Call
	}{
		{"bad JSON", "tap", "not valid JSON", pt.Call{Name: "tap", Args: `{"bbox":[0.1,0.2`}},
		{"hallucinated tool", "open_app", `unknown tool "open_app"`, pt.Call{Name: "open_app", Args: `{"app":"Settings"}`}},
		{"schema", "tap", "do not match tap's schema", pt.Call{Name: "tap", Args: `{"bbox":[0.1,0.2,0.3]}`}},
		{"not an object", "tap", "must be one JSON object", pt.Call{Name: "tap", Args: `[1,2]`}},
		{"bad sentinel", "end_session", "do not match end_session's schema", pt.Call{Name: "end_session", Args: `{"status":"MAYBE","recap":"x"}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, calls(note, c.call), end("DONE"))
			m := h.run(context.Background())
			want(t, m, contract.Done, contract.ReasonEndTurn, 0)
			tr := h.sess.Transcript()
			checkPairing(t, tr)
			res := resultsFor(tr, c.tool)
			if len(res) == 0 || !strings.Contains(res[0], c.want) {
				t.Errorf("result %q, want it to say %q", res, c.want)
			}
			if h.rig.Calls() != 0 {
				t.Error("an invalid call reached the rig")
			}
			// The transcript stays acceptable to strict servers: arguments are valid JSON.
			for _, msg := range tr {
				for _, tc := range msg.ToolCalls {
					if !json.Valid([]byte(tc.Arguments)) {
						t.Errorf("invalid arguments stored: %q", tc.Arguments)
					}
				}
			}
		})
	}
	// Five in a row of the model's own errors end the session.
	h := newHarness(t, calls(note, pt.Call{Name: "open_app", Args: `{}`}))
	want(t, h.run(context.Background()), contract.Stuck, contract.ReasonMalformedTurns, 12)
}

func TestMissingAndDuplicatedCallIDs(t *testing.T) {
	dup := pt.Step{Calls: []pt.Call{{ID: "same", Name: "note", Args: `{"summary":"s"}`}, {ID: "same", Name: "peek", Args: `{}`}}}
	missing := pt.Step{Calls: []pt.Call{{ID: "", Name: "note", Args: `{"summary":"s"}`}, {ID: "", Name: "peek", Args: `{}`}}}
	h := newHarnessScript(t, pt.Steps(dup, missing, withIDs([]pt.Step{end("DONE")})[0]))
	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)
	tr := h.sess.Transcript()
	checkPairing(t, tr)
	ids := map[string]bool{}
	for _, msg := range tr {
		for _, c := range msg.ToolCalls {
			if c.ID == "" || ids[c.ID] {
				t.Errorf("call id %q empty or reused", c.ID)
			}
			ids[c.ID] = true
		}
	}
	if h.rig.Calls() != 2 {
		t.Errorf("rig calls %d", h.rig.Calls())
	}
}

func TestFinishReasons(t *testing.T) {
	cut := turn("tap", `{"bbox":[0.1,0.2`)
	cut.Finish = "length"
	h := newHarness(t, cut, end("DONE"))
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if h.rig.Calls() != 0 || !strings.Contains(lastUserText(h.sess.Transcript()), "cut off") {
		t.Errorf("length: rig calls %d, corrective %q", h.rig.Calls(), lastUserText(h.sess.Transcript()))
	}
	checkPairing(t, h.sess.Transcript())

	filtered := turn("peek", `{}`)
	filtered.Finish = "content_filter"
	h = newHarness(t, filtered)
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonContentFilter, contract.ExitStuck)
	if !m.Retryable || h.rig.Calls() != 0 {
		t.Errorf("content filter: retryable %v, rig calls %d; want a retryable STUCK and nothing run", m.Retryable, h.rig.Calls())
	}
}

func TestRateLimitStormHonoursRetryAfter(t *testing.T) {
	storm := pt.Step{Status: 429, ErrType: "rate_limit_exceeded", ErrMessage: "Rate limit reached", RetryAfter: "7"}
	h := newHarness(t, storm, storm, storm, end("DONE"))
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if s := h.clock.Slept(); s < 21*time.Second || s > 24*time.Second {
		t.Errorf("slept %s across three Retry-After: 7", s)
	}
	if n := len(h.events("error")); n != 3 {
		t.Errorf("%d error events", n)
	}
}

func TestServerErrorsAndBreaker(t *testing.T) {
	boom := pt.Step{Status: 500, ErrType: "server_error", ErrMessage: "boom"}
	over := pt.Step{Status: 529, ErrType: "overloaded_error", ErrMessage: "Overloaded"}
	h := newHarness(t, boom, over, boom, end("DONE"))
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if h.clock.Slept() != 0 {
		t.Errorf("5xx and overload retry at once; slept %s", h.clock.Slept())
	}

	// Five failures open the breaker for 60 s; after the cool-down five more end the session.
	steps := []pt.Step{}
	for i := 0; i < 5; i++ {
		steps = append(steps, boom)
	}
	steps = append(steps, turn("peek", `{}`))
	for i := 0; i < 5; i++ {
		steps = append(steps, boom)
	}
	steps = append(steps, end("DONE"))
	h = newHarness(t, steps...)
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if h.clock.Slept() != 120*time.Second {
		t.Errorf("slept %s, want two 60 s cool-downs", h.clock.Slept())
	}

	h = newHarness(t, boom)
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonCircuitBreaker, 12)
	if h.model.Requests() != 10 || h.clock.Slept() != 60*time.Second {
		t.Errorf("requests %d slept %s", h.model.Requests(), h.clock.Slept())
	}
}

func TestAuthFailureIsFatalAndSecretFree(t *testing.T) {
	h := newHarness(t, pt.Step{Status: 401, ErrType: "invalid_api_key", ErrMessage: "Incorrect API key provided: " + apiKey + ". Bearer " + apiKey})
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonFatalError, contract.ExitStuckNonRetryable)
	if m.Retryable {
		t.Error("an auth failure must not be retried by the operator")
	}
	if h.model.Requests() != 1 {
		t.Errorf("an auth failure was retried: %d requests", h.model.Requests())
	}
	b, _ := m.Encode()
	for where, s := range map[string]string{"events": h.out.String(), "logs": h.logs.String(), "termination message": string(b)} {
		if strings.Contains(s, apiKey) || strings.Contains(s, "TOPSECRET") {
			t.Errorf("the API key leaked into the %s", where)
		}
	}
	if !strings.Contains(string(b), "invalid_api_key") && !strings.Contains(string(b), "auth") {
		t.Errorf("the termination message should still say what failed: %s", b)
	}
}

func TestStalledStreamIsRetried(t *testing.T) {
	h := newHarness(t, pt.Step{Stall: true}, end("DONE"))
	start := time.Now()
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if h.model.Requests() != 2 || time.Since(start) > 3*time.Second {
		t.Errorf("requests %d in %s", h.model.Requests(), time.Since(start))
	}
	if ev := h.events("error"); len(ev) != 1 || ev[0].Class != string(provider.ClassTimeout) {
		t.Errorf("error events %+v", ev)
	}
}

// shrinker is a compaction policy that drops the oldest image on request.
type shrinker struct{ asked []compaction.Trigger }

func (s *shrinker) Compact(_ context.Context, why compaction.Trigger, _ int, msgs []provider.Message) ([]provider.Message, bool, error) {
	if why == compaction.BeforeRequest {
		return msgs, false, nil
	}
	s.asked = append(s.asked, why)
	return append([]provider.Message(nil), msgs...), true, nil
}

func TestContextOverflow(t *testing.T) {
	overflow := pt.Step{Status: 400, ErrType: "context_length_exceeded", ErrMessage: "This model's maximum context length is 8192 tokens"}
	h := newHarness(t, turn("peek", `{}`), overflow, end("DONE"))
	want(t, h.run(context.Background()), contract.Stuck, contract.ReasonCompactionExhausted, 12)

	h = newHarness(t, turn("peek", `{}`), overflow, end("DONE"))
	sh := &shrinker{}
	h.cfg.Compactor = sh
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if len(sh.asked) != 1 || sh.asked[0] != compaction.Overflow || len(h.events("compaction")) != 1 {
		t.Errorf("compaction asked %v, events %d", sh.asked, len(h.events("compaction")))
	}

	// At most five compactions answer overflows.
	h = newHarness(t, overflow)
	h.cfg.Compactor = &shrinker{}
	want(t, h.run(context.Background()), contract.Stuck, contract.ReasonCompactionExhausted, 12)
	if h.model.Requests() != compaction.MaxOverflowCompactions+1 {
		t.Errorf("requests %d", h.model.Requests())
	}
}

func TestPreflightRefusesLargePrompt(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("peek", `{}`), end("DONE"))
	h.cfg.ContextWindow = 3000 // 60% = 1800 tokens: one screen (1600) plus the prompt is over
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonContextOverflow, 12)
	if h.model.Requests() != 1 {
		t.Errorf("requests %d", h.model.Requests())
	}
}

func TestTurnLimit(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`))
	h.cfg.MaxTurns = 3
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonMaxRounds, 12)
	if m.Turns != 4 || h.rig.Calls() != 3 {
		t.Errorf("turns %d rig calls %d: three turns and one last chance", m.Turns, h.rig.Calls())
	}
	// The last chance offers only note and end_session.
	var req struct {
		Tools []struct {
			Function struct{ Name string } `json:"function"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(h.model.Body(3), &req)
	if len(req.Tools) != 2 {
		t.Errorf("last chance offered %d tools", len(req.Tools))
	}

	h = newHarness(t, turn("peek", `{}`), turn("peek", `{}`), turn("peek", `{}`), end("STUCK"))
	h.cfg.MaxTurns = 3
	want(t, h.run(context.Background()), contract.Stuck, contract.ReasonEndTurn, 12)
}

func TestSessionBudget(t *testing.T) {
	slow := pt.Step{Status: 429, ErrType: "rate_limit_exceeded", ErrMessage: "wait", RetryAfter: "30"}
	h := newHarness(t, turn("peek", `{}`), slow, end("DONE"))
	h.cfg.SessionBudget = 20 * time.Second
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonSessionDeadline, contract.ExitStuck)
	if !m.Retryable {
		t.Error("a spent session time budget is retryable: a slow phone is not a lost task")
	}
}

// canceller cancels the session after the first tool round, like SIGTERM.
type canceller struct {
	hooks.Base
	cancel context.CancelFunc
}

func (c canceller) AfterToolCall(_ context.Context, call hooks.ToolCall, _ hooks.ToolResult) {
	if call.Name == "peek" {
		c.cancel()
	}
}

func TestCancelStopsAtSafePoint(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("tap", `{"bbox":[0.1,0.2,0.3,0.4]}`), end("DONE"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.cfg.Hooks = hooks.Chain{canceller{cancel: cancel}}
	m := h.run(ctx)
	want(t, m, contract.Stuck, contract.ReasonUserCancel, 12)
	if h.rig.Calls() != 1 || m.Turns != 1 {
		t.Errorf("rig calls %d turns %d", h.rig.Calls(), m.Turns)
	}
	checkPairing(t, h.sess.Transcript())
}

func TestRigBehaviour(t *testing.T) {
	// Busy is retried; a failing tool is an error result; the deny-list blocks.
	h := newHarness(t, turn("tap", `{"bbox":[0.1,0.2,0.3,0.4]}`), turn("home_screen", `{}`), turn("force_quit", `{}`), end("DONE"))
	h.rig.Busy.Store(2)
	h.rig.Fail.Store("home_screen", true)
	h.cfg.Hooks = hooks.Chain{hooks.NewDenyTools([]string{"force_quit"})}
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	tr := h.sess.Transcript()
	if r := resultsFor(tr, "tap"); len(r) != 1 || !strings.Contains(r[0], "tap done") {
		t.Errorf("busy tap: %q", r)
	}
	if r := resultsFor(tr, "home_screen"); len(r) != 1 || !strings.Contains(r[0], "failed") {
		t.Errorf("failing tool: %q", r)
	}
	if r := resultsFor(tr, "force_quit"); len(r) != 1 || !strings.Contains(r[0], "denied by this run's policy") {
		t.Errorf("denied tool: %q", r)
	}
	for _, l := range h.rig.Log() {
		if strings.HasPrefix(l, "force_quit") {
			t.Error("a denied tool reached the rig")
		}
	}
	for _, ev := range h.events("tool_result") {
		if ev.Tool == "force_quit" && !ev.Blocked {
			t.Error("the blocked call's event is not marked blocked")
		}
	}
}

func TestRigGone(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("tap", `{"bbox":[0.1,0.2,0.3,0.4]}`), end("DONE"))
	h.cfg.Hooks = hooks.Chain{rigKiller{h}}
	m := h.run(context.Background())
	want(t, m, contract.Stuck, contract.ReasonRigUnavailable, 12)
	checkPairing(t, h.sess.Transcript())
}

type rigKiller struct{ h *harness }

func (k rigKiller) SessionStart(context.Context, hooks.Session) {}
func (k rigKiller) BeforeToolCall(_ context.Context, c hooks.ToolCall) hooks.Decision {
	if c.Name == "tap" {
		k.h.rig.SetDown(true)
	}
	return hooks.Decision{}
}
func (rigKiller) AfterToolCall(context.Context, hooks.ToolCall, hooks.ToolResult)           {}
func (rigKiller) ToolResultPersist(context.Context, hooks.ToolCall, *hooks.ToolResult)      {}
func (rigKiller) BeforeCompaction(context.Context, hooks.Compaction)                        {}
func (rigKiller) AfterCompaction(context.Context, hooks.Compaction)                         {}
func (rigKiller) SessionEnd(context.Context, contract.TerminationMessage)                   {}
func (rigKiller) AgentEnd(context.Context, []provider.Message, contract.TerminationMessage) {}

func TestAnthropicSession(t *testing.T) {
	steps := withIDs([]pt.Step{
		{Reasoning: "the screen is dark", Text: "Peeking first", Calls: []pt.Call{{Name: "note", Args: `{"summary":"look"}`}, {Name: "peek", Args: `{}`}}, PromptTokens: 900, CachedTokens: 400, CompletionTokens: 30},
		{Calls: []pt.Call{{Name: "note", Args: `{"summary":"done"}`}, {Name: "end_session", Args: `{"status":"DONE","recap":"looked"}`}}},
	})
	srv := pt.Anthropic(pt.Steps(steps...))
	defer srv.Close()
	h := newHarness(t)
	h.cfg.Provider = anthropic.New(anthropic.Config{Options: provider.Options{BaseURL: srv.URL, APIKey: apiKey, Model: "claude-test"}, ThinkingBudget: 1024})
	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)
	if m.Usage.PromptTokens != 900 || m.Usage.CachedTokens != 400 {
		t.Errorf("usage %+v", m.Usage)
	}
	if len(h.events("thinking")) == 0 {
		t.Error("no thinking events")
	}
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				Signature string `json:"signature"`
				ToolUseID string `json:"tool_use_id"`
			} `json:"content"`
		} `json:"messages"`
		Thinking struct{ BudgetTokens int } `json:"thinking"`
	}
	if err := json.Unmarshal(srv.Body(1), &req); err != nil {
		t.Fatal(err)
	}
	// user trigger, assistant (thinking, text, tool_use ×2), user (tool_result ×2, image, text)
	if len(req.Messages) != 3 {
		t.Fatalf("messages %+v", req.Messages)
	}
	a, u := req.Messages[1].Content, req.Messages[2].Content
	if a[0].Type != "thinking" || a[0].Signature != "sig" || a[len(a)-1].Type != "tool_use" {
		t.Errorf("assistant blocks %+v", a)
	}
	if u[0].Type != "tool_result" || u[1].Type != "tool_result" || u[2].Type != "image" {
		t.Errorf("user blocks %+v", u)
	}
	if srv.Header(0).Get("x-api-key") != apiKey || srv.Header(0).Get("anthropic-version") == "" {
		t.Error("headers")
	}
}

type progressLog struct{ got []contract.Progress }

func (p *progressLog) Report(pr contract.Progress) { p.got = append(p.got, pr) }

func TestProgressIsReportedAndSecretFree(t *testing.T) {
	leaky := pt.Step{Calls: []pt.Call{{Name: "note", Args: `{"summary":"the key is ` + apiKey + `"}`}, {Name: "peek", Args: `{}`}}, PromptTokens: 100, CompletionTokens: 10}
	h := newHarness(t, leaky, end("DONE"))
	pl := &progressLog{}
	h.cfg.Progress = pl
	h.run(context.Background())
	if len(pl.got) == 0 || pl.got[0].Turn != 1 || pl.got[0].Tokens != 110 || pl.got[0].Attempt != 1 {
		t.Fatalf("progress %+v", pl.got)
	}
	// The heartbeat: a report as each tool result comes back, naming the tool,
	// before the round's own report.
	if len(pl.got) < 2 || pl.got[0].LastTool != "peek" || pl.got[0].UpdatedAt == "" {
		t.Errorf("no heartbeat on the tool result: %+v", pl.got)
	}
	for _, p := range pl.got {
		if strings.Contains(p.LastNote, apiKey) {
			t.Errorf("the key reached status.progress: %q", p.LastNote)
		}
	}
	if strings.Contains(h.out.String(), apiKey) {
		t.Error("the key reached the events")
	}
}

// planTail is a Pinned policy shaped like the plan: a message pinned to the tail of every request.
type planTail struct{}

func (planTail) Tail(s *engine.State) []provider.Message {
	return []provider.Message{{Role: provider.RoleUser, Text: "PLAN: step 1 in progress; scratchpad: " + s.Scratchpad}}
}

// The engine's plug points: a pinned tail on every request, never kept, and
// an engine-side tool from the registry.
func TestPinnedTailAndEngineTools(t *testing.T) {
	withPad := pt.Step{Calls: []pt.Call{{Name: "note", Args: `{"summary":"s","scratchpad":"remember the code 42"}`}, {Name: "wait", Args: `{"seconds":2}`}}}
	h := newHarness(t, withPad, end("DONE"))
	h.cfg.Pinned = planTail{}
	reg := engine.NewRegistry()
	waited := 0
	reg.MustRegister(engine.LocalTool{
		Spec: provider.ToolSpec{Name: "wait", Schema: json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"integer","minimum":1,"maximum":60}},"required":["seconds"]}`)},
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			waited++
			return engine.Output{Text: "waited"}
		},
	})
	h.cfg.Tools = reg
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if waited != 1 {
		t.Errorf("registered tool ran %d times", waited)
	}
	if !strings.Contains(string(h.model.Body(1)), "remember the code 42") {
		t.Error("the pinned tail did not reach the request")
	}
	for _, m := range h.sess.Transcript() {
		if strings.HasPrefix(m.Text, "PLAN:") {
			t.Error("the pinned tail entered the transcript")
		}
	}
}

// Billing and an unknown model end STUCK not retryable, like auth; an invalid
// request (which may come from this transcript) stays retryable.
func TestFatalProviderErrorsAreNotRetryable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      pt.Step
		retryable bool
	}{
		{"billing", pt.Step{Status: 429, ErrType: "insufficient_quota", ErrMessage: "You exceeded your current quota"}, false},
		{"unknown model", pt.Step{Status: 404, ErrType: "model_not_found", ErrMessage: "The model gpt-9 does not exist"}, false},
		{"invalid request", pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "messages: bad role"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.step)
			m := h.run(context.Background())
			code := contract.ExitStuckNonRetryable
			if tc.retryable {
				code = contract.ExitStuck
			}
			want(t, m, contract.Stuck, contract.ReasonFatalError, code)
			if m.Retryable != tc.retryable || h.model.Requests() != 1 {
				t.Errorf("retryable %v after %d requests, want %v after 1", m.Retryable, h.model.Requests(), tc.retryable)
			}
		})
	}
}
