package modelsim_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
)

// buildLoop builds the real loop (cmd/loop) once for this test.
func buildLoop(t *testing.T) string {
	t.Helper()
	return gobuild.Build(t, "github.com/clawfarm/clawfarm/cmd/loop")
}

// runLoop runs one attempt of the real loop against a rig and modelsim, and returns its
// exit code and termination message.
func runLoop(t *testing.T, bin, api, rigURL, modelURL, model, trigger string) (int, *contract.TerminationMessage) {
	t.Helper()
	dir := t.TempDir()
	term := filepath.Join(dir, "termination-log")
	cmd := exec.Command(bin, "--rig-endpoint", rigURL+"/mcp", "--trigger", trigger,
		"--model-provider", "openai-compatible", "--model-api", api, "--model", model, "--model-base-url", modelURL+"/v1",
		"--state-dir", dir, "--termination-log", term, "--session-seconds", "120")
	cmd.Env = append(os.Environ(), "CLAWFARM_MODEL_API_KEY=modelsim")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run the loop: %v", err)
	}
	b, err := os.ReadFile(term)
	if err != nil {
		t.Fatalf("no termination message (exit %d): %v\n%s", code, err, stderr.String())
	}
	m, err := contract.DecodeTerminationMessage(b)
	if err != nil {
		t.Fatalf("termination message: %v", err)
	}
	return code, m
}

// Every built-in scenario through the real loop, on the OpenAI wires: the
// sentinel, its exit code and the ground truth. On both Responses wires the
// requests go to /v1/responses only and modelsim holds each to the
// latest-screen rule (no refusal may happen); stateless, every request has
// store false and none continues a stored response; chained, most continue
// one, and modelsim reports the superseded screens the chains held.
func TestScenariosThroughTheRealLoop(t *testing.T) {
	bin := buildLoop(t)
	for _, api := range []string{"chat", "responses", "responses-chained"} {
		t.Run(api, func(t *testing.T) {
			t.Parallel() // each wire has model servers and rigs of its own
			var w wireCount
			scenariosThroughTheRealLoop(t, bin, api, &w)
			r := w.report()
			if len(r.Violations) > 0 {
				t.Errorf("modelsim refused %d requests: %s", len(r.Violations), strings.Join(r.Violations, "; "))
			}
			switch {
			case api == "chat" && (w.responses > 0 || w.chat == 0):
				t.Errorf("chat wire: %d chat requests, %d responses requests", w.chat, w.responses)
			case api == "responses" && (w.chat > 0 || w.responses == 0 || r.Stateless != r.Requests || r.Continued > 0):
				t.Errorf("stateless responses wire: %d chat requests, %d responses requests, report %+v; want every request on /v1/responses with store false",
					w.chat, w.responses, r)
			case api == "responses-chained" && (w.chat > 0 || w.responses == 0 || w.continued*2 < w.responses):
				t.Errorf("chained responses wire: %d chat requests, %d responses requests, %d continuing; want every request on /v1/responses and most continuing a stored response",
					w.chat, w.responses, w.continued)
			case api == "responses-chained" && (r.StaleScreens == 0 || r.MaxStaleScreens > 4):
				t.Errorf("chained responses wire: report %+v; want stale screens held by the chains, at most 4 in one", r)
			}
		})
	}
}

// wireCount counts the requests of each wire, and the Responses requests
// that continue a stored response, and keeps the servers for their reports.
type wireCount struct {
	mu                         sync.Mutex
	chat, responses, continued int
	sims                       []*modelsim.Server
}

// serve wraps a new modelsim server of lib.
func (c *wireCount) serve(lib modelsim.Library) http.Handler {
	sim := modelsim.NewServer(lib)
	c.mu.Lock()
	c.sims = append(c.sims, sim)
	c.mu.Unlock()
	return c.wrap(sim.Handler())
}

// report adds up the servers' Responses reports.
func (c *wireCount) report() modelsim.ResponsesReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out modelsim.ResponsesReport
	for _, s := range c.sims {
		r := s.ResponsesReport()
		out.Requests += r.Requests
		out.Stateless += r.Stateless
		out.Continued += r.Continued
		out.StaleScreens += r.StaleScreens
		out.MaxStaleScreens = max(out.MaxStaleScreens, r.MaxStaleScreens)
		out.Violations = append(out.Violations, r.Violations...)
	}
	return out
}

