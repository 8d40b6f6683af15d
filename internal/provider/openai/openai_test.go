package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

type rec struct{ text, think strings.Builder }

func (r *rec) Text(d string)     { r.text.WriteString(d) }
func (r *rec) Thinking(d string) { r.think.WriteString(d) }

func adapter(url string, noStream bool) *openai.Adapter {
	return openai.New(openai.Config{Options: provider.Options{BaseURL: url + "/v1", APIKey: "sk-test-secret-123456", Model: "m",
		IdleTimeout: 300 * time.Millisecond, NoStream: noStream}})
}

func simpleReq() *provider.Request {
	return &provider.Request{System: "sys", Messages: []provider.Message{{Role: provider.RoleUser, Text: "go"}},
		Tools: []provider.ToolSpec{{Name: "tap", Schema: json.RawMessage(`{"type":"object"}`)}}}
}

func TestStreamNormalisesReply(t *testing.T) {
	for _, noIndex := range []bool{false, true} {
		srv := pt.OpenAI(pt.Steps(pt.Step{
			Text:         "<think>the cart is open</think>Tapping checkout",
			Calls:        []pt.Call{{ID: "a", Name: "note", Args: `{"summary":"checkout"}`, NoIndex: noIndex}, {ID: "b", Name: "tap", Args: `{"bbox":[0.1,0.2,0.3,0.4]}`, NoIndex: noIndex}},
			PromptTokens: 100, CompletionTokens: 20, CachedTokens: 64,
		}))
		var r rec
		reply, err := adapter(srv.URL, false).Stream(context.Background(), simpleReq(), &r)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		m := reply.Message
		if m.Text != "Tapping checkout" || m.Reasoning != "the cart is open" {
			t.Errorf("noIndex=%v: text %q reasoning %q", noIndex, m.Text, m.Reasoning)
		}
		if r.text.String() != "Tapping checkout" || r.think.String() != "the cart is open" {
			t.Errorf("streamed text %q thinking %q", r.text.String(), r.think.String())
		}
		if len(m.ToolCalls) != 2 || m.ToolCalls[0].Name != "note" || m.ToolCalls[1].Arguments != `{"bbox":[0.1,0.2,0.3,0.4]}` || m.ToolCalls[1].ID != "b" {
			t.Errorf("noIndex=%v: calls %+v", noIndex, m.ToolCalls)
		}
		if reply.FinishReason != provider.FinishToolCalls || reply.Usage != (provider.Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 64}) {
			t.Errorf("finish %s usage %+v", reply.FinishReason, reply.Usage)
		}
		if reply.RequestBytes == 0 {
			t.Error("request bytes not reported")
		}
	}
}

