package claw

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/redact"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func render(t *testing.T, stream []byte, timestamps bool) []string {
	t.Helper()
	var out []string
	r := &Renderer{Emit: func(s string) { out = append(out, s) }, Timestamps: timestamps}
	if err := scanLines(bytes.NewReader(stream), r.Line); err != nil {
		t.Fatal(err)
	}
	r.Flush()
	return out
}

// The recorded sessions are the real loop's stdout and stderr (bin/loop
// against bin/rigsim and bin/modelsim, as README.md "One session by hand"
// runs it; timer.log starts with the stderr line a pod's log carries too).
func TestRenderRecordedSessions(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"timer", "stuck"} {
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", name+".log"))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(render(t, in, false), "\n") + "\n"
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("rendered %s differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", name, golden, got, want)
			}
		})
	}
}

func TestRenderTimerLines(t *testing.T) {
	t.Parallel()
	in, err := os.ReadFile(filepath.Join("testdata", "timer.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := render(t, in, false)
	first := strings.SplitN(string(in), "\n", 2)[0]
	if lines[0] != first {
		t.Errorf("the stderr line must be kept as it is: got %q, want %q", lines[0], first)
	}
	var turns []string
	for _, l := range lines {
		if strings.HasPrefix(l, "t") && l[1] >= '0' && l[1] <= '9' {
			turns = append(turns, l)
		}
	}
	if len(turns) != 6 {
		t.Fatalf("want one line per turn, 6 turns; got %d:\n%s", len(turns), strings.Join(lines, "\n"))
	}
	for i, want := range []string{
		"t1   note: looking at the phone before starting  →  peek  →  24 elements on screen",
		"t2   note: tapping Clock  →  tap [0.104,0.167,0.177,0.18]  →  screen changed",
		"t6   note: ending the session: DONE  →  end_session DONE",
	} {
		idx := []int{0, 1, 5}[i]
		if turns[idx] != want {
			t.Errorf("turn line %d:\n got %q\nwant %q", idx+1, turns[idx], want)
		}
	}
	last := lines[len(lines)-1]
	if last != "■ DONE  (end_turn, 6 turns, 24.8k tokens)  Started a 5-minute timer in Clock." {
		t.Errorf("done line: %q", last)
	}
}

// A stream made with the events package's own constructors and emitter,
// with every event type and the faults a log carries, and lines that are
// not events between them.
func TestRenderEveryEventAndKeepsStrangers(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	at := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	em := events.NewEmitter(&buf, redact.New(), func() time.Time { at = at.Add(time.Second); return at })
	raw := func(s string) { buf.WriteString(s + "\n") }
	args := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }

	em.Emit(events.SessionStart("farm/open-settings", 2, "anthropic", "claude-sonnet", []string{"note", "end_session", "peek", "tap"}))
	em.Emit(events.Thinking(1, "The user wants Settings; let me look first."))
	em.Emit(events.ToolStart(1, contract.ToolNote, "c1", args(map[string]string{"summary": "opening Settings"})))
	em.Emit(events.ToolResult(1, contract.ToolNote, "c1", "noted", false, 0, false))
	em.Emit(events.ToolStart(1, contract.ToolTap, "c2", args(map[string]any{"bbox": []float64{0.41, 0.62, 0.58, 0.66}})))
	em.Emit(events.ToolResult(1, contract.ToolTap, "c2", "Tapped at bbox [0.41, 0.62, 0.58, 0.66]\nscreen: changed\nhint: plan the next move\nid [kind] \"label\" [l,t,r,b] conf\n0 [text] \"Wi-Fi\" [0.1,0.2,0.3,0.25] 0.99", false, 1, false))
	raw(`panic: runtime error: index out of range [3] with length 3`)
	em.Emit(events.Error(2, "rate_limit", "429 Too Many Requests:\nslow down", 2*time.Second))
	raw(`{"ts":"2026-11-29T18:00:09Z","stream":"tool","type":"tool_st`)
	em.Emit(events.TextDelta(2, "I will "))
	em.Emit(events.TextDelta(2, "swipe up."))
	em.Emit(events.ToolStart(2, contract.ToolNote, "c3", args(map[string]string{"summary": "scrolling to Wi-Fi"})))
	em.Emit(events.ToolResult(2, contract.ToolNote, "c3", "noted", false, 0, false))
	em.Emit(events.ToolStart(2, contract.ToolSwipe, "c4", args(map[string]any{"bbox": []float64{0.2, 0.5, 0.8, 0.6}, "direction": "up", "size": "m"})))
	em.Emit(events.ToolResult(2, contract.ToolSwipe, "c4", "Error executing tool swipe: busy, retry: the rig is running another gesture", true, 0, false))
	raw(`{"ts":"2026-11-29T18:00:12Z","stream":"lifecycle","type":"heartbeat","turn":2}`)
	raw(``)
	em.Emit(events.ToolStart(3, contract.ToolNote, "c5", args(map[string]string{"summary": "quitting Settings to start over"})))
	em.Emit(events.ToolResult(3, contract.ToolNote, "c5", "noted", false, 0, false))
	em.Emit(events.ToolStart(3, contract.ToolForceQuit, "c6", args(map[string]string{"app": "Settings"})))
	em.Emit(events.ToolResult(3, contract.ToolForceQuit, "c6", "force_quit is denied for this run", false, 0, true))
	em.Emit(events.Compaction(3, "fold: 31 → 12 messages"))
	em.Emit(events.ToolStart(4, contract.ToolNote, "c7", args(map[string]string{"summary": "looking at the screen"})))
	em.Emit(events.ToolResult(4, contract.ToolNote, "c7", "noted", false, 0, false))
	em.Emit(events.ToolStart(4, contract.ToolPeek, "c8", args(map[string]any{})))
	// The stream ends mid-turn (the log was cut): the turn is shown as it stands.
	em.Emit(events.Done(contract.TerminationMessage{Sentinel: contract.Stuck, ExitReason: contract.ReasonBudgetExhausted,
		Retryable: false, Turns: 4, Recap: "the input token budget ran out\nwhile scrolling", Usage: contract.Usage{PromptTokens: 1200, CompletionTokens: 30}}))
	raw(`not json at the end`)

	got := render(t, buf.Bytes(), true)
	want := []string{
		`18:00:01 ▶ session start  run farm/open-settings  attempt 2  model anthropic/claude-sonnet  4 tools`,
		`18:00:02 t1   note: opening Settings  →  tap [0.41,0.62,0.58,0.66]  →  screen changed`,
		`panic: runtime error: index out of range [3] with length 3`,
		`18:00:07 ! error at t2 [rate_limit]: 429 Too Many Requests: slow down  (retry in 2s)`,
		`{"ts":"2026-11-29T18:00:09Z","stream":"tool","type":"tool_st`,
		`18:00:08 t2   note: scrolling to Wi-Fi  →  says: "I will swipe up."  →  swipe [0.2,0.5,0.8,0.6] direction="up" size="m"  →  error: Error executing tool swipe: busy, retry: the rig is running another gesture`,
		`{"ts":"2026-11-29T18:00:12Z","stream":"lifecycle","type":"heartbeat","turn":2}`,
		``,
		`18:00:14 t3   note: quitting Settings to start over  →  force_quit app="Settings"  →  blocked: force_quit is denied for this run`,
		`18:00:18 ~ compaction at t3: fold: 31 → 12 messages`,
		`18:00:19 t4   note: looking at the screen  →  peek  →  …`,
		`18:00:22 ■ STUCK  (budget_exhausted, not retryable, 4 turns, 1.2k tokens)  the input token budget ran out while scrolling`,
		`not json at the end`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rendered:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A run's usage line: tokens, the share the prompt cache served, the cost.
func TestUsageLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prompt, completion, cached int64
		cost, want                 string
	}{
		{10000, 500, 8000, "0.0421", "10.5k tokens (80% of the input cached), $0.0421"},
		{900, 40, 0, "", "940 tokens"},
	} {
		if got := usage(c.prompt, c.completion, c.cached, c.cost); got != c.want {
			t.Errorf("usage(%d, %d, %d, %q) = %q, want %q", c.prompt, c.completion, c.cached, c.cost, got, c.want)
		}
	}
}

// A call a ToolPolicy holds shows who is asked and who answered.
func TestRenderApproval(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	at := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	em := events.NewEmitter(&buf, redact.New(), func() time.Time { at = at.Add(time.Second); return at })
	em.Emit(events.ToolStart(7, contract.ToolTap, "c1", json.RawMessage(`{"bbox":[0.4,0.81,0.6,0.85]}`)))
	em.Emit(events.ApprovalRequested(7, "a1-t7-1", contract.ToolTap, "c1", nil, "shop", "pay", "money leaves the farm"))
	em.Emit(events.ApprovalAnswered(7, "a1-t7-1", contract.ToolTap, "c1", "bob", false, "wrong card", 95*time.Second))
	em.Emit(events.ToolResult(7, contract.ToolTap, "c1", "denied by bob: wrong card", true, 0, true))
	got := render(t, buf.Bytes(), false)
	want := []string{
		`t7   tap [0.4,0.81,0.6,0.85]  →  …`,
		`? t7 tap waits for a person (ToolPolicy shop, rule pay): money leaves the farm  (kubectl claw approve / deny)`,
		`? t7 tap denied by bob after 1m35s: wrong card`,
		`t7   tap  →  blocked: denied by bob: wrong card`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rendered:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The system prompt is one line — its hash and size — in the middle of
// the human view, and its text under that line with ShowPrompt.
func TestRenderSystemPrompt(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	at := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	em := events.NewEmitter(&buf, redact.New(), func() time.Time { at = at.Add(time.Second); return at })
	prompt := "You drive a phone.\nEnd with end_session.\n" + strings.Repeat("x", 2000) + "\n"
	em.Emit(events.SessionStart("farm/timer", 1, "openai", "gpt", nil))
	em.Emit(events.SystemPrompt(prompt, "3f1c0a9be47d5566778899aabbccddeeff00112233445566778899aabbccddee"))
	em.Emit(events.ToolStart(1, contract.ToolPeek, "c1", nil))
	for _, show := range []bool{false, true} {
		var got []string
		r := &Renderer{Emit: func(s string) { got = append(got, s) }, ShowPrompt: show}
		if err := scanLines(bytes.NewReader(buf.Bytes()), r.Line); err != nil {
			t.Fatal(err)
		}
		r.Flush()
		want := []string{
			`▶ session start  run farm/timer  attempt 1  model openai/gpt`,
			`§ system prompt  sha256 3f1c0a9be47d  2.0 KiB, 3 lines`,
		}
		if show {
			want = append(want, "    You drive a phone.", "    End with end_session.", "    "+strings.Repeat("x", 2000))
		}
		want = append(want, `t1   peek  →  …`)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("ShowPrompt %v, rendered:\n%s\nwant:\n%s", show, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// The session start line ends with the attempt's OpenTelemetry trace id,
// whole, when the loop exported spans, so a person can find the same
// attempt in Jaeger, Tempo or Langfuse.
func TestRenderOTelTraceID(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	em := events.NewEmitter(&buf, redact.New(), nil)
	ev := events.SessionStart("farm/timer", 1, "openai", "gpt", []string{"note", "end_session"})
	ev.OTelTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	em.Emit(ev)
	em.Emit(events.SessionStart("farm/timer", 2, "openai", "gpt", nil))
	var got []string
	r := &Renderer{Emit: func(s string) { got = append(got, s) }}
	if err := scanLines(bytes.NewReader(buf.Bytes()), r.Line); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`▶ session start  run farm/timer  attempt 1  model openai/gpt  2 tools  otel trace 4bf92f3577b34da6a3ce929d0e0e4736`,
		`▶ session start  run farm/timer  attempt 2  model openai/gpt`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rendered:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A gesture in PhysiClaw's one-line form reads as its verdict, from the
// event's own verdict or, in a trace without one, from the text before the
// listing; a listing row that shows the verdict's words is not the verdict.
func TestRenderPhysiClawResults(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	at := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	em := events.NewEmitter(&buf, redact.New(), func() time.Time { at = at.Add(time.Second); return at })
	args := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	listing := "\nid [kind] \"label\" [left,top,right,bottom] conf\n0 [text] \"screen: changed\" [0.100,0.200,0.300,0.250] 0.99"
	for i, c := range []struct{ text, verdict string }{
		{"Tapped at bbox [0.41, 0.62, 0.58, 0.66] | screen: no visible change — look at the view" + listing, "unchanged"},
		{"Tapped at bbox [0.41, 0.62, 0.58, 0.66] | screen: no visible change — look at the view" + listing, ""},
		{"Tapped at bbox [0.41, 0.62, 0.58, 0.66] — look at the view" + listing, ""},
	} {
		turn := i + 1
		em.Emit(events.ToolStart(turn, contract.ToolNote, "n", args(map[string]string{"summary": "tapping Wi-Fi"})))
		em.Emit(events.ToolResult(turn, contract.ToolNote, "n", "noted", false, 0, false))
		em.Emit(events.ToolStart(turn, contract.ToolTap, "t", args(map[string]any{"bbox": []float64{0.41, 0.62, 0.58, 0.66}})))
		em.Emit(events.ToolResult(turn, contract.ToolTap, "t", c.text, false, 1, false).WithVerdict(c.verdict))
	}
	got := render(t, buf.Bytes(), false)
	want := []string{
		`t1   note: tapping Wi-Fi  →  tap [0.41,0.62,0.58,0.66]  →  no visible change`,
		`t2   note: tapping Wi-Fi  →  tap [0.41,0.62,0.58,0.66]  →  no visible change`,
		`t3   note: tapping Wi-Fi  →  tap [0.41,0.62,0.58,0.66]  →  Tapped at bbox [0.41, 0.62, 0.58, 0.66] — look at the view`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rendered\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
