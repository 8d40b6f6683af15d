package modelsim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
)

const homeListing = `id [kind] "label" [left,top,right,bottom] conf
0 [icon] "" [0.065,0.090,0.215,0.159] 0.81
1 [text] "Clock" [0.104,0.167,0.177,0.180] 0.93
2 [text] "Settings" [0.322,0.167,0.438,0.180] 0.90`

func opening(trigger string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "drive the phone"},
		{Role: openai.ChatMessageRoleUser, Content: trigger},
	}
}

func args(t *testing.T, c openai.ToolCall) map[string]any {
	t.Helper()
	var a map[string]any
	if err := json.Unmarshal([]byte(c.Function.Arguments), &a); err != nil {
		t.Fatalf("%s arguments %q: %v", c.Function.Name, c.Function.Arguments, err)
	}
	return a
}

func TestNonStreamingReplyIsANoteAndOneAction(t *testing.T) {
	llm := startModel(t, builtin(t))
	resp, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: opening("set a timer")})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.FinishReason != openai.FinishReasonToolCalls || len(c.Message.ToolCalls) != 2 {
		t.Fatalf("finish=%s calls=%+v, want tool_calls with 2 calls", c.FinishReason, c.Message.ToolCalls)
	}
	note, action := c.Message.ToolCalls[0], c.Message.ToolCalls[1]
	if note.Function.Name != "note" || args(t, note)["summary"] == "" || action.Function.Name != "peek" {
		t.Fatalf("calls = %+v, want [note{summary}, peek]", c.Message.ToolCalls)
	}
	if note.ID == "" || note.ID == action.ID || note.Type != openai.ToolTypeFunction {
		t.Fatalf("call ids %q %q, want distinct function calls", note.ID, action.ID)
	}
	if u := resp.Usage; u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage = %+v", u)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || resp.Model != "sim/timer" {
		t.Fatalf("response envelope = %s %s %s", resp.ID, resp.Object, resp.Model)
	}
}