func TestPlainJSONReply(t *testing.T) {
	srv := pt.OpenAI(pt.Steps(pt.Step{Text: "<think>hm</think>ok", Reasoning: "native", Calls: []pt.Call{{ID: "a", Name: "peek", Args: `{}`}}, Finish: "stop"}))
	defer srv.Close()
	reply, err := adapter(srv.URL, true).Stream(context.Background(), simpleReq(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Message.Text != "ok" || !strings.Contains(reply.Message.Reasoning, "native") || !strings.Contains(reply.Message.Reasoning, "hm") {
		t.Errorf("message %+v", reply.Message)
	}
	if reply.FinishReason != provider.FinishToolCalls {
		t.Errorf("stop with calls should read as tool_calls, got %s", reply.FinishReason)
	}
}

func TestRequestShape(t *testing.T) {
	srv := pt.OpenAI(pt.Steps(pt.Step{Text: "x"}))
	defer srv.Close()
	img := provider.NewImage("image/jpeg", []byte{0xff, 0xd8, 1, 2})
	req := &provider.Request{System: "sys", Messages: []provider.Message{
		{Role: provider.RoleUser, Text: "go"},
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "c1", Name: "note", Arguments: `{"summary":"s"}`}, {ID: "c2", Name: "peek", Arguments: `{}`}}},
		{Role: provider.RoleTool, ToolCallID: "c1", ToolName: "note", Text: "noted"},
		{Role: provider.RoleTool, ToolCallID: "c2", ToolName: "peek", Text: "screen"},
		{Role: provider.RoleUser, Text: "The screen after peek:", Images: []*provider.Image{img}},
	}}
	if _, err := adapter(srv.URL, false).Stream(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := srv.Body(0)
	if !strings.Contains(string(body), `{"role":"assistant","content":null,"tool_calls":`) {
		t.Errorf("tool-call-only assistant message should carry content:null: %s", body)
	}
	var decoded struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(body, &decoded); err != nil {
		t.Fatal(err)
	}
	if len(decoded.Messages) != 6 {
		t.Fatalf("want 6 messages, got %d", len(decoded.Messages))
	}
	for _, m := range decoded.Messages {
		if m["role"] == "tool" && strings.Contains(toJSON(m), "image_url") {
			t.Error("an image travelled inside a tool message")
		}
	}
	last := toJSON(decoded.Messages[5])
	if !strings.Contains(last, `"image_url"`) || !strings.Contains(last, "data:image/jpeg;base64,/9gBAg==") {
		t.Errorf("image not in the user message after the results: %s", last)
	}
	if got := srv.Header(0).Get("Authorization"); got != "Bearer sk-test-secret-123456" {
		t.Errorf("Authorization = %q", got)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestErrorClasses(t *testing.T) {
	cases := []struct {
		step  pt.Step
		class provider.ErrorClass
		after time.Duration
	}{
		{pt.Step{Status: 429, ErrType: "rate_limit_exceeded", ErrMessage: "slow down", RetryAfter: "7"}, provider.ClassRateLimit, 7 * time.Second},
		{pt.Step{Status: 429, ErrType: "insufficient_quota", ErrMessage: "You exceeded your current quota"}, provider.ClassBilling, 0},
		{pt.Step{Status: 401, ErrType: "invalid_api_key", ErrMessage: "Incorrect API key provided: sk-test-*****3456"}, provider.ClassAuth, 0},
		{pt.Step{Status: 404, ErrType: "model_not_found", ErrMessage: "The model `m` does not exist"}, provider.ClassModelNotFound, 0},
		{pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "This model's maximum context length is 128000 tokens"}, provider.ClassContextOverflow, 0},
		{pt.Step{Status: 500, ErrType: "server_error", ErrMessage: "boom"}, provider.ClassOverloaded, 0},
		{pt.Step{Status: 529, ErrType: "overloaded_error", ErrMessage: "Overloaded"}, provider.ClassOverloaded, 0},
		{pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "messages: bad role"}, provider.ClassInvalidRequest, 0},
		{pt.Step{Stall: true}, provider.ClassTimeout, 0},
	}
	for _, c := range cases {
		srv := pt.OpenAI(pt.Steps(c.step))
		_, err := adapter(srv.URL, false).Stream(context.Background(), simpleReq(), nil)
		srv.Close()
		var pe *provider.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%+v: error %v is not a *provider.Error", c.step, err)
		}
		if pe.Class != c.class || pe.RetryAfter != c.after {
			t.Errorf("%d %s: class %s retry-after %s, want %s %s (%v)", c.step.Status, c.step.ErrType, pe.Class, pe.RetryAfter, c.class, c.after, pe)
		}
	}
}

func TestCancelIsNotATimeout(t *testing.T) {
	srv := pt.OpenAI(pt.Steps(pt.Step{Stall: true}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	a := openai.New(openai.Config{Options: provider.Options{BaseURL: srv.URL + "/v1", Model: "m", IdleTimeout: 10 * time.Second}})
	_, err := a.Stream(ctx, simpleReq(), nil)
	if pe := provider.AsError(err); pe.Class != provider.ClassCanceled {
		t.Errorf("class %s, want canceled", pe.Class)
	}
}

// TestCachedTokens reads the cached prompt tokens on every path: Chat
// Completions' prompt_tokens_details.cached_tokens in the plain reply and in
// the stream's usage chunk, and the Responses wire's
// input_tokens_details.cached_tokens in response.completed.
func TestCachedTokens(t *testing.T) {
	want := provider.Usage{PromptTokens: 2048, CompletionTokens: 30, CachedTokens: 1920}
	for _, noStream := range []bool{false, true} {
		srv := pt.OpenAI(pt.Steps(pt.Step{Calls: []pt.Call{{ID: "a", Name: "peek", Args: `{}`}}, PromptTokens: 2048, CompletionTokens: 30, CachedTokens: 1920}))
		reply, err := adapter(srv.URL, noStream).Stream(context.Background(), simpleReq(), nil)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if reply.Usage != want {
			t.Errorf("chat, noStream=%v: usage %+v, want %+v", noStream, reply.Usage, want)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}`+"\n\n")
		fmt.Fprint(w, `data: {"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[],`+
			`"usage":{"input_tokens":2048,"input_tokens_details":{"cached_tokens":1920},"output_tokens":30,"total_tokens":2078}}}`+"\n\n")
	}))
	defer srv.Close()
	a := openai.New(openai.Config{Options: provider.Options{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m"}, API: openai.APIResponses})
	reply, err := a.Stream(context.Background(), simpleReq(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Usage != want {
		t.Errorf("responses: usage %+v, want %+v", reply.Usage, want)
	}
}
