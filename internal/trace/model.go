package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
)

// AttemptTrace is one attempt read back from its events and screens: what a
// run page shows.
type AttemptTrace struct {
	N     int
	Start *events.Event
	// SystemPrompt is the system prompt the model saw, with its hash.
	SystemPrompt *events.Event
	Turns        []*Turn
	// Lifecycle holds errors and compactions that belong to no turn.
	Lifecycle []events.Event
	Done      *events.Event
	// Screens are the attempt's screen files in turn order.
	Screens []Screen
	// Unreadable counts lines that were not events (kept out of the turns).
	Unreadable int
}

// Turn is one turn: what the model said and did, and what it saw.
type Turn struct {
	N        int
	TS       string
	Note     string
	Text     string
	Thinking string
	Calls    []*Call
	Errors   []events.Event
	// Seen is the screen the model had in front of it when it chose this
	// turn's calls: the newest screen of an earlier turn. Gestures are drawn on it.
	Seen *Screen
	// Plan is the plan as it stood at this turn (the newest update_progress).
	Plan string
	// Compaction is set when a compaction ran at this turn.
	Compaction string
}

// Call is a tool call and what it returned.
type Call struct {
	Tool    string
	CallID  string
	Args    json.RawMessage
	Result  string
	Done    bool
	IsError bool
	Blocked bool
	Images  int
	// BBox is the gesture's target, as fractions of the screen, when it has one.
	BBox      *[4]float64
	Direction string
	// Approval is the person's say when a ToolPolicy held the call.
	Approval *Approval
}

// Approval is a held call's request and answer, as the trace recorded them.
type Approval struct {
	ID, Policy, Rule, Message string
	Answered                  bool
	Approved                  bool
	By, Reason                string
	WaitedMs                  int64
}

// Summary says in one line who decided what, and after how long.
func (a *Approval) Summary() string {
	who := a.By
	if who == "" {
		who = "nobody"
	}
	switch {
	case !a.Answered:
		return fmt.Sprintf("waiting for approval (ToolPolicy %s, rule %s)", a.Policy, a.Rule)
	case a.Approved:
		return fmt.Sprintf("approved by %s after %s (ToolPolicy %s, rule %s)", who, time.Duration(a.WaitedMs)*time.Millisecond, a.Policy, a.Rule)
	}
	s := fmt.Sprintf("denied by %s after %s (ToolPolicy %s, rule %s)", who, time.Duration(a.WaitedMs)*time.Millisecond, a.Policy, a.Rule)
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}

// Verdict is the call's outcome in one word.
func (c *Call) Verdict() string {
	switch {
	case !c.Done:
		return "running"
	case c.Blocked:
		return "blocked"
	case c.IsError:
		return "error"
	}
	return "ok"
}

// ArgsText is the call's arguments as compact JSON.
func (c *Call) ArgsText() string {
	if len(c.Args) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, c.Args) != nil {
		return string(c.Args)
	}
	return b.String()
}

// Screen is one screen file of an attempt.
type Screen struct {
	File string
	Turn int
	Seq  int
}

var screenName = regexp.MustCompile(`^screen-t(\d{1,6})-(\d{1,9})\.(jpg|png|img)$`)

// ParseScreen reads a screen file's turn and sequence from its name
// (screen-t<turn>-<seq>.<ext>, as the loop's snapshot writer names them).
func ParseScreen(file string) (Screen, bool) {
	m := screenName.FindStringSubmatch(file)
	if m == nil {
		return Screen{}, false
	}
	t, _ := strconv.Atoi(m[1])
	s, _ := strconv.Atoi(m[2])
	return Screen{File: file, Turn: t, Seq: s}, true
}

// MaxLine bounds one event line; longer lines are counted as unreadable.
const MaxLine = 1 << 20

// lineReader yields the lines of a stream, each at most max bytes; a longer
// line is skipped whole and reported as such, so one oversize event costs
// that event and not the rest of the attempt.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64*1024), max: max}
}