func (c *wireCount) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.mu.Lock()
		switch r.URL.Path {
		case "/v1/chat/completions":
			c.chat++
		case "/v1/responses":
			c.responses++
			if bytes.Contains(body, []byte(`"previous_response_id"`)) {
				c.continued++
			}
		}
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func scenariosThroughTheRealLoop(t *testing.T, bin, api string, count *wireCount) {
	model := httptest.NewServer(count.serve(builtin(t)))
	defer model.Close()
	cases := []struct {
		model, trigger string
		cfg            rigsim.Config
		want           contract.Sentinel
		check          func(s phone.State) bool
	}{
		{"sim/timer", "Set a 5 minute timer.", rigsim.Config{}, contract.Done, func(s phone.State) bool { return s.Timer.Running && s.Timer.DurationSeconds == 300 }},
		{"sim/timer", "Set a 5 minute timer.", rigsim.Config{Phone: rigsim.PhoneConfig{Locked: true}}, contract.Done, func(s phone.State) bool { return !s.Locked && s.Timer.Running }},
		{"sim/wifi", "Turn Wi-Fi off.", rigsim.Config{}, contract.Done, func(s phone.State) bool { return !s.WiFi }},
		{"sim/shop", "Order coffee beans.", rigsim.Config{}, contract.Done, func(s phone.State) bool { return len(s.Shop.Orders) == 1 }},
		{"sim/soldout", "Buy headphones.", rigsim.Config{}, contract.Fail, func(s phone.State) bool { return len(s.Shop.Orders) == 0 && len(s.Shop.Cart) == 0 }},
		{"sim/idle", "Check for new messages.", rigsim.Config{}, contract.Idle, func(s phone.State) bool { return len(s.Messages.Sent) == 0 }},
		{"sim/stuck", "Set a timer.", rigsim.Config{Phone: rigsim.PhoneConfig{Locked: true, Passcode: "246810"}}, contract.Stuck, func(s phone.State) bool { return s.Locked }},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			rig := startSimRig(t, c.cfg)
			code, m := runLoop(t, bin, api, rig.url, model.URL, c.model, c.trigger)
			if m.Sentinel != c.want || code != m.ExitCode() {
				t.Fatalf("ended %s (exit %d, %q), want %s", m.Sentinel, code, m.Recap, c.want)
			}
			if s := rig.state(t); !c.check(s) {
				t.Fatalf("ground truth after %s: %+v", c.want, s)
			}
		})
	}
	// Misbehaviour: the loop rejects every wrong turn and the task still gets done; a flaky
	// provider (429 with Retry-After, 500, a slow first byte, a stalled stream) is retried through.
	extra := httptest.NewServer(count.serve(testScenarios(t)))
	defer extra.Close()
	for _, c := range []struct {
		model string
		check func(s phone.State) bool
	}{
		{"sim/misbehave", func(s phone.State) bool { return !s.WiFi }},
		{"sim/flaky-provider", func(s phone.State) bool { return s.Timer.Running && s.Timer.DurationSeconds == 60 }},
	} {
		t.Run(c.model, func(t *testing.T) {
			rig := startSimRig(t, rigsim.Config{})
			code, m := runLoop(t, bin, api, rig.url, extra.URL, c.model, "go")
			if m.Sentinel != contract.Done || code != contract.ExitDone {
				t.Fatalf("ended %s (exit %d, %q, %s), want DONE", m.Sentinel, code, m.Recap, m.ExitReason)
			}
			if s := rig.state(t); !c.check(s) {
				t.Fatalf("ground truth: %+v", s)
			}
		})
	}
	t.Run("sim/message then its follow-up", func(t *testing.T) {
		rig := startSimRig(t, rigsim.Config{})
		code, m := runLoop(t, bin, api, rig.url, model.URL, "sim/message", "Ask Ana what time dinner is tomorrow.")
		if m.Sentinel != contract.Wait || code != contract.ExitWait {
			t.Fatalf("ended %s (exit %d, %q), want WAIT", m.Sentinel, code, m.Recap)
		}
		if s := rig.state(t); len(s.Messages.Sent) != 1 {
			t.Fatalf("sent %+v", s.Messages.Sent)
		}
		rig.advance(t, 300)
		code, m = runLoop(t, bin, api, rig.url, model.URL, "sim/message", "Follow-up. The last session said: "+m.Recap)
		if m.Sentinel != contract.Done || code != contract.ExitDone || !strings.Contains(m.Recap, "7pm") {
			t.Fatalf("the follow-up ended %s (exit %d, %q), want DONE", m.Sentinel, code, m.Recap)
		}
	})
	// sim/wake is not in the table above: its banner session reads a message
	// that must arrive on the phone first (TestWakeScenarioAgainstRigsim).
	t.Run("sim/wake on a banner, then on an idle check-in", func(t *testing.T) {
		rig := startSimRig(t, rigsim.Config{})
		rig.message(t, "Ana", saturday)
		code, m := runLoop(t, bin, api, rig.url, model.URL, "sim/wake", bannerTrigger)
		if m.Sentinel != contract.Done || code != contract.ExitDone || !strings.Contains(m.Recap, saturday) {
			t.Fatalf("the banner's run ended %s (exit %d, %q), want DONE with Ana's message", m.Sentinel, code, m.Recap)
		}
		if s := rig.state(t); s.Messages.Unread != 0 || len(s.Messages.Sent) != 0 {
			t.Fatalf("after the banner's run: messages %+v, want Ana's read and nothing sent", s.Messages)
		}
		code, m = runLoop(t, bin, api, rig.url, model.URL, "sim/wake", idleTrigger)
		if m.Sentinel != contract.Idle || code != contract.ExitIdle {
			t.Fatalf("the idle check-in ended %s (exit %d, %q), want IDLE", m.Sentinel, code, m.Recap)
		}
	})
}
