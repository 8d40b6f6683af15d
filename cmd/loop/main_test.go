package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

const key = "sk-e2e-SECRETVALUE-987654321"

// TestMain lets the test binary act as the loop binary: the end-to-end tests
// run it as a child process, the way a pod runs cmd/loop.
func TestMain(m *testing.M) {
	if os.Getenv("CLAWFARM_TEST_AS_LOOP") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func step(calls ...pt.Call) pt.Step {
	for i := range calls {
		calls[i].ID = fmt.Sprintf("c%d_%s", i, calls[i].Name)
	}
	return pt.Step{Calls: calls, PromptTokens: 100, CompletionTokens: 10}
}

var (
	note = pt.Call{Name: "note", Args: `{"summary":"working"}`}
	peek = pt.Call{Name: "peek", Args: `{}`}
)

func closing(status string) pt.Step {
	return step(note, pt.Call{Name: "end_session", Args: `{"status":"` + status + `","recap":"` + strings.ToLower(status) + ` recap"}`})
}

// uniq makes call ids unique per request, as a real server would.
func uniq(steps ...pt.Step) pt.Script {
	return func(n int, _ []byte) pt.Step {
		if n >= len(steps) {
			n = len(steps) - 1
		}
		s := steps[n]
		cs := append([]pt.Call(nil), s.Calls...)
		for i := range cs {
			cs[i].ID = fmt.Sprintf("r%d_%s", n, cs[i].ID)
		}
		s.Calls = cs
		return s
	}
}

type result struct {
	code           int
	msg            *contract.TerminationMessage
	stdout, stderr string
	rawMsg         string
}

// loopEnv is the pod's environment for one run against the test servers.
func loopEnv(t *testing.T, modelURL, rigURL string, extra ...string) []string {
	logPath := filepath.Join(t.TempDir(), "termination-log")
	env := []string{
		"CLAWFARM_RUN=ns/run-1", "CLAWFARM_ATTEMPT=1", "CLAWFARM_TRIGGER=open Settings and turn on Wi-Fi",
		"CLAWFARM_RIG_ENDPOINT=" + rigURL, "CLAWFARM_MODEL_PROVIDER=openai-compatible", "CLAWFARM_MODEL=test-model",
		"CLAWFARM_MODEL_BASE_URL=" + modelURL + "/v1", "CLAWFARM_MODEL_API_KEY=" + key,
		"CLAWFARM_TERMINATION_LOG=" + logPath, "CLAWFARM_MODEL_TIMEOUT_SECONDS=1",
	}
	return append(env, extra...)
}

// runChild runs the loop as a child process and waits for it.
func runChild(t *testing.T, env []string, args []string, whileRunning func(p *os.Process)) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "CLAWFARM_TEST_AS_LOOP=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if whileRunning != nil {
		whileRunning(cmd.Process)
	}
	_ = cmd.Wait()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "CLAWFARM_TERMINATION_LOG="); ok {
			if b, err := os.ReadFile(p); err == nil {
				r.rawMsg = string(b)
				if m, err := contract.DecodeTerminationMessage(b); err == nil {
					r.msg = m
				}
			}
		}
	}
	return r
}

func check(t *testing.T, r result, code int, s contract.Sentinel, reason contract.ExitReason) {
	t.Helper()
	if r.code != code || r.msg == nil || r.msg.Sentinel != s || r.msg.ExitReason != reason {
		t.Fatalf("exit %d, message %s; want exit %d %s/%s\nstderr: %s", r.code, r.rawMsg, code, s, reason, r.stderr)
	}
	if r.msg.ExitCode() != r.code {
		t.Errorf("exit code %d disagrees with the message's %d", r.code, r.msg.ExitCode())
	}
	if len(r.rawMsg) > contract.MaxTerminationMessageBytes {
		t.Errorf("termination message is %d bytes", len(r.rawMsg))
	}
	for where, text := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "termination message": r.rawMsg} {
		if strings.Contains(text, key) || strings.Contains(text, "SECRETVALUE") {
			t.Errorf("the API key leaked into %s", where)
		}
	}
	// stdout is JSON lines, ending with done.
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var last struct{ Type string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Type != "done" {
		t.Errorf("last event %q", lines[len(lines)-1])
	}
}

