package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/anthropic"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

func req() *provider.Request {
	return &provider.Request{System: "sys", Messages: []provider.Message{{Role: provider.RoleUser, Text: "go"}},
		Tools: []provider.ToolSpec{{Name: "peek", Schema: json.RawMessage(`{"type":"object"}`)}}}
}

func TestStreamAndPlain(t *testing.T) {
	st := pt.Step{Reasoning: "think", Text: "hello", Calls: []pt.Call{{ID: "t1", Name: "peek", Args: `{"a":1}`}}, PromptTokens: 50, CachedTokens: 20, CacheWriteTokens: 12, CompletionTokens: 5}
	for _, noStream := range []bool{false, true} {
		srv := pt.Anthropic(pt.Steps(st))
		a := anthropic.New(anthropic.Config{Options: provider.Options{BaseURL: srv.URL, APIKey: "k-123456", Model: "c", NoStream: noStream}, ThinkingBudget: 2000})
		r, err := a.Stream(context.Background(), req(), nil)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		m := r.Message
		if m.Text != "hello" || m.Reasoning != "think" || m.ReasoningSignature != "sig" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Arguments != `{"a":1}` {
			t.Errorf("noStream=%v: %+v", noStream, m)
		}
		if r.FinishReason != provider.FinishToolCalls || r.Usage != (provider.Usage{PromptTokens: 50, CachedTokens: 20, CacheWriteTokens: 12, CompletionTokens: 5}) {
			t.Errorf("finish %s usage %+v", r.FinishReason, r.Usage)
		}
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		step  pt.Step
		class provider.ErrorClass
	}{
		{pt.Step{Status: 429, ErrType: "rate_limit_error", ErrMessage: "slow", RetryAfter: "2"}, provider.ClassRateLimit},
		{pt.Step{Status: 529, ErrType: "overloaded_error", ErrMessage: "Overloaded"}, provider.ClassOverloaded},
		{pt.Step{Status: 401, ErrType: "authentication_error", ErrMessage: "invalid x-api-key"}, provider.ClassAuth},
		{pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "prompt is too long: 210000 tokens > 200000 maximum"}, provider.ClassContextOverflow},
		{pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "Your credit balance is too low"}, provider.ClassBilling},
		{pt.Step{Status: 404, ErrType: "not_found_error", ErrMessage: "model: claude-x"}, provider.ClassModelNotFound},
		{pt.Step{Stall: true}, provider.ClassTimeout},
	}
	for _, c := range cases {
		srv := pt.Anthropic(pt.Steps(c.step))
		a := anthropic.New(anthropic.Config{Options: provider.Options{BaseURL: srv.URL, APIKey: "k-123456", Model: "c", IdleTimeout: 200 * time.Millisecond}})
		_, err := a.Stream(context.Background(), req(), nil)
		srv.Close()
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Class != c.class {
			t.Errorf("%d %s: %v, want %s", c.step.Status, c.step.ErrType, err, c.class)
		}
		if c.step.RetryAfter != "" && pe.RetryAfter != 2*time.Second {
			t.Errorf("retry-after %s", pe.RetryAfter)
		}
	}
}
