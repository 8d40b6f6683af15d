package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/anthropic"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	"github.com/clawfarm/clawfarm/internal/state"
)

// The prices of cached input, as a share of the base input price, that the
// prompt cache benchmark bills with. Anthropic's pricing page: a cache read
// costs 0.1× the base input price, a 5-minute cache write 1.25×. OpenAI's:
// cached input is half price on the GPT-4o generation (the figure the
// benchmark's goal is set with), a tenth on the GPT-5 generation.
const (
	anthropicReadShare  = 0.10
	anthropicWriteShare = 1.25
	openaiCachedShare   = 0.50
	openaiGPT5Share     = 0.10
)

// cacheTurn is one request's usage as modelsim reported it.
type cacheTurn struct{ input, cached, written int64 }

// usageLog records each reply's usage.
type usageLog struct {
	provider.Provider
	mu    sync.Mutex
	turns []cacheTurn
}

func (u *usageLog) Stream(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	r, err := u.Provider.Stream(ctx, req, sink)
	if err == nil {
		u.mu.Lock()
		u.turns = append(u.turns, cacheTurn{r.Usage.PromptTokens, r.Usage.CachedTokens, r.Usage.CacheWriteTokens})
		u.mu.Unlock()
	}
	return r, err
}

// systemBreakpointOnly is the Anthropic adapter as it was before it placed
// breakpoints in the transcript: cache_control on the system prompt only.
// It rewrites the request on its way to modelsim.
type systemBreakpointOnly struct{ next http.RoundTripper }

func (s systemBreakpointOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var msgs []map[string]any
	if err := json.Unmarshal(req["messages"], &msgs); err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if blocks, ok := m["content"].([]any); ok {
			for _, b := range blocks {
				if bm, ok := b.(map[string]any); ok {
					delete(bm, "cache_control")
				}
			}
		}
	}
	if req["messages"], err = json.Marshal(msgs); err != nil {
		return nil, err
	}
	if body, err = json.Marshal(req); err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return s.next.RoundTrip(r2)
}

// cacheScenario is n turns: a plan, then peeks, then end_session.
func cacheScenario(n int) modelsim.Library {
	steps := []modelsim.Step{{Call: &modelsim.Call{Name: "update_progress", Arguments: map[string]any{
		"user_said": "benchmark", "steps": []any{map[string]any{"title": "look at the screen 300 times", "status": "in_progress"}}}}}}
	for len(steps) < n-1 {
		steps = append(steps, modelsim.Step{Peek: true, Note: fmt.Sprintf("checking the screen, look %d", len(steps))})
	}
	steps = append(steps, modelsim.Step{End: &modelsim.End{Status: "DONE", Recap: "benchmark done"}})
	return modelsim.Library{"bench": {Name: "bench", Sessions: []modelsim.Session{{Steps: steps}}}}
}

type cacheRun struct {
	format     string // anthropic or chat
	aware      bool   // the adapter's breakpoints (anthropic); false: the system prompt's only
	at, keep   int    // the fold cadence
	turns      []cacheTurn
	reqTokens  []int64
	input      int64
	cached     int64
	written    int64
	sentinel   string
	turnsTaken int
}

// billable is the session's input in base-price tokens.
func (c *cacheRun) billable(readShare float64) float64 {
	fresh := float64(c.input - c.cached - c.written)
	if c.format == "anthropic" {
		return fresh + readShare*float64(c.cached) + anthropicWriteShare*float64(c.written)
	}
	return fresh + float64(c.written) + readShare*float64(c.cached)
}

