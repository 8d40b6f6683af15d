package claw

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
)

// Renderer turns the loop's event stream (internal/engine/events: one JSON
// object per line) into lines a person reads: one line per turn — its note,
// its tool call and what came back — and lifecycle events (session start,
// errors, compaction, done) on lines of their own. A line that is not an
// event it knows is passed on as it is: the stream may carry a panic trace,
// a log line of a library, or events of a newer loop, and a person reading
// the log must see them.
type Renderer struct {
	// Emit receives each finished line, without its newline.
	Emit func(line string)
	// Timestamps prefixes every event line with its time (HH:MM:SS, UTC).
	Timestamps bool
	// ShowPrompt prints the system prompt's text under its line; without it
	// the prompt is one line: its hash and size.
	ShowPrompt bool

	cur *turnLine // the turn being assembled, nil when none
}

// turnLine is one turn as it arrives: [note, one other call] and their results.
type turnLine struct {
	ts      string
	num     int
	note    string
	text    strings.Builder // the assistant's text, if any
	actions []string        // the non-note calls, each with its result when it came
	pending bool            // the last action's result has not come yet
}

// Line takes one line of the stream.
func (r *Renderer) Line(raw []byte) {
	raw = bytes.TrimRight(raw, "\r\n")
	ev, ok := parseEvent(raw)
	if !ok {
		r.Flush()
		r.Emit(string(raw))
		return
	}
	switch ev.Type {
	case events.TypeTextDelta:
		r.turn(ev).text.WriteString(ev.Text)
	case events.TypeThinking:
		// The model's reasoning is long and private to the turn; the note says
		// what the turn does. --raw shows it.
		r.turn(ev)
	case events.TypeToolStart:
		t := r.turn(ev)
		if ev.Tool == contract.ToolNote {
			t.note = noteOf(ev.Args)
			return
		}
		t.actions = append(t.actions, callString(ev.Tool, ev.Args))
		t.pending = true
	case events.TypeToolResult:
		t := r.turn(ev)
		if ev.Tool == contract.ToolNote {
			if ev.IsError || ev.Blocked {
				t.note += "  (" + resultString(ev) + ")"
			}
			return
		}
		res := resultString(ev)
		if len(t.actions) == 0 || !t.pending { // a result without its start: show the tool
			t.actions = append(t.actions, ev.Tool)
		}
		if res != "" {
			t.actions[len(t.actions)-1] += "  →  " + res
		}
		t.pending = false
		r.Flush() // the turn's call has come back: the turn is complete
	case events.TypeSystemPrompt:
		r.Flush()
		r.Emit(r.prefix(ev.TS) + systemPromptString(ev))
		if r.ShowPrompt {
			for line := range strings.SplitSeq(strings.TrimRight(ev.Text, "\n"), "\n") {
				r.Emit("    " + line)
			}
		}
	default:
		r.Flush()
		r.Emit(r.prefix(ev.TS) + lifecycleString(ev))
	}
}

// systemPromptString is the system prompt as one line: the first 12 hex
// digits of its SHA-256 (the same for every session that got the same
// prompt, so a changed prompt shows) and its size.
func systemPromptString(ev *events.Event) string {
	s := "§ system prompt"
	if h := ev.SHA256; h != "" {
		s += "  sha256 " + h[:min(12, len(h))]
	}
	s += fmt.Sprintf("  %s, %d lines", byteSize(len(ev.Text)), strings.Count(strings.TrimRight(ev.Text, "\n"), "\n")+1)
	return s
}

// byteSize writes a size short: 812 B, 4.2 KiB, 1.1 MiB.
func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

// Flush emits the turn being assembled, complete or not.
func (r *Renderer) Flush() {
	t := r.cur
	r.cur = nil
	if t == nil {
		return
	}
	parts := make([]string, 0, 2+len(t.actions))
	if t.note != "" {
		parts = append(parts, "note: "+t.note)
	}
	if s := strings.Join(strings.Fields(t.text.String()), " "); s != "" {
		parts = append(parts, "says: "+strconv.Quote(clip(s, 160)))
	}
	parts = append(parts, t.actions...)
	if t.pending {
		parts[len(parts)-1] += "  →  …"
	}
	if len(parts) == 0 {
		return // only thinking: nothing a person reads
	}
	r.Emit(r.prefix(t.ts) + fmt.Sprintf("t%-3d ", t.num) + strings.Join(parts, "  →  "))
}