func TestStreamingCarriesToolCallDeltasFinishAndUsage(t *testing.T) {
	lib := builtin(t)
	srv := httptest.NewServer(modelsim.NewServer(lib).Handler())
	defer srv.Close()
	msgs := append(opening("set a timer"),
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "a", Type: "function", Function: openai.FunctionCall{Name: "note", Arguments: `{"summary":"look"}`}}, {ID: "b", Type: "function", Function: openai.FunctionCall{Name: "peek", Arguments: `{}`}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "a", Content: "ok"},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "b", Content: homeListing})
	body, _ := json.Marshal(openai.ChatCompletionRequest{Model: "sim/timer", Messages: msgs, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}})

	// The raw wire: SSE chunks, tool-call deltas with index, id, name, argument fragments.
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var chunks []map[string]any
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	if !done || len(chunks) < 5 {
		t.Fatalf("got %d chunks, done=%v", len(chunks), done)
	}
	fragments := 0
	for _, c := range chunks[:len(chunks)-2] {
		choice := c["choices"].([]any)[0].(map[string]any)
		delta := choice["delta"].(map[string]any)
		for _, tc := range asList(delta["tool_calls"]) {
			tcm := tc.(map[string]any)
			if _, ok := tcm["index"]; !ok {
				t.Fatalf("tool call delta without index: %v", tcm)
			}
			if fn := tcm["function"].(map[string]any); fn["arguments"] != "" && fn["name"] == nil {
				fragments++
			}
		}
	}
	if fragments < 3 {
		t.Fatalf("%d argument fragments, want the arguments split over several chunks", fragments)
	}
	last := chunks[len(chunks)-2]["choices"].([]any)[0].(map[string]any)
	if last["finish_reason"] != "tool_calls" {
		t.Fatalf("final chunk finish_reason = %v", last["finish_reason"])
	}
	usageChunk := chunks[len(chunks)-1]
	if len(usageChunk["choices"].([]any)) != 0 || usageChunk["usage"] == nil {
		t.Fatalf("usage chunk = %v", usageChunk)
	}

	// Through go-openai: the stream accumulates to the same turn the non-streaming reply gives.
	llm := startModel(t, lib)
	s, err := llm.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: msgs, StreamOptions: &openai.StreamOptions{IncludeUsage: true}})
	if err != nil {
		t.Fatal(err)
	}
	streamed, finish, u, err := accumulate(s)
	s.Close()
	if err != nil || finish != openai.FinishReasonToolCalls || u == nil || u.PromptTokens == 0 {
		t.Fatalf("stream: finish=%s usage=%v err=%v", finish, u, err)
	}
	plain, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range plain.Choices[0].Message.ToolCalls {
		got := streamed.ToolCalls[i]
		if got.ID != c.ID || got.Function.Name != c.Function.Name || got.Function.Arguments != c.Function.Arguments {
			t.Fatalf("streamed call %d = %+v, non-streamed %+v", i, got, c)
		}
	}
	if tap := streamed.ToolCalls[1]; tap.Function.Name != "tap" || !strings.Contains(tap.Function.Arguments, "[0.104,0.167,0.177,0.18]") {
		t.Fatalf("second turn = %+v, want a tap on Clock's bbox", tap)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func TestTapResolvesAgainstTheNewestListing(t *testing.T) {
	llm := startModel(t, builtin(t))
	moved := strings.Replace(homeListing, `"Clock" [0.104,0.167,0.177,0.180]`, `"Clock" [0.500,0.600,0.700,0.650]`, 1)
	msgs := append(opening("set a timer"),
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "a", Type: "function", Function: openai.FunctionCall{Name: "note", Arguments: `{"summary":"look"}`}}, {ID: "b", Type: "function", Function: openai.FunctionCall{Name: "peek", Arguments: `{}`}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "a", Content: "ok"},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "b", Content: homeListing},
		openai.ChatCompletionMessage{Role: "user", MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "the screen now:\n" + moved}}})
	resp, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	tap := resp.Choices[0].Message.ToolCalls[1]
	if got := args(t, tap)["bbox"]; tap.Function.Name != "tap" || !equalBBox(got, []float64{0.5, 0.6, 0.7, 0.65}) {
		t.Fatalf("tap = %s %v, want the bbox from the newest listing", tap.Function.Name, got)
	}
}

func equalBBox(v any, want []float64) bool {
	l, ok := v.([]any)
	if !ok || len(l) != len(want) {
		return false
	}
	for i := range l {
		if f, _ := l[i].(float64); f != want[i] {
			return false
		}
	}
	return true
}

func TestMissingLabelLooksAgainThenGivesUpStuck(t *testing.T) {
	llm := startModel(t, builtin(t))
	msgs := append(opening("[scenario:wifi] turn wifi off"),
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "a", Type: "function", Function: openai.FunctionCall{Name: "note", Arguments: `{"summary":"look"}`}}, {ID: "b", Type: "function", Function: openai.FunctionCall{Name: "peek", Arguments: `{}`}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "a", Content: "ok"},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "b", Content: strings.Replace(homeListing, "Settings", "Sett1ngs", 1)})
	for look := 0; look <= 3; look++ {
		resp, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		calls := resp.Choices[0].Message.ToolCalls
		summary, _ := args(t, calls[0])["summary"].(string)
		if look == 3 {
			if calls[1].Function.Name != "end_session" || args(t, calls[1])["status"] != "STUCK" {
				t.Fatalf("after 3 looks got %s %s, want end_session STUCK", calls[1].Function.Name, calls[1].Function.Arguments)
			}
			return
		}
		if calls[1].Function.Name != "peek" || !strings.HasPrefix(summary, "(looking again)") {
			t.Fatalf("look %d = %s %q, want a retry peek", look, calls[1].Function.Name, summary)
		}
		msgs = append(msgs, resp.Choices[0].Message,
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: calls[0].ID, Content: "ok"},
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: calls[1].ID, Content: strings.Replace(homeListing, "Settings", "Sett1ngs", 1)})
	}
}

