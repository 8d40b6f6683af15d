package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
	"github.com/clawfarm/clawfarm/internal/state"
)

// Token estimates of the wire benchmark, as modelsim bills: four bytes of
// text per token, a flat cost per image (not its base64 size).
const (
	benchBytesPerToken = 4
	benchImageTokens   = 765
)

// wireTurn is what one request cost: bytes sent, bytes that were not the
// screens' base64, and the input tokens the service bills (and of them,
// the cached ones: the stored conversation a request continued).
type wireTurn struct {
	bytes, textBytes     int
	inputTokens, cached  int
	continued, restarted bool
}

// textAndImages measures a JSON body without its data: URLs: the bytes of
// everything else and the number of images.
func textAndImages(b []byte) (text, images int) {
	const marker = `"data:image/`
	text = len(b)
	for {
		i := bytes.Index(b, []byte(marker))
		if i < 0 {
			return text, images
		}
		j := bytes.IndexByte(b[i+1:], '"')
		if j < 0 {
			return text, images
		}
		text -= j + 2
		images++
		b = b[i+j+2:]
	}
}

func billed(text, images int) int {
	return (text+benchBytesPerToken-1)/benchBytesPerToken + images*benchImageTokens
}

// benchReply is the scripted turn n: [note, peek], a plan first, end_session last.
func benchReply(n int) (action, args string) {
	switch {
	case n == 1:
		return "update_progress", `{"user_said":"benchmark","steps":[{"title":"look at the screen 300 times","status":"in_progress"}]}`
	case n >= benchTurns:
		return "end_session", `{"status":"DONE","recap":"benchmark done"}`
	}
	return "peek", `{}`
}

// chatWire is the scripted Chat Completions server of BenchmarkSession300,
// billing each request's whole context.
type chatWire struct {
	mu    sync.Mutex
	turns []wireTurn
}

func (c *chatWire) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	text, images := textAndImages(body)
	c.mu.Lock()
	c.turns = append(c.turns, wireTurn{bytes: len(body), textBytes: text, inputTokens: billed(text, images)})
	n := len(c.turns)
	c.mu.Unlock()
	action, args := benchReply(n)
	var b strings.Builder
	chunk := func(delta, finish string) {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		fmt.Fprintf(&b, "data: {\"id\":\"b\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, f)
	}
	chunk(fmt.Sprintf(`{"role":"assistant","tool_calls":[{"index":0,"id":"n%d","type":"function","function":{"name":"note","arguments":%q}}]}`, n, fmt.Sprintf(`{"summary":"turn %d: checking the screen"}`, n)), "")
	chunk(fmt.Sprintf(`{"tool_calls":[{"index":1,"id":"a%d","type":"function","function":{"name":%q,"arguments":%q}}]}`, n, action, args), "")
	chunk(`{}`, "tool_calls")
	b.WriteString("data: [DONE]\n\n")
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(b.String())), Request: r}, nil
}

// responsesWire is a scripted Responses service: it stores every
// response's conversation by id, as the service does, and bills each
// request the whole conversation it continues plus its input.
type responsesWire struct {
	mu     sync.Mutex
	stored map[string]storedConversation
	turns  []wireTurn
}

type storedConversation struct{ text, images int }

func (s *responsesWire) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	var req struct {
		Previous string          `json:"previous_response_id"`
		Input    json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	text, images := textAndImages(body)
	inputText, _ := textAndImages(req.Input)
	beside := text - inputText // instructions and tools: every request, never stored
	s.mu.Lock()
	prior, ok := s.stored[req.Previous]
	if req.Previous != "" && !ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("the benchmark's service has no response %s", req.Previous)
	}
	n := len(s.turns) + 1
	id := fmt.Sprintf("resp_%d", n)
	action, args := benchReply(n)
	out := []string{
		fmt.Sprintf(`{"type":"function_call","id":"fc_%d_0","call_id":"n%d","name":"note","arguments":%q,"status":"completed"}`, n, n, fmt.Sprintf(`{"summary":"turn %d: checking the screen"}`, n)),
		fmt.Sprintf(`{"type":"function_call","id":"fc_%d_1","call_id":"a%d","name":%q,"arguments":%q,"status":"completed"}`, n, n, action, args),
	}
	// The conversation: the stored part, then this input; the model is
	// given it with this request's instructions and tools.
	conv := storedConversation{text: prior.text + inputText, images: prior.images + images}
	t := wireTurn{bytes: len(body), textBytes: text, inputTokens: billed(conv.text+beside, conv.images),
		cached: billed(prior.text, prior.images), continued: req.Previous != "", restarted: req.Previous == "" && n > 1}
	s.stored[id] = storedConversation{text: conv.text + len(out[0]) + len(out[1]), images: conv.images}
	s.turns = append(s.turns, t)
	s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "data: {\"type\":\"response.created\",\"response\":{\"id\":%q,\"status\":\"in_progress\",\"output\":[]}}\n\n", id)
	for i, it := range out {
		fmt.Fprintf(&b, "data: {\"type\":\"response.output_item.done\",\"output_index\":%d,\"item\":%s}\n\n", i, it)
	}
	fmt.Fprintf(&b, "data: {\"type\":\"response.completed\",\"response\":{\"id\":%q,\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},\"output_tokens\":40,\"total_tokens\":%d}}}\n\n",
		id, t.inputTokens, t.cached, t.inputTokens+40)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(b.String())), Request: r}, nil
}