// turn is the turn an assistant or tool event belongs to, starting a new one
// (and emitting the last) when the turn number moves on or the last one is
// complete.
func (r *Renderer) turn(ev *events.Event) *turnLine {
	if c := r.cur; c != nil && c.num == ev.Turn {
		return c
	}
	r.Flush()
	r.cur = &turnLine{ts: ev.TS, num: ev.Turn}
	return r.cur
}

func (r *Renderer) prefix(ts string) string {
	if !r.Timestamps {
		return ""
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return "         "
	}
	return t.UTC().Format("15:04:05") + " "
}

// parseEvent reads a line as an event of a type this renderer knows.
func parseEvent(raw []byte) (*events.Event, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var ev events.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, false
	}
	switch ev.Type {
	case events.TypeSessionStart, events.TypeSystemPrompt, events.TypeTextDelta, events.TypeThinking, events.TypeToolStart,
		events.TypeToolResult, events.TypeError, events.TypeCompaction, events.TypeDone,
		events.TypeApprovalRequested, events.TypeApprovalAnswered:
		return &ev, true
	}
	return nil, false
}

// lifecycleString renders session start, error, compaction and done.
func lifecycleString(ev *events.Event) string {
	switch ev.Type {
	case events.TypeSessionStart:
		s := "▶ session start"
		if ev.Run != "" {
			s += "  run " + ev.Run
		}
		if ev.Attempt > 0 {
			s += fmt.Sprintf("  attempt %d", ev.Attempt)
		}
		if ev.Provider != "" || ev.Model != "" {
			s += "  model " + strings.TrimPrefix(ev.Provider+"/"+ev.Model, "/")
		}
		if len(ev.Tools) > 0 {
			s += fmt.Sprintf("  %d tools", len(ev.Tools))
		}
		if ev.OTelTraceID != "" {
			// Whole, to paste into Jaeger, Tempo or Langfuse (docs/otel.md).
			s += "  otel trace " + ev.OTelTraceID
		}
		return s
	case events.TypeError:
		s := "! error"
		if ev.Turn > 0 {
			s += fmt.Sprintf(" at t%d", ev.Turn)
		}
		if ev.Class != "" {
			s += " [" + ev.Class + "]"
		}
		s += ": " + oneLine(ev.Text, 240)
		if ev.RetryInMs > 0 {
			s += fmt.Sprintf("  (retry in %s)", (time.Duration(ev.RetryInMs) * time.Millisecond).String())
		}
		return s
	case events.TypeApprovalRequested:
		s := fmt.Sprintf("? t%d %s waits for a person (ToolPolicy %s, rule %s)", ev.Turn, ev.Tool, ev.Policy, ev.Rule)
		if ev.Text != "" {
			s += ": " + oneLine(ev.Text, 160)
		}
		return s + "  (kubectl claw approve / deny)"
	case events.TypeApprovalAnswered:
		verdict, who := "denied", ev.By
		if ev.Approved != nil && *ev.Approved {
			verdict = "approved"
		}
		if who == "" {
			who = "nobody in time"
		}
		s := fmt.Sprintf("? t%d %s %s by %s after %s", ev.Turn, ev.Tool, verdict, who, (time.Duration(ev.WaitedMs) * time.Millisecond).String())
		if ev.Text != "" {
			s += ": " + oneLine(ev.Text, 160)
		}
		return s
	case events.TypeCompaction:
		s := "~ compaction"
		if ev.Turn > 0 {
			s += fmt.Sprintf(" at t%d", ev.Turn)
		}
		return s + ": " + oneLine(ev.Text, 240)
	case events.TypeDone:
		s := "■ " + string(ev.Sentinel)
		if s == "■ " {
			s = "■ done"
		}
		var facts []string
		if ev.ExitReason != "" {
			facts = append(facts, string(ev.ExitReason))
		}
		if ev.Sentinel == contract.Stuck && ev.Retryable != nil {
			if *ev.Retryable {
				facts = append(facts, "retryable")
			} else {
				facts = append(facts, "not retryable")
			}
		}
		if ev.Turns > 0 {
			facts = append(facts, fmt.Sprintf("%d turns", ev.Turns))
		}
		if u := ev.Usage; u != nil && u.PromptTokens+u.CompletionTokens > 0 {
			facts = append(facts, usage(u.PromptTokens, u.CompletionTokens, u.CachedTokens, ""))
		}
		if len(facts) > 0 {
			s += "  (" + strings.Join(facts, ", ") + ")"
		}
		if ev.Recap != "" {
			s += "  " + oneLine(ev.Recap, 400)
		}
		return s
	}
	return ev.Type
}