func runCacheSession(b testing.TB, r *cacheRun, turns int) {
	b.Helper()
	srv := httptest.NewServer(modelsim.NewServer(cacheScenario(turns)).Handler())
	defer srv.Close()
	// rigsim: the real tools, instructions, listings and screens.
	rs := httptest.NewServer(rigsim.New("bench", rigsim.Config{Seed: 1}).Handler())
	defer rs.Close()
	rc, err := rig.Dial(context.Background(), rig.Config{Endpoint: rs.URL + "/mcp", CallTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()

	opts := provider.Options{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "sim/bench", HTTPClient: &http.Client{}}
	var model provider.Provider
	switch r.format {
	case "anthropic":
		opts.BaseURL = srv.URL
		if !r.aware {
			opts.HTTPClient.Transport = systemBreakpointOnly{http.DefaultTransport}
		}
		model = anthropic.New(anthropic.Config{Options: opts})
	default:
		model = openai.New(openai.Config{Options: opts, API: openai.APIChat})
	}
	log := &usageLog{Provider: model}
	cfg := engine.Config{
		Trigger: "benchmark [scenario:bench]", MaxTurns: turns, ContextWindow: 1 << 30, SessionBudget: time.Hour,
		Provider: log, Rig: rc, Compactor: compaction.Policy{At: r.at, Keep: r.keep},
	}
	dir, err := state.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	if err := policies.Wire(&cfg, dir, nil); err != nil {
		b.Fatal(err)
	}
	m := engine.New(cfg).Run(context.Background())
	r.sentinel, r.turnsTaken = string(m.Sentinel)+"/"+string(m.ExitReason), m.Turns
	r.turns = log.turns
	r.input, r.cached, r.written = 0, 0, 0
	r.reqTokens = r.reqTokens[:0]
	for _, t := range log.turns {
		r.input += t.input
		r.cached += t.cached
		r.written += t.written
		r.reqTokens = append(r.reqTokens, t.input)
	}
}

// modelsim reads a folded transcript's turns from the fold message, so a
// scripted session longer than the fold cadence plays to its end, and the
// cache emulation reports reads on both wires.
func TestModelsimScriptOutlivesFolds(t *testing.T) {
	for _, format := range []string{"chat", "anthropic"} {
		r := &cacheRun{format: format, aware: true, at: 12, keep: 4}
		runCacheSession(t, r, 30)
		if r.sentinel != "DONE/end_turn" || r.turnsTaken != 30 {
			t.Errorf("%s: ended %s at turn %d, want DONE at turn 30", format, r.sentinel, r.turnsTaken)
		}
		if r.cached == 0 || r.cached >= r.input {
			t.Errorf("%s: %d of %d input tokens cached", format, r.cached, r.input)
		}
	}
}

// BenchmarkPromptCache300 runs a 300-turn session against modelsim with its
// prompt cache emulation (docs/modelsim.md) and rigsim, on the Messages wire
// and on Chat Completions, with the adapter's cache breakpoints and without
// them (the system prompt's only), and with the fold cadences the presets
// were chosen from. It prints the input tokens, the cached ones, the
// billable equivalent at each provider's cached price, and the request size
// at turn 300 over turn 40 (docs/benchmarks.md, "Prompt caching").
func BenchmarkPromptCache300(b *testing.B) {
	runs := []*cacheRun{
		{format: "anthropic", aware: false, at: 30, keep: 10},
		{format: "anthropic", aware: true, at: 30, keep: 10},
		{format: "anthropic", aware: true, at: 40, keep: 10},
		{format: "anthropic", aware: true, at: 50, keep: 10},
		{format: "chat", aware: true, at: 20, keep: 10},
		{format: "chat", aware: true, at: 25, keep: 10},
		{format: "chat", aware: true, at: 30, keep: 10},
		{format: "chat", aware: true, at: 40, keep: 10},
	}
	for _, r := range runs {
		name := fmt.Sprintf("%s/breakpoints=%v/fold=%d-%d", r.format, r.aware, r.at, r.keep)
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runCacheSession(b, r, benchTurns)
			}
			if len(r.reqTokens) < benchTurns {
				b.Fatalf("%d requests (%s at turn %d), want %d", len(r.reqTokens), r.sentinel, r.turnsTaken, benchTurns)
			}
			share := openaiCachedShare
			if r.format == "anthropic" {
				share = anthropicReadShare
			}
			hit := float64(r.cached) / float64(r.input)
			growth := float64(r.reqTokens[benchTurns-1]) / float64(r.reqTokens[39])
			b.ReportMetric(float64(r.input), "input-tokens")
			b.ReportMetric(float64(r.cached), "cached-tokens")
			b.ReportMetric(100*hit, "cached-%")
			b.ReportMetric(r.billable(share), "billable-tokens")
			b.ReportMetric(r.billable(share)/float64(r.input), "billable/no-cache")
			b.ReportMetric(growth, "req-300/40")
			extra := ""
			if r.format == "chat" {
				extra = fmt.Sprintf("; at the GPT-5 cached price (%.2f×): %.0f (%.3f× no cache)", openaiGPT5Share, r.billable(openaiGPT5Share), r.billable(openaiGPT5Share)/float64(r.input))
			}
			b.Logf("%s: %s after %d turns; input %d, cached %d (%.1f%%), cache writes %d; billable %.0f at %.2f× (%.3f× no cache)%s; request tokens at turn 40: %d, 300: %d (%.2f×)",
				name, r.sentinel, r.turnsTaken, r.input, r.cached, 100*hit, r.written, r.billable(share), share, r.billable(share)/float64(r.input), extra,
				r.reqTokens[39], r.reqTokens[benchTurns-1], growth)
		})
	}
	var lines []string
	for _, r := range runs {
		if len(r.reqTokens) < benchTurns {
			continue
		}
		share := openaiCachedShare
		if r.format == "anthropic" {
			share = anthropicReadShare
		}
		for _, base := range runs {
			if base.format == r.format && !base.aware && base != r && len(base.reqTokens) >= benchTurns {
				lines = append(lines, fmt.Sprintf("%s fold %d/%d: %.3f× the billable input of the system-prompt-only session",
					r.format, r.at, r.keep, r.billable(share)/base.billable(share)))
			}
		}
	}
	if len(lines) > 0 {
		b.Logf("%s", strings.Join(lines, "\n"))
	}
}
