package modelsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// cacheServer is a server with the built-in scenarios and a clock the test moves.
func cacheServer(t *testing.T) (*Server, *time.Time) {
	t.Helper()
	lib, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(lib)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	return s, &now
}

func post(t *testing.T, s *Server, path string, body any) []byte {
	t.Helper()
	b, _ := json.Marshal(body)
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b)))
	req.Header.Set("x-api-key", "k")
	req.Header.Set("anthropic-version", "2023-06-01")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// words is n bytes of text: n/4 tokens.
func words(n int, seed string) string {
	return (seed + " " + strings.Repeat("abcd", n))[:n]
}

func chatUsage(t *testing.T, s *Server, system string, msgs ...string) usage {
	t.Helper()
	m := []map[string]any{{"role": "system", "content": system}}
	for i, text := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		m = append(m, map[string]any{"role": role, "content": text})
	}
	var r chatResponse
	_ = json.Unmarshal(post(t, s, "/v1/chat/completions", map[string]any{"model": "sim/timer", "messages": m}), &r)
	return r.Usage
}

func TestOpenAICaching(t *testing.T) {
	t.Run("a prompt under 1024 tokens is never cached", func(t *testing.T) {
		s, _ := cacheServer(t)
		for range 3 {
			if u := chatUsage(t, s, words(2000, "sys"), "set a timer"); u.PromptTokens >= 1024 || u.PromptTokensDetails.CachedTokens != 0 {
				t.Fatalf("usage %+v, want under 1024 tokens and nothing cached", u)
			}
		}
	})
	t.Run("a second identical request reads all but the tail", func(t *testing.T) {
		s, _ := cacheServer(t)
		first := chatUsage(t, s, words(6000, "sys"), "set a timer")
		second := chatUsage(t, s, words(6000, "sys"), "set a timer")
		if first.PromptTokensDetails.CachedTokens != 0 {
			t.Errorf("first request: %d cached", first.PromptTokensDetails.CachedTokens)
		}
		c := second.PromptTokensDetails.CachedTokens
		if second.PromptTokens != first.PromptTokens || c < 1024 || (c-1024)%128 != 0 || second.PromptTokens-c >= 128 {
			t.Errorf("second request %+v: want all but the last partial 128 tokens cached", second)
		}
	})
	t.Run("a longer conversation reads the earlier one", func(t *testing.T) {
		s, _ := cacheServer(t)
		first := chatUsage(t, s, words(6000, "sys"), "set a timer")
		second := chatUsage(t, s, words(6000, "sys"), "set a timer", "ok", words(2000, "more"))
		if c := second.PromptTokensDetails.CachedTokens; c != 1024+(first.PromptTokens-1024)/128*128 {
			t.Errorf("second request %+v: want the first's %d tokens cached, in 128-token steps", second, first.PromptTokens)
		}
	})
	t.Run("a change in the system prompt invalidates everything after it", func(t *testing.T) {
		s, _ := cacheServer(t)
		chatUsage(t, s, words(6000, "sys"), "set a timer", "ok", words(6000, "more"))
		if u := chatUsage(t, s, words(6000, "SYS"), "set a timer", "ok", words(6000, "more")); u.PromptTokensDetails.CachedTokens != 0 {
			t.Errorf("usage %+v, want nothing cached", u)
		}
	})
	t.Run("the cache expires after 5 minutes without a read", func(t *testing.T) {
		s, now := cacheServer(t)
		chatUsage(t, s, words(6000, "sys"), "set a timer")
		*now = now.Add(4 * time.Minute)
		if u := chatUsage(t, s, words(6000, "sys"), "set a timer"); u.PromptTokensDetails.CachedTokens == 0 {
			t.Errorf("4 minutes later: %+v, want a read", u)
		}
		*now = now.Add(4 * time.Minute) // 8 since the write, 4 since the read refreshed it
		if u := chatUsage(t, s, words(6000, "sys"), "set a timer"); u.PromptTokensDetails.CachedTokens == 0 {
			t.Errorf("4 minutes after a read: %+v, want a read", u)
		}
		*now = now.Add(5 * time.Minute)
		if u := chatUsage(t, s, words(6000, "sys"), "set a timer"); u.PromptTokensDetails.CachedTokens != 0 {
			t.Errorf("5 minutes idle: %+v, want nothing cached", u)
		}
	})
	t.Run("prompt_cache_key and model keep caches apart", func(t *testing.T) {
		s, _ := cacheServer(t)
		msgs := []map[string]any{{"role": "system", "content": words(6000, "sys")}, {"role": "user", "content": "set a timer"}}
		var r chatResponse
		_ = json.Unmarshal(post(t, s, "/v1/chat/completions", map[string]any{"model": "sim/timer", "messages": msgs, "prompt_cache_key": "a"}), &r)
		_ = json.Unmarshal(post(t, s, "/v1/chat/completions", map[string]any{"model": "sim/timer", "messages": msgs, "prompt_cache_key": "b"}), &r)
		if r.Usage.PromptTokensDetails.CachedTokens != 0 {
			t.Errorf("another key read %d tokens", r.Usage.PromptTokensDetails.CachedTokens)
		}
		_ = json.Unmarshal(post(t, s, "/v1/chat/completions", map[string]any{"model": "sim/timer", "messages": msgs, "prompt_cache_key": "a"}), &r)
		if r.Usage.PromptTokensDetails.CachedTokens == 0 {
			t.Error("the same key read nothing")
		}
	})
	t.Run("the Responses wire without a stored response caches as chat does", func(t *testing.T) {
		s, _ := cacheServer(t)
		body := map[string]any{"model": "sim/timer", "instructions": words(6000, "sys"), "input": "set a timer", "store": false}
		var r responseObject
		_ = json.Unmarshal(post(t, s, "/v1/responses", body), &r)
		_ = json.Unmarshal(post(t, s, "/v1/responses", body), &r)
		if c := r.Usage.InputTokensDetails.CachedTokens; c < 1024 || r.Usage.InputTokens-c >= 128 {
			t.Errorf("usage %+v, want all but the tail cached", r.Usage)
		}
	})
}