// noteOf is a note call's summary.
func noteOf(args json.RawMessage) string {
	var a struct {
		Summary string `json:"summary"`
	}
	if json.Unmarshal(args, &a) != nil || a.Summary == "" {
		return oneLine(string(args), 160)
	}
	return oneLine(a.Summary, 160)
}

// callString renders a tool call: `tap [0.41,0.62,0.58,0.66]`,
// `swipe [..] direction="up" size="m"`, `end_session DONE`.
func callString(tool string, args json.RawMessage) string {
	if tool == "" {
		tool = "?"
	}
	var m map[string]json.RawMessage
	if len(args) == 0 || json.Unmarshal(args, &m) != nil {
		if len(bytes.TrimSpace(args)) > 0 && string(args) != "null" {
			return tool + " " + clip(string(args), 80)
		}
		return tool
	}
	if tool == contract.ToolEndSession {
		var s string
		if json.Unmarshal(m["status"], &s) == nil && s != "" {
			return tool + " " + s
		}
	}
	parts := []string{tool}
	if b, ok := m["bbox"]; ok {
		parts = append(parts, compactJSON(b))
		delete(m, "bbox")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		var s string
		if json.Unmarshal(v, &s) == nil {
			parts = append(parts, k+"="+strconv.Quote(clip(oneLine(s, 60), 60)))
			continue
		}
		parts = append(parts, k+"="+clip(compactJSON(v), 60))
	}
	return strings.Join(parts, " ")
}

// echoes are the first lines a rig answers a gesture with that only repeat
// the call (docs/rig-contract.md, "What comes back"); the verdict says more.
var echoes = []string{"Tapped at bbox", "Double tapped at bbox", "Long pressed at bbox", "Swiped ", "Copied "}

// resultString summarises what a call returned: the verdict of a gesture
// (`screen changed`, `no visible change`), the element count of a look,
// an error or a refusal, else its first line.
func resultString(ev *events.Event) string {
	first, _, _ := strings.Cut(strings.TrimSpace(ev.Text), "\n")
	first = oneLine(first, 140)
	switch {
	case ev.Blocked:
		return "blocked: " + first
	case ev.IsError:
		return "error: " + first
	case ev.Tool == contract.ToolEndSession:
		return "" // the done line that follows says it
	}
	// The verdict is the event's, else (a trace of an older loop) read from
	// the text before the listing; the listing is the phone's own text.
	v := wire.Verdict(ev.Verdict)
	if v == wire.None {
		v = wire.VerdictOf(wire.First(ev.Text))
	}
	verdict := map[wire.Verdict]string{wire.Changed: "screen changed", wire.Unchanged: "no visible change"}[v]
	if i := strings.Index(first, " | "); i >= 0 && verdict != "" {
		first = first[:i] // PhysiClaw's one line: the action, then the verdict and the hint
	}
	elements := 0
	for line := range strings.SplitSeq(ev.Text, "\n") {
		if isListingRow(line) {
			elements++
		}
	}
	if verdict != "" {
		for _, e := range echoes {
			if strings.HasPrefix(first, e) {
				return verdict
			}
		}
		return strconv.Quote(first) + ", " + verdict
	}
	if strings.HasPrefix(first, "id [kind]") { // a look: the listing of the screen
		return fmt.Sprintf("%d elements on screen", elements)
	}
	if first == "" && ev.Images > 0 {
		return "image"
	}
	return first
}

// isListingRow reports whether a line is a row of the rig's element listing:
// `12 [text] "Timers" [0.816,0.930,0.904,0.943] 0.91`.
func isListingRow(line string) bool {
	id, rest, ok := strings.Cut(line, " [")
	if !ok || id == "" {
		return false
	}
	if _, err := strconv.Atoi(id); err != nil {
		return false
	}
	return strings.Contains(rest, "]")
}

func compactJSON(b json.RawMessage) string {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return string(b)
	}
	return out.String()
}

// oneLine folds whitespace and newlines and cuts s to n runes.
func oneLine(s string, n int) string {
	return clip(strings.Join(strings.Fields(s), " "), n)
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// tokens writes a token count short: 812, 24.7k, 1.2M.
// usage says what a session or a run used: its tokens, the share of the
// input the prompt cache served, and the cost when there is one.
func usage(prompt, completion, cached int64, cost string) string {
	s := tokens(prompt+completion) + " tokens"
	if prompt > 0 && cached > 0 {
		s += fmt.Sprintf(" (%d%% of the input cached)", cached*100/prompt)
	}
	if cost != "" {
		s += ", $" + cost
	}
	return s
}

func tokens(n int64) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}