func TestEndToEnd(t *testing.T) {
	tap := pt.Call{Name: "tap", Args: `{"bbox":[0.1,0.2,0.3,0.4]}`}
	cases := []struct {
		name   string
		script pt.Script
		args   []string
		code   int
		s      contract.Sentinel
		reason contract.ExitReason
	}{
		{"done", uniq(step(note, peek), step(note, tap), closing("DONE")), nil, 0, contract.Done, contract.ReasonEndTurn},
		{"fail", uniq(step(note, peek), closing("FAIL")), nil, 1, contract.Fail, contract.ReasonEndTurn},
		{"wait", uniq(closing("WAIT")), nil, 10, contract.Wait, contract.ReasonEndTurn},
		{"idle", uniq(closing("IDLE")), nil, 11, contract.Idle, contract.ReasonEndTurn},
		{"stuck by the agent", uniq(closing("STUCK")), nil, 12, contract.Stuck, contract.ReasonEndTurn},
		{"malformed turns", uniq(step(tap)), nil, 12, contract.Stuck, contract.ReasonMalformedTurns},
		{"no tool calls", uniq(pt.Step{Text: "done, I think"}), nil, 12, contract.Stuck, contract.ReasonNoToolCalls},
		{"turn limit", uniq(step(note, peek)), []string{"--max-turns", "2"}, 12, contract.Stuck, contract.ReasonMaxRounds},
		{"session budget", uniq(step(note, peek), pt.Step{Status: 429, ErrType: "rate_limit_exceeded", ErrMessage: "wait", RetryAfter: "600"}),
			[]string{"--session-seconds", "60"}, 12, contract.Stuck, contract.ReasonSessionDeadline},
		{"auth failure", uniq(pt.Step{Status: 401, ErrType: "invalid_api_key", ErrMessage: "Incorrect API key provided: " + key}), nil, contract.ExitStuckNonRetryable, contract.Stuck, contract.ReasonFatalError},
		{"content filter", uniq(pt.Step{Text: "…", Finish: "content_filter"}), nil, 12, contract.Stuck, contract.ReasonContentFilter},
		{"context overflow", uniq(pt.Step{Status: 400, ErrType: "context_length_exceeded", ErrMessage: "maximum context length exceeded"}), nil, 12, contract.Stuck, contract.ReasonCompactionExhausted},
		{"preflight", uniq(step(note, peek)), []string{"--context-window", "1000"}, 12, contract.Stuck, contract.ReasonContextOverflow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model := pt.OpenAI(c.script)
			defer model.Close()
			r1 := rigtest.New()
			defer r1.Close()
			res := runChild(t, loopEnv(t, model.URL, r1.Endpoint()), c.args, nil)
			check(t, res, c.code, c.s, c.reason)
			// No job, no delay: afterMinutes is 0 and the controller applies
			// the run's spec.followUp.defaultDelayMinutes.
			if c.s == contract.Wait && (res.msg.FollowUp == nil || res.msg.FollowUp.AfterMinutes != 0) {
				t.Errorf("follow-up %+v", res.msg.FollowUp)
			}
		})
	}
}

func TestSIGTERMExitsCancelled(t *testing.T) {
	model := pt.OpenAI(uniq(step(note, peek), pt.Step{Stall: true}))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	env := loopEnv(t, model.URL, r1.Endpoint(), "CLAWFARM_MODEL_TIMEOUT_SECONDS=30")
	res := runChild(t, env, nil, func(p *os.Process) {
		deadline := time.Now().Add(10 * time.Second)
		for model.Requests() < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		_ = p.Signal(syscall.SIGTERM)
	})
	check(t, res, 12, contract.Stuck, contract.ReasonUserCancel)
	if !res.msg.Retryable || res.msg.Turns != 1 {
		t.Errorf("message %+v", res.msg)
	}
}

