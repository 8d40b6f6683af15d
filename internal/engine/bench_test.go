package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/engine/snapshot"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/state"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

const (
	benchTurns = 300
	benchJPEG  = 100 << 10
)

// scriptedTransport is a zero-latency, in-process Chat Completions server:
// it reads (and counts) the request body and answers with a canned SSE
// stream — [note, peek] every turn, [note, end_session] at the last.
type scriptedTransport struct{ n atomic.Int64 }

func (s *scriptedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	n := s.n.Add(1)
	action, args := "peek", `{}`
	switch {
	case n == 1:
		action, args = "update_progress", `{"user_said":"benchmark","steps":[{"title":"look at the screen 300 times","status":"in_progress"}]}`
	case n >= benchTurns:
		action, args = "end_session", `{"status":"DONE","recap":"benchmark done"}`
	}
	chunk := func(delta string, finish string) string {
		f := "null"
		if finish != "" {
			f = strconv.Quote(finish)
		}
		return `data: {"id":"b","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}` + "\n\n"
	}
	var b strings.Builder
	b.WriteString(chunk(`{"role":"assistant","content":"Looking at the screen."}`, ""))
	fmt.Fprintf(&b, "%s", chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"id":"n%d","type":"function","function":{"name":"note","arguments":"{\"summary\":\"turn %d: checking the screen\"}"}}]}`, n, n), ""))
	fmt.Fprintf(&b, "%s", chunk(fmt.Sprintf(`{"tool_calls":[{"index":1,"id":"a%d","type":"function","function":{"name":%q,"arguments":%q}}]}`, n, action, args), ""))
	b.WriteString(chunk(`{}`, "tool_calls"))
	b.WriteString(`data: {"id":"b","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":40,"prompt_tokens_details":{"cached_tokens":800}}}` + "\n\ndata: [DONE]\n\n")
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(b.String())), Request: r}, nil
}

// benchRig is a zero-latency, in-process rig: every call returns a line of
// text and a fresh 100 KB JPEG.
type benchRig struct{ tools []provider.ToolSpec }

func (r *benchRig) Tools() []provider.ToolSpec { return r.tools }
func (r *benchRig) Instructions() string       { return rigtest.Instructions }
func (r *benchRig) Call(_ context.Context, name string, _ json.RawMessage) (rig.Result, error) {
	img := rigtest.TinyJPEG(benchJPEG)
	return rig.Result{Text: name + " done\nscreen: changed\n0 [text] \"Settings\" [0.510,0.550,0.590,0.630] 0.96",
		Images: []*provider.Image{provider.NewImage("image/jpeg", img)}}, nil
}

// timedProvider and timedRig measure the time spent outside the engine.
type timedProvider struct {
	provider.Provider
	spent *time.Duration
}

func (p timedProvider) Stream(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	t := time.Now()
	defer func() { *p.spent += time.Since(t) }()
	return p.Provider.Stream(ctx, req, sink)
}

type timedRig struct {
	engine.Rig
	spent *time.Duration
}

func (r timedRig) Call(ctx context.Context, name string, args json.RawMessage) (rig.Result, error) {
	t := time.Now()
	defer func() { *r.spent += time.Since(t) }()
	return r.Rig.Call(ctx, name, args)
}

// turnClock records each turn's wall time and the provider and rig time in it.
type turnClock struct {
	last                  time.Time
	provider, rig         *time.Duration
	overhead, adapterTime []time.Duration
}

func (c *turnClock) AfterRound(context.Context, *engine.State, []provider.Message) {
	now := time.Now()
	wall := now.Sub(c.last)
	c.overhead = append(c.overhead, wall-*c.provider-*c.rig)
	c.adapterTime = append(c.adapterTime, *c.provider)
	*c.provider, *c.rig = 0, 0
	c.last = now
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkSession300 runs a 300-turn session against a zero-latency
// in-process provider (the real OpenAI-compatible adapter over an in-memory
// HTTP transport) and rig (100 KB JPEG per turn). Engine overhead per turn is
// the turn's wall time minus the time inside the provider adapter and the rig.
func BenchmarkSession300(b *testing.B) {
	rigTools := []provider.ToolSpec{
		{Name: "peek", Description: "overhead camera photo", Schema: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "tap", Description: "tap", Schema: json.RawMessage(`{"type":"object","properties":{"bbox":{"type":"array","items":{"type":"number"},"minItems":4,"maxItems":4}},"required":["bbox"]}`)},
	}
	var (
		overhead, adapter []time.Duration
		reqBytes          []int
		allocs, bytes     uint64
		turns             int
	)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var pSpent, rSpent time.Duration
		tr := &scriptedTransport{}
		model := openai.New(openai.Config{Options: provider.Options{BaseURL: "http://model.invalid/v1", APIKey: "k", Model: "bench",
			HTTPClient: &http.Client{Transport: tr}}})
		clock := &turnClock{last: time.Now(), provider: &pSpent, rig: &rSpent}
		cfg := engine.Config{
			Trigger: "benchmark", MaxTurns: benchTurns, ContextWindow: 1 << 30, SessionBudget: time.Hour,
			Provider: timedProvider{model, &pSpent}, Rig: timedRig{&benchRig{tools: rigTools}, &rSpent},
		}
		// The production policies, wired as cmd/loop wires them (plan,
		// compaction, EMA, stuck guard, state tools), and a snapshot after
		// every round (fsync included) unless BENCH_NO_SNAPSHOTS is set.
		dir, err := state.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if err := policies.Wire(&cfg, dir, nil); err != nil {
			b.Fatal(err)
		}
		sw, err := snapshot.NewWriter(dir, "bench-a1", nil, func(f string, a ...any) { b.Logf(f, a...) })
		if err != nil {
			b.Fatal(err)
		}
		if os.Getenv("BENCH_NO_SNAPSHOTS") == "" {
			cfg.Observers = append(cfg.Observers, sw)
		}
		cfg.Observers = append(cfg.Observers, clock)
		s := engine.New(cfg)
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		m := s.Run(context.Background())
		runtime.ReadMemStats(&ms1)
		if m.Sentinel != contract.Done || m.Turns != benchTurns {
			b.Fatalf("session ended %s/%s after %d turns", m.Sentinel, m.ExitReason, m.Turns)
		}
		overhead, adapter, reqBytes, turns = clock.overhead, clock.adapterTime, s.RequestBytes(), m.Turns
		allocs, bytes = ms1.Mallocs-ms0.Mallocs, ms1.TotalAlloc-ms0.TotalAlloc
		sw.Close()
		dir.Close()
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(pct(overhead, 0.50)), "overhead-p50-ms/turn")
	b.ReportMetric(ms(pct(overhead, 0.99)), "overhead-p99-ms/turn")
	b.ReportMetric(float64(allocs)/float64(turns), "allocs/turn")
	b.ReportMetric(float64(reqBytes[29]), "req-bytes@30")
	b.ReportMetric(float64(reqBytes[39]), "req-bytes@40")
	b.ReportMetric(float64(reqBytes[299])/float64(reqBytes[39]), "plateau-300/40")
	b.ReportMetric(float64(reqBytes[99]), "req-bytes@100")
	b.ReportMetric(float64(reqBytes[299]), "req-bytes@300")
	b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MiB")
	b.Logf("300-turn session: engine overhead per turn p50 %.3f ms, p99 %.3f ms; adapter (encode + in-memory HTTP) p50 %.1f ms, p99 %.1f ms",
		ms(pct(overhead, 0.5)), ms(pct(overhead, 0.99)), ms(pct(adapter, 0.5)), ms(pct(adapter, 0.99)))
	b.Logf("allocations per turn %.0f (%.1f MiB/turn, whole process); request bytes at turn 30: %d, 40: %d, 100: %d, 300: %d (300/40 = %.2f); peak RSS %.0f MiB",
		float64(allocs)/float64(turns), float64(bytes)/float64(turns)/(1<<20), reqBytes[29], reqBytes[39], reqBytes[99], reqBytes[299],
		float64(reqBytes[299])/float64(reqBytes[39]), float64(peakRSS())/(1<<20))
}