// runWire runs the 300-turn session on one wire and returns what each request cost.
func runWire(b *testing.B, api string, staleScreens int) []wireTurn {
	rigTools := []provider.ToolSpec{
		{Name: "peek", Description: "overhead camera photo", Schema: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "tap", Description: "tap", Schema: json.RawMessage(`{"type":"object","properties":{"bbox":{"type":"array","items":{"type":"number"},"minItems":4,"maxItems":4}},"required":["bbox"]}`)},
	}
	var tr http.RoundTripper
	var turns func() []wireTurn
	switch api {
	case openai.APIResponses:
		w := &responsesWire{stored: map[string]storedConversation{}}
		tr, turns = w, func() []wireTurn { return w.turns }
	default:
		w := &chatWire{}
		tr, turns = w, func() []wireTurn { return w.turns }
	}
	model := openai.New(openai.Config{Options: provider.Options{BaseURL: "http://model.invalid/v1", APIKey: "k", Model: "bench",
		HTTPClient: &http.Client{Transport: tr}}, API: api, StaleScreens: staleScreens})
	cfg := engine.Config{Trigger: "benchmark", MaxTurns: benchTurns, ContextWindow: 1 << 30, SessionBudget: time.Hour,
		Provider: model, Rig: &benchRig{tools: rigTools}}
	dir, err := state.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	if err := policies.Wire(&cfg, dir, nil); err != nil {
		b.Fatal(err)
	}
	m := engine.New(cfg).Run(context.Background())
	if m.Sentinel != contract.Done || m.Turns != benchTurns {
		b.Fatalf("%s: session ended %s/%s after %d turns", api, m.Sentinel, m.ExitReason, m.Turns)
	}
	return turns()
}

func percentile(v []int, p float64) int {
	s := append([]int(nil), v...)
	sort.Ints(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkWires300 runs the 300-turn session of BenchmarkSession300 on
// both wires of the OpenAI adapter — Chat Completions and the Responses
// API with its stored responses — and prints, side by side, the bytes
// sent per request (all of it, and without the screens' base64) and the
// input tokens billed. The sessions must end alike: DONE after 300 turns.
func BenchmarkWires300(b *testing.B) {
	var chat, resp, exact []wireTurn
	for i := 0; i < b.N; i++ {
		chat = runWire(b, openai.APIChat, 0)
		resp = runWire(b, openai.APIResponses, 0)
		exact = runWire(b, openai.APIResponses, -1)
	}
	b.StopTimer()
	col := func(t []wireTurn, f func(wireTurn) int) []int {
		out := make([]int, len(t))
		for i := range t {
			out[i] = f(t[i])
		}
		return out
	}
	sum := func(v []int) (n int) {
		for _, x := range v {
			n += x
		}
		return n
	}
	chainCount := func(turns []wireTurn) (continued, restarts int) {
		for _, t := range turns {
			if t.restarted {
				restarts++
			}
			if t.continued {
				continued++
			}
		}
		return continued, restarts
	}
	rows := []struct {
		name string
		f    func(wireTurn) int
	}{
		{"request bytes", func(t wireTurn) int { return t.bytes }},
		{"request bytes without screens", func(t wireTurn) int { return t.textBytes }},
		{"input tokens billed", func(t wireTurn) int { return t.inputTokens }},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%-44s %10s %10s %10s %10s %12s\n", "per request", "p50", "p99", "turn 40", "turn 300", "session")
	for _, r := range rows {
		for _, w := range []struct {
			name  string
			turns []wireTurn
		}{{"chat", chat}, {"responses", resp}, {"responses, no stale screen", exact}} {
			v := col(w.turns, r.f)
			fmt.Fprintf(&out, "%-44s %10d %10d %10d %10d %12d\n", r.name+" ("+w.name+")", percentile(v, 0.5), percentile(v, 0.99), v[39], v[299], sum(v))
		}
		c, rs := col(chat, r.f), col(resp, r.f)
		b.ReportMetric(float64(rs[299])/float64(c[299]), strings.ReplaceAll(r.name, " ", "-")+"-responses/chat@300")
		fmt.Fprintf(&out, "%-44s %10.2f %10.2f %10.2f %10.2f %12.2f\n", "  responses ÷ chat",
			float64(percentile(rs, 0.5))/float64(percentile(c, 0.5)), float64(percentile(rs, 0.99))/float64(percentile(c, 0.99)),
			float64(rs[39])/float64(c[39]), float64(rs[299])/float64(c[299]), float64(sum(rs))/float64(sum(c)))
	}
	for _, w := range []struct {
		name  string
		turns []wireTurn
	}{{"responses", resp}, {"responses, no stale screen", exact}} {
		continued, restarts := chainCount(w.turns)
		cached := sum(col(w.turns, func(t wireTurn) int { return t.cached }))
		fmt.Fprintf(&out, "%s: %d of %d requests continued a stored response, %d started the chain over; %d%% of the input tokens cached\n",
			w.name, continued, len(w.turns), restarts, 100*cached/max(1, sum(col(w.turns, func(t wireTurn) int { return t.inputTokens }))))
	}
	// Printed, not logged: the benchmark's log keeps ten lines only.
	fmt.Printf("BenchmarkWires300: the 300-turn session on both wires\n%s", out.String())
}
