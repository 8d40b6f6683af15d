package provider

import (
	"net/http"
	"testing"
	"time"
)

func TestThinkSplitterAcrossChunks(t *testing.T) {
	var s ThinkSplitter
	var text, reason string
	for _, d := range []string{"Hel", "lo <thi", "nk>plan", " it</th", "ink> world", "<"} {
		a, b := s.Feed(d)
		text += a
		reason += b
	}
	a, b := s.Flush()
	text, reason = text+a, reason+b
	if text != "Hello  world<" || reason != "plan it" {
		t.Errorf("text %q reasoning %q", text, reason)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("Retry-After", "3")
	if d := ParseRetryAfter(h, now); d != 3*time.Second {
		t.Errorf("seconds: %s", d)
	}
	h.Set("Retry-After", now.Add(10*time.Second).Format(http.TimeFormat))
	if d := ParseRetryAfter(h, now); d != 10*time.Second {
		t.Errorf("date: %s", d)
	}
	h.Set("Retry-After-Ms", "250")
	if d := ParseRetryAfter(h, now); d != 250*time.Millisecond {
		t.Errorf("ms: %s", d)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		status   int
		typ, msg string
		want     ErrorClass
	}{
		{429, "rate_limit_exceeded", "Rate limit reached for gpt-4o. Visit https://platform.openai.com/account/rate-limits", ClassRateLimit},
		{429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.", ClassBilling},
		{402, "", "Insufficient Balance", ClassBilling},
		{400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API.", ClassBilling},
		{400, "", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", ClassContextOverflow},
		{413, "request_too_large", "Request exceeds the maximum allowed number of bytes.", ClassContextOverflow},
		{403, "permission_error", "no access", ClassAuth},
		{404, "", "The model `gpt-9` does not exist or you do not have access to it.", ClassModelNotFound},
		{503, "", "upstream unavailable", ClassOverloaded},
		{504, "", "gateway timeout", ClassTimeout},
		{0, "overloaded_error", "Overloaded", ClassOverloaded},
		{422, "", "tool_calls must be followed by tool messages", ClassInvalidRequest},
	}
	for _, c := range cases {
		if got := Classify(c.status, c.typ, c.msg); got != c.want {
			t.Errorf("%d %s %q: %s, want %s", c.status, c.typ, c.msg, got, c.want)
		}
	}
	for _, c := range []ErrorClass{ClassAuth, ClassBilling, ClassModelNotFound, ClassInvalidRequest} {
		if !c.Fatal() {
			t.Errorf("%s should be fatal", c)
		}
	}
}