// messagesBody is an Anthropic request: system text, then user/assistant
// text messages; bp marks the blocks (0: system, i: the i-th message) that
// carry cache_control.
func messagesBody(system string, msgs []string, bp ...int) map[string]any {
	marked := func(i int) bool {
		for _, b := range bp {
			if b == i {
				return true
			}
		}
		return false
	}
	block := func(text string, i int) map[string]any {
		b := map[string]any{"type": "text", "text": text}
		if marked(i) {
			b["cache_control"] = map[string]any{"type": "ephemeral"}
		}
		return b
	}
	var ms []map[string]any
	for i, text := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		ms = append(ms, map[string]any{"role": role, "content": []any{block(text, i+1)}})
	}
	return map[string]any{"model": "sim/timer", "max_tokens": 1000, "system": []any{block(system, 0)}, "messages": ms}
}

func anthropicUse(t *testing.T, s *Server, body map[string]any) anthropicUsage {
	t.Helper()
	var r messagesResponse
	if err := json.Unmarshal(post(t, s, "/v1/messages", body), &r); err != nil {
		t.Fatal(err)
	}
	return r.Usage
}

func TestAnthropicCaching(t *testing.T) {
	sys := words(6000, "sys") // 1500 tokens
	t.Run("no cache_control reads and writes nothing", func(t *testing.T) {
		s, _ := cacheServer(t)
		for range 2 {
			u := anthropicUse(t, s, messagesBody(sys, []string{"set a timer"}))
			if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 || u.InputTokens < 1500 {
				t.Fatalf("usage %+v, want everything uncached", u)
			}
		}
	})
	t.Run("a prefix under 1024 tokens is not cached", func(t *testing.T) {
		s, _ := cacheServer(t)
		for range 2 {
			u := anthropicUse(t, s, messagesBody(words(2000, "sys"), []string{"set a timer"}, 0, 1))
			if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 {
				t.Fatalf("usage %+v, want nothing cached", u)
			}
		}
	})
	t.Run("a second identical request reads all but the tail", func(t *testing.T) {
		s, _ := cacheServer(t)
		body := messagesBody(sys, []string{"set a timer", "ok", "the tail after the last breakpoint"}, 0, 2)
		first := anthropicUse(t, s, body)
		if first.CacheReadInputTokens != 0 || first.CacheCreationInputTokens < 1500 || first.InputTokens != 9 {
			t.Errorf("first request %+v: want the prefix through the breakpoint written, the tail (9 tokens) uncached", first)
		}
		second := anthropicUse(t, s, body)
		if second.CacheReadInputTokens != first.CacheCreationInputTokens || second.CacheCreationInputTokens != 0 || second.InputTokens != first.InputTokens {
			t.Errorf("second request %+v: want the first's %d written tokens read, nothing written", second, first.CacheCreationInputTokens)
		}
	})
	t.Run("writes cover the prefix from the read to the last breakpoint", func(t *testing.T) {
		s, _ := cacheServer(t)
		first := anthropicUse(t, s, messagesBody(sys, []string{"set a timer"}, 0))
		second := anthropicUse(t, s, messagesBody(sys, []string{"set a timer", "ok", words(400, "turn")}, 0, 3))
		if second.CacheReadInputTokens != first.CacheCreationInputTokens || second.CacheCreationInputTokens != 3+1+100 || second.InputTokens != 0 {
			t.Errorf("second request %+v after %+v: want the system read and the new messages written", second, first)
		}
	})
	t.Run("a change in the first message invalidates everything after it", func(t *testing.T) {
		s, _ := cacheServer(t)
		anthropicUse(t, s, messagesBody(sys, []string{"set a timer", "ok", words(400, "turn")}, 3))
		u := anthropicUse(t, s, messagesBody(sys, []string{"set a timer!", "ok", words(400, "turn")}, 3))
		if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens == 0 {
			t.Errorf("usage %+v, want nothing read and the new prefix written", u)
		}
	})
	t.Run("a breakpoint looks back 20 blocks", func(t *testing.T) {
		for _, c := range []struct {
			after int
			read  bool
		}{{19, true}, {20, false}} {
			s, _ := cacheServer(t)
			msgs := []string{"set a timer"}
			anthropicUse(t, s, messagesBody(sys, msgs, 1))
			for i := range c.after {
				msgs = append(msgs, fmt.Sprintf("block %d", i))
			}
			u := anthropicUse(t, s, messagesBody(sys, msgs, len(msgs)))
			if got := u.CacheReadInputTokens > 0; got != c.read {
				t.Errorf("%d blocks after the cached one: usage %+v, read %v, want %v", c.after, u, got, c.read)
			}
		}
	})
	t.Run("the cache lives 5 minutes, refreshed by each read", func(t *testing.T) {
		s, now := cacheServer(t)
		body := messagesBody(sys, []string{"set a timer"}, 0)
		anthropicUse(t, s, body)
		for _, step := range []struct {
			after time.Duration
			read  bool
		}{{4 * time.Minute, true}, {4 * time.Minute, true}, {5 * time.Minute, false}} {
			*now = now.Add(step.after)
			u := anthropicUse(t, s, body)
			if got := u.CacheReadInputTokens > 0; got != step.read {
				t.Errorf("%s later: usage %+v, read %v, want %v", step.after, u, got, step.read)
			}
		}
	})
}

func TestPromptCacheEvictsTheLeastRecentlyUsed(t *testing.T) {
	c := newPromptCache(2)
	now := time.Now()
	hash := func(s string) [32]byte {
		p := newPrompt("x")
		p.add(1, false, []byte(s))
		return p.units[0].hash
	}
	c.put(hash("a"), now)
	c.put(hash("b"), now)
	if !c.has(hash("a"), now) { // a is now the most recent
		t.Fatal("a missing")
	}
	c.put(hash("c"), now)
	if c.has(hash("b"), now) || !c.has(hash("a"), now) || !c.has(hash("c"), now) || c.len() != 2 {
		t.Errorf("want b evicted, a and c kept, 2 entries; have %d", c.len())
	}
}
