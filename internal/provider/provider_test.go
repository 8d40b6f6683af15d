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