// next returns the next line without its newline, or tooLong for a line
// over max; nil and false at the end of the stream.
func (l *lineReader) next() (line []byte, tooLong bool, err error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		if !tooLong {
			if len(l.buf)+len(frag) > l.max+1 { // +1: the newline
				tooLong, l.buf = true, l.buf[:0]
			} else {
				l.buf = append(l.buf, frag...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if tooLong {
				return nil, true, nil
			}
			if len(l.buf) == 0 {
				return nil, false, nil
			}
			return l.buf, false, nil
		case err != nil:
			return nil, false, err
		}
		if tooLong {
			return nil, true, nil
		}
		return bytes.TrimSuffix(l.buf, []byte("\n")), false, nil
	}
}

// ReadAttempt assembles an attempt from its event stream and screen files.
func ReadAttempt(n int, stream io.Reader, screenFiles []string) (*AttemptTrace, error) {
	a := &AttemptTrace{N: n}
	for _, f := range screenFiles {
		if s, ok := ParseScreen(f); ok {
			a.Screens = append(a.Screens, s)
		}
	}
	sort.Slice(a.Screens, func(i, j int) bool { return a.Screens[i].Seq < a.Screens[j].Seq })

	byTurn := map[int]*Turn{}
	calls := map[string]*Call{}
	plan := ""
	turn := func(ev *events.Event) *Turn {
		t := byTurn[ev.Turn]
		if t == nil {
			t = &Turn{N: ev.Turn, TS: ev.TS}
			byTurn[ev.Turn] = t
			a.Turns = append(a.Turns, t)
		}
		return t
	}
	lines := newLineReader(stream, MaxLine)
	for {
		raw, tooLong, err := lines.next()
		if err != nil {
			return a, fmt.Errorf("attempt %d: reading events: %w", n, err)
		}
		if raw == nil && !tooLong {
			break
		}
		if tooLong {
			a.Unreadable++
			continue
		}
		line := bytes.TrimSpace(raw)
		if len(line) == 0 {
			continue
		}
		var ev events.Event
		if line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			a.Unreadable++
			continue
		}
		switch ev.Type {
		case events.TypeSessionStart:
			if a.Start == nil {
				e := ev
				a.Start = &e
			}
		case events.TypeSystemPrompt:
			if a.SystemPrompt == nil {
				e := ev
				a.SystemPrompt = &e
			}
		case events.TypeTextDelta:
			turn(&ev).Text += ev.Text
		case events.TypeThinking:
			turn(&ev).Thinking += ev.Text
		case events.TypeToolStart:
			t := turn(&ev)
			if ev.Tool == contract.ToolNote {
				t.Note = noteSummary(ev.Args)
			}
			if ev.Tool == contract.ToolUpdateProgress {
				plan = string(ev.Args)
			}
			c := &Call{Tool: ev.Tool, CallID: ev.CallID, Args: ev.Args}
			c.BBox, c.Direction = gesture(ev.Args)
			t.Calls = append(t.Calls, c)
			if ev.CallID != "" {
				calls[ev.CallID] = c
			}
		case events.TypeToolResult:
			t := turn(&ev)
			c := calls[ev.CallID]
			if c == nil || ev.CallID == "" {
				c = &Call{Tool: ev.Tool, CallID: ev.CallID}
				t.Calls = append(t.Calls, c)
			}
			c.Result, c.Done, c.IsError, c.Blocked, c.Images = ev.Text, true, ev.IsError, ev.Blocked, ev.Images
		case events.TypeApprovalRequested, events.TypeApprovalAnswered:
			c := calls[ev.CallID]
			if c == nil {
				a.Unreadable++
				break
			}
			if c.Approval == nil {
				c.Approval = &Approval{ID: ev.ApprovalID, Policy: ev.Policy, Rule: ev.Rule}
			}
			if ev.Type == events.TypeApprovalRequested {
				c.Approval.Message = ev.Text
			} else {
				c.Approval.Answered, c.Approval.By, c.Approval.Reason, c.Approval.WaitedMs = true, ev.By, ev.Text, ev.WaitedMs
				c.Approval.Approved = ev.Approved != nil && *ev.Approved
			}
		case events.TypeError:
			if ev.Turn > 0 {
				t := turn(&ev)
				t.Errors = append(t.Errors, ev)
			} else {
				a.Lifecycle = append(a.Lifecycle, ev)
			}
		case events.TypeCompaction:
			if ev.Turn > 0 {
				turn(&ev).Compaction = ev.Text
			} else {
				a.Lifecycle = append(a.Lifecycle, ev)
			}
		case events.TypeDone:
			e := ev
			a.Done = &e
		default:
			a.Unreadable++
		}
		if ev.Turn > 0 {
			if t := byTurn[ev.Turn]; t != nil {
				t.Plan = plan
			}
		}
	}
	sort.SliceStable(a.Turns, func(i, j int) bool { return a.Turns[i].N < a.Turns[j].N })
	for _, t := range a.Turns {
		for i := len(a.Screens) - 1; i >= 0; i-- {
			if a.Screens[i].Turn < t.N {
				s := a.Screens[i]
				t.Seen = &s
				break
			}
		}
	}
	return a, nil
}

// ScreensOf are the screens turn n produced.
func (a *AttemptTrace) ScreensOf(n int) []Screen {
	var out []Screen
	for _, s := range a.Screens {
		if s.Turn == n {
			out = append(out, s)
		}
	}
	return out
}

func noteSummary(args json.RawMessage) string {
	var a struct {
		Summary string `json:"summary"`
	}
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	return a.Summary
}

// gesture reads a gesture's bbox (and a swipe's direction), checked as the
// rig checks it: four numbers in 0..1 with left < right and top < bottom.
// sequence calls draw their first step's target.
func gesture(args json.RawMessage) (*[4]float64, string) {
	var a struct {
		BBox      []float64 `json:"bbox"`
		Direction string    `json:"direction"`
		Actions   []struct {
			BBox      []float64 `json:"bbox"`
			Direction string    `json:"direction"`
		} `json:"actions"`
	}
	if json.Unmarshal(args, &a) != nil {
		return nil, ""
	}
	if len(a.BBox) == 0 && len(a.Actions) > 0 {
		a.BBox, a.Direction = a.Actions[0].BBox, a.Actions[0].Direction
	}
	if len(a.BBox) != 4 {
		return nil, ""
	}
	b := [4]float64{a.BBox[0], a.BBox[1], a.BBox[2], a.BBox[3]}
	for _, v := range b {
		if v < 0 || v > 1 {
			return nil, ""
		}
	}
	if b[0] >= b[2] || b[1] >= b[3] {
		return nil, ""
	}
	return &b, strings.ToLower(a.Direction)
}
