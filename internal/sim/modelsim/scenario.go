package modelsim

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Scenario is a scripted agent: one or more sessions, each a list of steps. The session is
// chosen by the trigger text (When), the step by how many turns the transcript already holds.
type Scenario struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Sessions    []Session `json:"sessions"`
}

// Session is one script. A session with When plays only when the trigger contains that text
// (case-insensitive); the first match wins, and a session without When is the default.
type Session struct {
	When  string `json:"when,omitempty"`
	Steps []Step `json:"steps"`
}

// Step is one turn of the script; exactly one of its actions is set. Each is sent with its note,
// in the [note, one-other] shape, unless Misbehave says otherwise.
type Step struct {
	Note string `json:"note,omitempty"` // the note's summary; a default says what the step does

	Peek       bool       `json:"peek,omitempty"`
	Screenshot bool       `json:"screenshot,omitempty"`
	Tap        string     `json:"tap,omitempty"`        // the label to tap, found in the newest listing
	DoubleTap  string     `json:"doubleTap,omitempty"`  // likewise
	LongPress  string     `json:"longPress,omitempty"`  // likewise
	Swipe      *SwipeStep `json:"swipe,omitempty"`      // a swipe at a label or a bbox
	Clipboard  string     `json:"clipboard,omitempty"`  // send_to_clipboard with this text
	Call       *Call      `json:"call,omitempty"`       // a literal tool call
	End        *End       `json:"end,omitempty"`        // end_session
	Expect     string     `json:"expect,omitempty"`     // look again until a label containing this is on screen
	Misbehave  string     `json:"misbehave,omitempty"`  // a wrong turn instead (see Misbehaviours)
	Fault      *Fault     `json:"fault,omitempty"`      // an HTTP-level failure before the step is served
	Occurrence int        `json:"occurrence,omitempty"` // which match of the label: 1 first (default), -1 last
}

// SwipeStep is a swipe at the element labelled Label (or at BBox).
type SwipeStep struct {
	Label     string    `json:"label,omitempty"`
	BBox      []float64 `json:"bbox,omitempty"`
	Direction string    `json:"direction"`
	Size      string    `json:"size,omitempty"`
	Speed     string    `json:"speed,omitempty"`
}

// Call is a literal tool call.
type Call struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

// End closes the session with a sentinel.
type End struct {
	Status string `json:"status"`
	Recap  string `json:"recap"`
}

// Fault is an HTTP-level failure served Times times (default 1) for the same request before
// the step itself: Status 429 (with RetryAfter seconds) or 500; SlowFirstByte delays the
// response; Stall stops a stream after its first chunks for that long and then breaks it.
type Fault struct {
	Status        int    `json:"status,omitempty"`
	RetryAfter    int    `json:"retryAfter,omitempty"`
	SlowFirstByte string `json:"slowFirstByte,omitempty"`
	Stall         string `json:"stall,omitempty"`
	Times         int    `json:"times,omitempty"`
}

// Misbehaviours are the wrong turns a step can send instead of its action.
var Misbehaviours = []string{
	"malformed_args", // the action's arguments are cut-off JSON
	"unknown_tool",   // the action is a tool that does not exist
	"no_note",        // the action alone
	"note_only",      // the note alone
	"two_actions",    // note plus the action twice
	"text_only",      // prose and no tool calls (finish_reason stop)
}

// isSentinel reports whether s is one of the statuses end_session takes, spelled as the contract spells it.
func isSentinel(s string) bool {
	return slices.Contains(contract.Sentinels, contract.Sentinel(s))
}

// Validate checks that each step does exactly one thing, and does it with sane arguments.
func (s *Scenario) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("scenario has no name")
	}
	if len(s.Sessions) == 0 {
		return fmt.Errorf("scenario %s: no sessions", s.Name)
	}
	for si, sess := range s.Sessions {
		if len(sess.Steps) == 0 {
			return fmt.Errorf("scenario %s: session %d has no steps", s.Name, si)
		}
		for i, st := range sess.Steps {
			if err := st.validate(); err != nil {
				return fmt.Errorf("scenario %s: session %d step %d: %w", s.Name, si, i, err)
			}
		}
	}
	return nil
}

func (st Step) validate() error {
	n := 0
	for _, set := range []bool{st.Peek, st.Screenshot, st.Tap != "", st.DoubleTap != "", st.LongPress != "", st.Swipe != nil, st.Clipboard != "", st.Call != nil, st.End != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("want exactly one of peek, screenshot, tap, doubleTap, longPress, swipe, clipboard, call, end; got %d", n)
	}
	if st.Misbehave != "" && !slices.Contains(Misbehaviours, st.Misbehave) {
		return fmt.Errorf("misbehave %q: want one of %s", st.Misbehave, strings.Join(Misbehaviours, ", "))
	}
	if st.End != nil && !isSentinel(st.End.Status) {
		return fmt.Errorf("end status %q: want one of DONE, FAIL, WAIT, IDLE, STUCK", st.End.Status)
	}
	if st.Swipe != nil && st.Swipe.Label == "" && len(st.Swipe.BBox) != 4 {
		return fmt.Errorf("swipe needs a label or a bbox of 4 numbers")
	}
	if st.Call != nil && st.Call.Name == "" {
		return fmt.Errorf("call needs a name")
	}
	if f := st.Fault; f != nil && f.Status == 0 && f.SlowFirstByte == "" && f.Stall == "" {
		return fmt.Errorf("fault needs a status, slowFirstByte or stall")
	}
	return nil
}

// session picks the session for a trigger.
func (s *Scenario) session(trigger string) *Session {
	t := strings.ToLower(trigger)
	var fallback *Session
	for i := range s.Sessions {
		sess := &s.Sessions[i]
		if sess.When == "" {
			if fallback == nil {
				fallback = sess
			}
			continue
		}
		if strings.Contains(t, strings.ToLower(sess.When)) {
			return sess
		}
	}
	return fallback
}

// ParseScenario reads one scenario from YAML or JSON, refusing unknown fields.
func ParseScenario(b []byte) (*Scenario, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("scenario is not YAML or JSON: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.DisallowUnknownFields()
	var s Scenario
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return &s, s.Validate()
}

// Library is a set of scenarios by name.
type Library map[string]*Scenario

//go:embed scenarios/*.yaml
var builtin embed.FS

// Builtin is the scenarios that ship inside modelsim.
func Builtin() (Library, error) {
	lib := Library{}
	return lib, lib.addFS(builtin, "scenarios")
}

// LoadDir adds every .yaml, .yml and .json file in dir; a file's scenario replaces a built-in of the same name.
func (l Library) LoadDir(dir string) error {
	return l.addFS(os.DirFS(dir), ".")
}

func (l Library) addFS(fsys fs.FS, dir string) error {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return fmt.Errorf("read scenarios: %w", err)
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		b, err := fs.ReadFile(fsys, filepath.ToSlash(filepath.Join(dir, e.Name())))
		if err != nil {
			return fmt.Errorf("read scenario %s: %w", e.Name(), err)
		}
		s, err := ParseScenario(b)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
		l[s.Name] = s
	}
	return nil
}

// Names lists the scenarios in order.
func (l Library) Names() []string {
	var out []string
	for n := range l {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