func TestRigUnavailable(t *testing.T) {
	rigReconnectWindow = 50 * time.Millisecond
	defer func() { rigReconnectWindow = 0 }()
	model := pt.OpenAI(uniq(closing("DONE")))
	defer model.Close()
	code, b, m, stderr, err := runInProcess(loopEnv(t, model.URL, rigtest.Unused()))
	if code != 12 || err != nil || m.ExitReason != contract.ReasonRigUnavailable {
		t.Fatalf("exit %d message %s (%v) stderr %s", code, b, err, stderr)
	}
}

// A rig that answers "Hardware not set up" ends the session in its first
// turn, STUCK and retryable with exit reason rig_not_ready (the operator
// retries it for free once the rig is Ready), and the model is not asked
// again: five turns of errors would only burn a counted attempt.
func TestRigNotSetUp(t *testing.T) {
	model := pt.OpenAI(uniq(step(note, peek), closing("DONE")))
	defer model.Close()
	r := rigtest.New()
	r.PhysiClaw = true
	r.NotSetUp.Store(true)
	defer r.Close()
	code, b, m, stderr, err := runInProcess(loopEnv(t, model.URL, r.Endpoint()))
	if code != contract.ExitStuck || err != nil || m.ExitReason != contract.ReasonRigNotReady || !m.Retryable || m.Turns != 1 {
		t.Fatalf("exit %d message %s (%v) stderr %s; want exit 12, rig_not_ready, retryable, 1 turn", code, b, err, stderr)
	}
	if !strings.Contains(m.Recap, "Hardware not set up") {
		t.Errorf("recap %q does not quote the rig", m.Recap)
	}
	if n := model.Requests(); n != 1 {
		t.Errorf("the model was asked %d times, want 1", n)
	}
}

// runInProcess runs the loop in this process with env (KEY=value entries)
// and returns its exit code, its termination log, that log decoded, stderr,
// and the decoding error.
func runInProcess(env []string) (code int, log []byte, msg *contract.TerminationMessage, stderr string, err error) {
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	var out, errb bytes.Buffer
	code = run(context.Background(), nil, func(k string) string { return vars[k] }, &out, &errb)
	log, _ = os.ReadFile(vars["CLAWFARM_TERMINATION_LOG"])
	msg, err = contract.DecodeTerminationMessage(log)
	return code, log, msg, errb.String(), err
}