func TestModelsListTheScenarios(t *testing.T) {
	llm := startModel(t, builtin(t))
	list, err := llm.ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	for _, want := range []string{"sim/timer", "sim/wifi", "sim/soldout", "sim/message", "sim/idle", "sim/stuck", "sim/shop", "sim/wake"} {
		if !strings.Contains(strings.Join(ids, " "), want) {
			t.Errorf("models %v lack %s", ids, want)
		}
	}
}

func TestScenarioSelection(t *testing.T) {
	llm := startModel(t, builtin(t))
	first := func(model, trigger string) (string, error) {
		resp, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: model, Messages: opening(trigger)})
		if err != nil {
			return "", err
		}
		s, _ := args(t, resp.Choices[0].Message.ToolCalls[0])["summary"].(string)
		return s, nil
	}
	// The marker in the trigger wins over the model; the message scenario's follow-up session
	// is chosen by its trigger text.
	if s, err := first("sim/timer", "[scenario:message] Follow-up: waiting for Ana's reply"); err != nil || s != "checking whether Ana has answered" {
		t.Fatalf("marker + follow-up trigger: %q %v", s, err)
	}
	if s, err := first("sim/timer", "set a timer"); err != nil || s != "looking at the phone before starting" {
		t.Fatalf("model name: %q %v", s, err)
	}
	// The wake scenario's sessions are chosen by the watch's reason in the trigger.
	if s, err := first("sim/wake", "Woken by the rig: notification banner appeared at top of screen"); err != nil || s != "woken by a notification banner; looking at the phone" {
		t.Fatalf("wake on a banner: %q %v", s, err)
	}
	if s, err := first("sim/wake", "Woken by the rig: idle check-in (no wake for 30+ min)"); err != nil || s != "woken for a check-in; looking at the phone" {
		t.Fatalf("wake on an idle check-in: %q %v", s, err)
	}
	_, err := first("gpt-4o", "hello")
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusNotFound || !strings.Contains(apiErr.Message, "sim/<scenario>") {
		t.Fatalf("unknown model: %v, want a 404 that says how to name a scenario", err)
	}
	_, err = first("sim/timer", "[scenario:nope] hi")
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, `"nope"`) {
		t.Fatalf("unknown marker: %v", err)
	}
}

func testScenarios(t *testing.T) modelsim.Library {
	t.Helper()
	lib := builtin(t)
	if err := lib.LoadDir("../../../test/scenarios"); err != nil {
		t.Fatal(err)
	}
	return lib
}

// Each misbehaviour is the wrong turn it names.
func TestMisbehaviourShapes(t *testing.T) {
	llm := startModel(t, testScenarios(t))
	msgs := opening("go")
	want := []struct {
		finish openai.FinishReason
		names  string
	}{
		{openai.FinishReasonStop, ""},
		{openai.FinishReasonToolCalls, "peek"},
		{openai.FinishReasonToolCalls, "note"},
		{openai.FinishReasonToolCalls, "note,peek"},
		{openai.FinishReasonToolCalls, "note,peek,peek"},
		{openai.FinishReasonToolCalls, "note,tap_everything"},
		{openai.FinishReasonToolCalls, "note,peek"},
	}
	for i, w := range want {
		resp, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/misbehave", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		c := resp.Choices[0]
		var names []string
		for _, tc := range c.Message.ToolCalls {
			names = append(names, tc.Function.Name)
		}
		if c.FinishReason != w.finish || strings.Join(names, ",") != w.names {
			t.Fatalf("misbehaviour %d: finish=%s calls=%v, want %s %s", i, c.FinishReason, names, w.finish, w.names)
		}
		if i == 0 && c.Message.Content == "" {
			t.Fatal("text_only sent no text")
		}
		if i == 6 && json.Valid([]byte(c.Message.ToolCalls[1].Function.Arguments)) {
			t.Fatalf("malformed_args sent valid JSON %q", c.Message.ToolCalls[1].Function.Arguments)
		}
		msgs = append(msgs, c.Message)
		for _, tc := range c.Message.ToolCalls {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: "tool", ToolCallID: tc.ID, Content: "rejected"})
		}
	}
}

