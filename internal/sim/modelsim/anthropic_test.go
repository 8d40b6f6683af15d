package modelsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/anthropic"
	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

// clockListing shows what the timer script taps first.
const clockListing = `id [kind] "label" [left,top,right,bottom] conf
1 [text] "Clock" [0.104,0.167,0.177,0.180] 0.99
2 [text] "Timers" [0.600,0.900,0.700,0.950] 0.99`

// longSystem is a system prompt long enough (over 1024 tokens) to be cached.
var longSystem = "You drive a real phone through tools.\n" + strings.Repeat("Rule: look at the screen, then act once, then look again. ", 80)

// TestAnthropicAdapterAgainstModelsim runs the real Anthropic adapter
// against modelsim's Messages wire, streaming and not, with extended
// thinking: the script's turns come back as signed thinking and tool_use
// blocks, the adapter sends the thinking back and modelsim accepts it, and
// the usage shows the system prompt and then the stable transcript cached.
func TestAnthropicAdapterAgainstModelsim(t *testing.T) {
	for _, noStream := range []bool{false, true} {
		srv := httptest.NewServer(modelsim.NewServer(builtin(t)).Handler())
		a := anthropic.New(anthropic.Config{Options: provider.Options{BaseURL: srv.URL, APIKey: "sk-ant-test", Model: "sim/timer", NoStream: noStream}, ThinkingBudget: 2048})
		transcript := []provider.Message{{Role: provider.RoleUser, Text: "Set a 5-minute timer."}}
		tools := []provider.ToolSpec{{Name: contract.ToolNote}, {Name: contract.ToolPeek}, {Name: contract.ToolTap}}
		want := []string{contract.ToolPeek, contract.ToolTap, contract.ToolTap}
		var usages []provider.Usage
		for turn, action := range want {
			req := &provider.Request{System: longSystem, Messages: append(transcript[:len(transcript):len(transcript)],
				provider.Message{Role: provider.RoleUser, Text: fmt.Sprintf("[Pinned: plan, turn %d]", turn)}), Pinned: 1, Tools: tools}
			reply, err := a.Stream(context.Background(), req, nil)
			if err != nil {
				t.Fatalf("noStream=%v turn %d: %v", noStream, turn, err)
			}
			m := reply.Message
			if len(m.ToolCalls) != 2 || m.ToolCalls[0].Name != contract.ToolNote || m.ToolCalls[1].Name != action {
				t.Fatalf("noStream=%v turn %d: calls %+v, want [note, %s]", noStream, turn, m.ToolCalls, action)
			}
			if m.Reasoning == "" || m.ReasoningSignature == "" || reply.FinishReason != provider.FinishToolCalls {
				t.Fatalf("noStream=%v turn %d: no signed thinking (%q, %q) or finish %s", noStream, turn, m.Reasoning, m.ReasoningSignature, reply.FinishReason)
			}
			usages = append(usages, reply.Usage)
			transcript = append(transcript, m,
				provider.Message{Role: provider.RoleTool, ToolCallID: m.ToolCalls[0].ID, ToolName: contract.ToolNote, Text: "noted"},
				provider.Message{Role: provider.RoleTool, ToolCallID: m.ToolCalls[1].ID, ToolName: action, Text: "ok\n" + clockListing},
				provider.Message{Role: provider.RoleUser, Text: "The screen after " + action + ":",
					Images: []*provider.Image{provider.NewImage("image/jpeg", []byte(fmt.Sprintf("screen %d", turn)))}})
		}
		t.Logf("noStream=%v usage per turn: %+v", noStream, usages)
		u0, u1 := usages[0], usages[1]
		if u0.CachedTokens != 0 || u0.CacheWriteTokens < 1024 || u0.PromptTokens <= u0.CacheWriteTokens {
			t.Errorf("noStream=%v: first request usage %+v, want the system prompt written and nothing read", noStream, u0)
		}
		if u1.CachedTokens < u0.CacheWriteTokens || u1.CacheWriteTokens == 0 {
			t.Errorf("noStream=%v: second request usage %+v, want the first's %d written tokens read and the new turn written", noStream, u1, u0.CacheWriteTokens)
		}
		if u2 := usages[2]; u2.CachedTokens < u1.CachedTokens+u1.CacheWriteTokens-(u1.PromptTokens-u0.PromptTokens) || u2.CachedTokens <= u1.CachedTokens {
			t.Errorf("noStream=%v: third request usage %+v after %+v, want the second's prefix read", noStream, u2, u1)
		}

		// Thinking on, and the last assistant turn sent back without its
		// thinking block: refused as Anthropic refuses it.
		stripped := append([]provider.Message(nil), transcript...)
		for i := range stripped {
			if stripped[i].Role == provider.RoleAssistant {
				stripped[i].ReasoningSignature = ""
			}
		}
		_, err := a.Stream(context.Background(), &provider.Request{System: longSystem, Messages: stripped, Tools: tools}, nil)
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Status != http.StatusBadRequest || pe.Class != provider.ClassInvalidRequest || !strings.Contains(pe.Message, "thinking") {
			t.Errorf("noStream=%v: thinking block left out: %v, want 400 invalid_request_error", noStream, err)
		}
		// An altered thinking block is refused too.
		altered := append([]provider.Message(nil), transcript...)
		for i := len(altered) - 1; i >= 0; i-- {
			if altered[i].Role == provider.RoleAssistant {
				altered[i].Reasoning += " (edited)"
				break
			}
		}
		if _, err := a.Stream(context.Background(), &provider.Request{System: longSystem, Messages: altered, Tools: tools}, nil); !errors.As(err, &pe) || pe.Status != http.StatusBadRequest {
			t.Errorf("noStream=%v: altered thinking: %v, want 400", noStream, err)
		}
		srv.Close()
	}
}