func TestBadConfiguration(t *testing.T) {
	good := map[string]string{
		"CLAWFARM_RIG_ENDPOINT": "http://rig:8048/mcp", "CLAWFARM_TRIGGER": "go", "CLAWFARM_MODEL": "m",
		"CLAWFARM_MODEL_PROVIDER": "openai", "CLAWFARM_MODEL_API_KEY": key,
	}
	cases := []struct {
		name  string
		env   map[string]string
		args  []string
		names string
	}{
		{"no rig", map[string]string{"CLAWFARM_RIG_ENDPOINT": ""}, nil, "CLAWFARM_RIG_ENDPOINT"},
		{"rig not a URL", map[string]string{"CLAWFARM_RIG_ENDPOINT": "rig:8048"}, nil, "--rig-endpoint"},
		{"no trigger", map[string]string{"CLAWFARM_TRIGGER": ""}, nil, "CLAWFARM_TRIGGER"},
		{"no model", map[string]string{"CLAWFARM_MODEL": ""}, nil, "CLAWFARM_MODEL"},
		{"unknown provider", map[string]string{"CLAWFARM_MODEL_PROVIDER": "skynet"}, nil, "CLAWFARM_MODEL_PROVIDER"},
		{"compatible without URL", map[string]string{"CLAWFARM_MODEL_PROVIDER": "openai-compatible"}, nil, "CLAWFARM_MODEL_BASE_URL"},
		{"no key", map[string]string{"CLAWFARM_MODEL_API_KEY": ""}, nil, "CLAWFARM_MODEL_API_KEY"},
		{"turns not a number", map[string]string{"CLAWFARM_MAX_TURNS": "many"}, nil, "CLAWFARM_MAX_TURNS"},
		{"flag wins and is checked", nil, []string{"--max-turns", "0"}, "--max-turns"},
		{"bad run", map[string]string{"CLAWFARM_RUN": "noslash"}, nil, "CLAWFARM_RUN"},
		{"bad resume", map[string]string{"CLAWFARM_RESUME": "perhaps"}, nil, "CLAWFARM_RESUME"},
		{"bad timeout", map[string]string{"CLAWFARM_MODEL_TIMEOUT_SECONDS": "-1"}, nil, "CLAWFARM_MODEL_TIMEOUT_SECONDS"},
		{"no key flag", nil, []string{"--api-key", key}, "CLAWFARM_MODEL_API_KEY"},
		{"thinking on openai", map[string]string{"CLAWFARM_THINKING_BUDGET_TOKENS": "2048"}, nil, "CLAWFARM_THINKING_BUDGET_TOKENS"},
		{"bad fold", map[string]string{"CLAWFARM_FOLD": "10/30"}, nil, "CLAWFARM_FOLD"},
		{"negative budget", map[string]string{"CLAWFARM_MAX_INPUT_TOKENS": "-5"}, nil, "CLAWFARM_MAX_INPUT_TOKENS"},
		{"bad run budget", map[string]string{"CLAWFARM_RUN_INPUT_TOKENS_LEFT": "lots"}, nil, "CLAWFARM_RUN_INPUT_TOKENS_LEFT"},
		{"zero errors", map[string]string{"CLAWFARM_MAX_ERRORS": "0"}, nil, "CLAWFARM_MAX_ERRORS"},
		{"no heartbeat", map[string]string{"CLAWFARM_PROGRESS_HEARTBEAT_SECONDS": "0"}, nil, "CLAWFARM_PROGRESS_HEARTBEAT_SECONDS"},
		// The key the kubelet gave is not the one the operator checked: its
		// Secret was replaced by another of the same name after the pod was made.
		{"a key that is not the one checked", map[string]string{"CLAWFARM_MODEL_KEY_SHA256": contract.KeySHA256("the-checked-key")}, nil, "CLAWFARM_MODEL_KEY_SHA256"},
	}
	for _, c := range cases {
		logPath := filepath.Join(t.TempDir(), "termination-log")
		env := map[string]string{"CLAWFARM_TERMINATION_LOG": logPath}
		for k, v := range good {
			env[k] = v
		}
		for k, v := range c.env {
			env[k] = v
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, func(k string) string { return env[k] }, &out, &errb)
		if code != contract.ExitInvalidConfig || !strings.Contains(errb.String(), c.names) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming %s", c.name, code, errb.String(), c.names)
		}
		if strings.Contains(errb.String(), key) {
			t.Errorf("%s: the key leaked into stderr", c.name)
		}
		if b, _ := os.ReadFile(logPath); c.names != "CLAWFARM_TERMINATION_LOG" && !strings.Contains(string(b), "bad configuration") {
			t.Errorf("%s: termination log %q", c.name, b)
		}
	}
}