// A loop that rejects wrong turns and carries on still gets the task done.
func TestMisbehavingScenarioStillFinishes(t *testing.T) {
	rig := startSimRig(t, rigsim.Config{})
	d := newDriver(t, startModel(t, testScenarios(t)), "sim/misbehave", rig.cs, true)
	end := d.play("turn Wi-Fi off")
	if end.status != "DONE" || d.rejected != 6 {
		t.Fatalf("ended %s after %d rejected turns, want DONE after 6", end.status, d.rejected)
	}
	if rig.state(t).WiFi {
		t.Fatal("Wi-Fi is still on")
	}
}

// HTTP-level faults are served once per request; a client that retries gets through.
func TestProviderFaults(t *testing.T) {
	lib := testScenarios(t)
	srv := httptest.NewServer(modelsim.NewServer(lib).Handler())
	defer srv.Close()
	body, _ := json.Marshal(openai.ChatCompletionRequest{Model: "sim/flaky-provider", Messages: opening("timer")})
	post := func() *http.Response {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if r := post(); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "2" {
		t.Fatalf("first call: %s Retry-After=%q, want 429 with Retry-After 2", r.Status, r.Header.Get("Retry-After"))
	}
	if r := post(); r.StatusCode != http.StatusOK {
		t.Fatalf("retry: %s, want 200", r.Status)
	}

	for _, stream := range []bool{false, true} {
		rig := startSimRig(t, rigsim.Config{})
		d := newDriver(t, startModel(t, testScenarios(t)), "sim/flaky-provider", rig.cs, stream)
		start := time.Now()
		end := d.play("start a one minute timer")
		if end.status != "DONE" {
			t.Fatalf("stream=%v: ended %s", stream, end.status)
		}
		if len(d.failures) != 3 {
			t.Fatalf("stream=%v: %d provider failures (%v), want 429, 500 and the stall", stream, len(d.failures), d.failures)
		}
		var apiErr *openai.APIError
		if !errors.As(d.failures[0], &apiErr) || apiErr.HTTPStatusCode != http.StatusTooManyRequests {
			t.Fatalf("first failure %v, want a 429", d.failures[0])
		}
		if !errors.As(d.failures[1], &apiErr) || apiErr.HTTPStatusCode != http.StatusInternalServerError {
			t.Fatalf("second failure %v, want a 500", d.failures[1])
		}
		if time.Since(start) < 500*time.Millisecond {
			t.Fatalf("stream=%v: took %s, want the slow first byte and the stall to cost time", stream, time.Since(start))
		}
		if s := rig.state(t); !s.Timer.Running || s.Timer.DurationSeconds != 60 {
			t.Fatalf("stream=%v: timer = %+v, want a running 1-minute timer", stream, s.Timer)
		}
	}
}

func TestScenarioFilesAreChecked(t *testing.T) {
	for _, bad := range []string{
		"name: x\nsessions: []",
		"name: x\nsessions:\n- steps:\n  - {tap: A, peek: true}",
		"name: x\nsessions:\n- steps:\n  - {end: {status: MAYBE, recap: r}}",
		"name: x\nsessions:\n- steps:\n  - {peek: true, misbehave: sulk}",
		"name: x\nsessions:\n- steps:\n  - {peek: true, colour: red}",
	} {
		if _, err := modelsim.ParseScenario([]byte(bad)); err == nil {
			t.Errorf("ParseScenario accepted %q", bad)
		}
	}
}

// An image costs a flat number of tokens, not its base64 size.
func TestUsageCountsImagesFlat(t *testing.T) {
	llm := startModel(t, builtin(t))
	big := "data:image/jpeg;base64," + strings.Repeat("A", 400000)
	msgs := append(opening("set a timer"), openai.ChatCompletionMessage{Role: "user", MultiContent: []openai.ChatMessagePart{
		{Type: openai.ChatMessagePartTypeText, Text: "the screen"},
		{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: big}},
	}})
	with, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	without, err := llm.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: opening("set a timer")})
	if err != nil {
		t.Fatal(err)
	}
	if d := with.Usage.PromptTokens - without.Usage.PromptTokens; d < 700 || d > 800 {
		t.Fatalf("the image added %d prompt tokens, want the flat ~765", d)
	}
}