// The wire's headers: no key is 401, no anthropic-version is 400, both in
// Anthropic's error shape.
func TestAnthropicHeaders(t *testing.T) {
	srv := httptest.NewServer(modelsim.NewServer(builtin(t)).Handler())
	defer srv.Close()
	body := `{"model":"sim/timer","max_tokens":100,"messages":[{"role":"user","content":"set a timer"}]}`
	for _, c := range []struct {
		key, version string
		status       int
		typ          string
	}{
		{"", "2023-06-01", http.StatusUnauthorized, "authentication_error"},
		{"k", "", http.StatusBadRequest, "invalid_request_error"},
		{"k", "2023-06-01", http.StatusOK, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
		if c.key != "" {
			req.Header.Set("x-api-key", c.key)
		}
		if c.version != "" {
			req.Header.Set("anthropic-version", c.version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var raw strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			raw.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || c.typ != "" && !strings.Contains(raw.String(), `"type":"error"`) || !strings.Contains(raw.String(), c.typ) {
			t.Errorf("key %q version %q: %d %s, want %d %s", c.key, c.version, resp.StatusCode, raw.String(), c.status, c.typ)
		}
	}
}

// A streamed Messages reply, event by event, as Anthropic sends it.
func TestAnthropicStreamEvents(t *testing.T) {
	srv := httptest.NewServer(modelsim.NewServer(builtin(t)).Handler())
	defer srv.Close()
	body := `{"model":"sim/timer","max_tokens":4096,"stream":true,"thinking":{"type":"enabled","budget_tokens":2048},
		"messages":[{"role":"user","content":"set a timer"}]}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", "k")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Type         string `json:"type"`
			ContentBlock struct {
				Type string `json:"type"`
			} `json:"content_block"`
			Delta struct {
				Type       string `json:"type"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(line[len("data: "):]), &ev); err != nil {
			t.Fatal(err)
		}
		name := ev.Type
		switch {
		case ev.Type == "content_block_start":
			name += ":" + ev.ContentBlock.Type
		case ev.Type == "content_block_delta":
			name = ev.Delta.Type
		case ev.Type == "message_delta":
			name += ":" + ev.Delta.StopReason
		}
		if n := len(events); n == 0 || events[n-1] != name {
			events = append(events, name) // runs of the same delta count once
		}
	}
	want := "message_start ping content_block_start:thinking thinking_delta signature_delta content_block_stop " +
		"content_block_start:tool_use input_json_delta content_block_stop " +
		"content_block_start:tool_use input_json_delta content_block_stop message_delta:tool_use message_stop"
	if got := strings.Join(events, " "); got != want {
		t.Errorf("events:\n%s\nwant\n%s", got, want)
	}
}