func TestFlagWinsOverEnv(t *testing.T) {
	env := map[string]string{"CLAWFARM_RIG_ENDPOINT": "http://rig:1/mcp", "CLAWFARM_TRIGGER": "env trigger", "CLAWFARM_MODEL": "m",
		"CLAWFARM_MODEL_API_KEY": key, "CLAWFARM_MAX_TURNS": "9"}
	c, err := parseConfig([]string{"--trigger", "flag trigger", "--max-turns", "7"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Trigger != "flag trigger" || c.MaxTurns != 7 || c.ContextWindow != contract.DefaultContextWindow || c.TerminationLog != contract.DefaultTerminationLog {
		t.Errorf("config %+v", c.Settings)
	}
	// The key the operator checked, pinned by its hash, spaces and case aside.
	env["CLAWFARM_MODEL_KEY_SHA256"] = strings.ToUpper(contract.KeySHA256(" " + key + "\n"))
	if _, err := parseConfig(nil, func(k string) string { return env[k] }, &bytes.Buffer{}); err != nil {
		t.Errorf("the pinned key itself: %v", err)
	}
}

// instantClock makes waits (backoff, the breaker's cool-down) take no time.
type instantClock struct{ now time.Time }

func (c *instantClock) Now() time.Time { return c.now }
func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

func TestCircuitBreakerInProcess(t *testing.T) {
	sessionClock = &instantClock{now: time.Now()}
	defer func() { sessionClock = nil }()
	model := pt.OpenAI(uniq(pt.Step{Status: 503, ErrType: "server_error", ErrMessage: "unavailable"}))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	code, b, m, _, err := runInProcess(loopEnv(t, model.URL, r1.Endpoint()))
	if code != 12 || err != nil || m.ExitReason != contract.ReasonCircuitBreaker || model.Requests() != 10 {
		t.Fatalf("exit %d message %s (%v), %d requests", code, b, err, model.Requests())
	}
}

func TestEndToEndAnthropic(t *testing.T) {
	model := pt.Anthropic(uniq(pt.Step{Reasoning: "look first", Calls: []pt.Call{note, peek}}, closing("DONE")))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	env := append(loopEnv(t, model.URL, r1.Endpoint()), "CLAWFARM_MODEL_PROVIDER=anthropic", "CLAWFARM_MODEL_BASE_URL="+model.URL)
	res := runChild(t, env, nil, nil)
	check(t, res, 0, contract.Done, contract.ReasonEndTurn)
	if !strings.Contains(res.stdout, `"type":"thinking"`) {
		t.Error("no thinking events")
	}
	if model.Header(0).Get("x-api-key") != key {
		t.Error("the key was not sent as x-api-key")
	}
}

// The run's settings reach the session: the thinking budget goes on the
// wire, the fold cadence and the budgets are parsed.
func TestTuningSettings(t *testing.T) {
	model := pt.Anthropic(uniq(pt.Step{Reasoning: "look first", Calls: []pt.Call{note, peek}}, closing("DONE")))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	env := append(loopEnv(t, model.URL, r1.Endpoint()), "CLAWFARM_MODEL_PROVIDER=anthropic", "CLAWFARM_MODEL_BASE_URL="+model.URL,
		"CLAWFARM_THINKING_BUDGET_TOKENS=2048")
	res := runChild(t, env, nil, nil)
	check(t, res, 0, contract.Done, contract.ReasonEndTurn)
	var body struct {
		Thinking struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(model.Body(0), &body); err != nil || body.Thinking.Type != "enabled" || body.Thinking.BudgetTokens != 2048 {
		t.Errorf("thinking on the wire %+v (%v), want enabled with 2048 tokens", body.Thinking, err)
	}

	getenv := func(k string) string {
		return map[string]string{"CLAWFARM_RIG_ENDPOINT": "http://rig:1/mcp", "CLAWFARM_TRIGGER": "go", "CLAWFARM_MODEL": "m",
			"CLAWFARM_MODEL_API_KEY": key, "CLAWFARM_FOLD": "40/8", "CLAWFARM_MAX_INPUT_TOKENS": "2000000",
			"CLAWFARM_RUN_INPUT_TOKENS_LEFT": "900000", "CLAWFARM_MAX_ERRORS": "3"}[k]
	}
	c, err := parseConfig(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProgressHeartbeatSeconds != 15 {
		t.Errorf("progress heartbeat %d s without the setting, want the default 15", c.ProgressHeartbeatSeconds)
	}
	if c, err := parseConfig([]string{"--progress-heartbeat-seconds", "5"}, getenv, &bytes.Buffer{}); err != nil || c.ProgressHeartbeatSeconds != 5 {
		t.Errorf("progress heartbeat %d s (%v), want the flag's 5", c.ProgressHeartbeatSeconds, err)
	}
	if at, keep := c.fold(); at != 40 || keep != 8 || c.MaxInputTokens != 2000000 || c.RunInputTokensLeft != 900000 || c.MaxErrors != 3 {
		t.Errorf("fold %d/%d, config %+v", at, keep, c.Settings)
	}
	// Without a cadence of its own a run gets its preset's.
	c.Fold, c.ModelProvider = "", "anthropic"
	if at, keep := c.fold(); at != 50 || keep != 10 {
		t.Errorf("anthropic's fold %d/%d, want its preset's 50/10", at, keep)
	}
	c.ModelProvider = "deepseek"
	if at, keep := c.fold(); at != 40 || keep != 10 {
		t.Errorf("deepseek's fold %d/%d, want its preset's 40/10", at, keep)
	}
}
