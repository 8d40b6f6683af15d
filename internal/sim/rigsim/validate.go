package rigsim

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// Argument limits from docs/rig-contract.md, "The twelve tools, in wire order".
const (
	maxClipboardChars = 10000
	minSequenceSteps  = 2
	maxSequenceSteps  = 5
)

var (
	swipeDirections = []string{"up", "down", "left", "right"}
	swipeSpeeds     = []string{"slow", "medium", "fast"}
	// swipeSizes are the stroke lengths as fractions of the screen.
	swipeSizes     = map[string]float64{"s": 0.10, "m": 0.30, "l": 0.50, "xl": 0.75, "xxl": 0.90}
	swipeSizeOrder = []string{"s", "m", "l", "xl", "xxl"}
	sequenceTools  = []string{contract.ToolTap, contract.ToolDoubleTap, contract.ToolLongPress, contract.ToolSwipe, contract.ToolSendToClipboard}
)

// args are a tool call's arguments. A name the tool does not take is
// ignored, as PhysiClaw's server ignores it.
type args map[string]json.RawMessage

func parseArgs(raw json.RawMessage) (args, error) {
	a := args{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("arguments must be a JSON object, got %s", clipRaw(raw))
		}
	}
	return a, nil
}

// unquoteJSON is what a JSON string holds when that is itself JSON (a bbox
// or a list of actions sent as a string, which PhysiClaw's server parses
// before it checks the argument); anything else is returned as it is.
func unquoteJSON(raw json.RawMessage) json.RawMessage {
	var s string
	if json.Unmarshal(raw, &s) != nil || !json.Valid([]byte(s)) {
		return raw
	}
	return json.RawMessage(s)
}

// bbox is [left, top, right, bottom] in screen fractions.
type bbox [4]float64

func (b bbox) center() (float64, float64) { return (b[0] + b[2]) / 2, (b[1] + b[3]) / 2 }

// String prints the bbox the way PhysiClaw echoes it in action lines: a
// list of floats as Python writes them, whole numbers with ".0".
func (b bbox) String() string {
	return fmt.Sprintf("[%s, %s, %s, %s]", fnum(b[0]), fnum(b[1]), fnum(b[2]), fnum(b[3]))
}

func fnum(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// parseBBox reads a bbox. A lenient one (a tool's own argument) may come as
// a JSON string holding the list, and its values as numeric strings or
// booleans (1, 0), as PhysiClaw's argument parsing coerces them; a strict
// one (a sequence step's arg) must be a list of numbers.
func parseBBox(raw json.RawMessage, lenient bool) (bbox, error) {
	if len(raw) == 0 {
		return bbox{}, fmt.Errorf("bbox is required: give [left, top, right, bottom] as 0-1 fractions of the screen")
	}
	if lenient {
		raw = unquoteJSON(raw)
	}
	var vals []json.RawMessage
	if err := json.Unmarshal(raw, &vals); err != nil || len(vals) != 4 {
		return bbox{}, fmt.Errorf("bbox must be [left, top, right, bottom] (4 numbers), got %s", clipRaw(raw))
	}
	var b bbox
	for i, v := range vals {
		f, ok := number(v, lenient)
		if !ok {
			return bbox{}, fmt.Errorf("bbox values must be numbers, got %s", clipRaw(raw))
		}
		b[i] = f
	}
	for _, v := range b {
		if v < 0 || v > 1 {
			return bbox{}, fmt.Errorf("bbox values must be in [0, 1], got %s", b)
		}
	}
	if b[0] >= b[2] || b[1] >= b[3] {
		return bbox{}, fmt.Errorf("bbox must have left < right and top < bottom, got %s", b)
	}
	return b, nil
}

// number reads one finite number; leniently also a numeric string or a boolean.
func number(raw json.RawMessage, lenient bool) (float64, bool) {
	var f float64
	if err := json.Unmarshal(raw, &f); err == nil {
		return f, true
	}
	if !lenient {
		return 0, false
	}
	var s string
	var t bool
	switch {
	case json.Unmarshal(raw, &s) == nil:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
	case json.Unmarshal(raw, &t) == nil:
		if t {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func parseEnum(a args, name string, allowed []string, def string) (string, error) {
	raw, ok := a[name]
	if !ok {
		if def == "" {
			return "", fmt.Errorf("%s is required: one of %s", name, strings.Join(allowed, ", "))
		}
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || !slices.Contains(allowed, s) {
		return "", fmt.Errorf("%s must be one of %s, got %s", name, strings.Join(allowed, ", "), clipRaw(raw))
	}
	return s, nil
}

// swipeArgs are a swipe's checked arguments.
type swipeArgs struct {
	box       bbox
	direction string
	size      string
	speed     string
}

func parseSwipe(a args, lenient bool) (swipeArgs, error) {
	var s swipeArgs
	var err error
	if s.box, err = parseBBox(a["bbox"], lenient); err != nil {
		return s, err
	}
	if s.direction, err = parseEnum(a, "direction", swipeDirections, ""); err != nil {
		return s, err
	}
	if s.size, err = parseEnum(a, "size", swipeSizeOrder, "m"); err != nil {
		return s, err
	}
	if s.speed, err = parseEnum(a, "speed", swipeSpeeds, "medium"); err != nil {
		return s, err
	}
	return s, nil
}

func parseClipboardText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", fmt.Errorf("text is required: the plain text to put on the phone's clipboard")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("text must be a string (pass the text directly, not a JSON object), got %s", clipRaw(raw))
	}
	if n := len([]rune(s)); n < 1 || n > maxClipboardChars {
		return "", fmt.Errorf("text must be 1 to %d characters, got %d", maxClipboardChars, n)
	}
	return s, nil
}

// parseActions checks a sequence's argument as PhysiClaw's schema does: a
// list of 2 to 5 objects (or a JSON string holding one). The steps inside
// are checked only as the sequence runs (parseStep).
func parseActions(a args) ([]map[string]json.RawMessage, error) {
	raw, ok := a["actions"]
	if !ok {
		return nil, fmt.Errorf("actions is required: a list of %d to %d steps {tool_name, arg}", minSequenceSteps, maxSequenceSteps)
	}
	raw = unquoteJSON(raw)
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, fmt.Errorf("actions must be a list of steps {tool_name, arg}, got %s", clipRaw(raw))
	}
	if len(items) < minSequenceSteps || len(items) > maxSequenceSteps {
		return nil, fmt.Errorf("actions must have %d to %d steps, got %d", minSequenceSteps, maxSequenceSteps, len(items))
	}
	out := make([]map[string]json.RawMessage, 0, len(items))
	for i, it := range items {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(it, &m); err != nil || m == nil {
			return nil, fmt.Errorf("actions[%d] must be an object {tool_name, arg}, got %s", i, clipRaw(it))
		}
		out = append(out, m)
	}
	return out, nil
}

// unnamedStep is how a sequence's line names a step whose tool_name is
// missing or not a string.
const unnamedStep = "?"

// step is one step of a sequence: its tool and checked argument, or why it
// cannot run.
type step struct {
	tool  string
	box   bbox
	swipe swipeArgs
	text  string
	err   error
}

// parseStep reads one step {tool_name, arg}. Fields besides the two are
// ignored.
func parseStep(it map[string]json.RawMessage) step {
	s := step{tool: unnamedStep}
	raw, ok := it["tool_name"]
	if !ok {
		s.err = fmt.Errorf("tool_name is required: one of %s", strings.Join(sequenceTools, ", "))
		return s
	}
	if err := json.Unmarshal(raw, &s.tool); err != nil {
		s.tool = unnamedStep
		s.err = fmt.Errorf("tool_name must be one of %s, got %s", strings.Join(sequenceTools, ", "), clipRaw(raw))
		return s
	}
	if !slices.Contains(sequenceTools, s.tool) {
		s.err = fmt.Errorf("%q cannot be a step: a sequence runs only %s", s.tool, strings.Join(sequenceTools, ", "))
		return s
	}
	arg := it["arg"]
	switch s.tool {
	case contract.ToolTap, contract.ToolDoubleTap, contract.ToolLongPress:
		if isObject(arg) {
			s.err = fmt.Errorf("a %s step's arg is the bbox itself, [left, top, right, bottom], got %s", s.tool, clipRaw(arg))
			return s
		}
		s.box, s.err = parseBBox(arg, false)
	case contract.ToolSwipe:
		var sa args
		if !isObject(arg) || json.Unmarshal(arg, &sa) != nil {
			s.err = fmt.Errorf("a swipe step's arg is an object {bbox, direction, size?, speed?}, got %s", clipRaw(arg))
			return s
		}
		s.swipe, s.err = parseSwipe(sa, false)
	case contract.ToolSendToClipboard:
		s.text, s.err = parseClipboardText(arg)
	}
	return s
}

func isObject(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return strings.HasPrefix(t, "{")
}

func clipRaw(raw json.RawMessage) string {
	s := string(raw)
	if s == "" {
		return "nothing"
	}
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// assistiveTouchMargin widens the refusal zone around the AssistiveTouch button.
const assistiveTouchMargin = 0.01

// overlapsAssistiveTouch says whether a point falls in the rig's AssistiveTouch zone.
func (r *Rig) overlapsAssistiveTouch(x, y float64) bool {
	z := r.at
	return (phone.Box{L: z.L - assistiveTouchMargin, T: z.T - assistiveTouchMargin, R: z.R + assistiveTouchMargin, B: z.B + assistiveTouchMargin}).Contains(x, y)
}

// swipeCrossesAssistiveTouch samples the stroke from the bbox centre.
func (r *Rig) swipeCrossesAssistiveTouch(s swipeArgs) bool {
	x, y := s.box.center()
	dx, dy := strokeVector(s.direction, swipeSizes[s.size])
	const samples = 20
	for i := 0; i <= samples; i++ {
		f := float64(i) / samples
		if r.overlapsAssistiveTouch(x+dx*f, y+dy*f) {
			return true
		}
	}
	return false
}

func strokeVector(direction string, length float64) (dx, dy float64) {
	switch direction {
	case "up":
		return 0, -length
	case "down":
		return 0, length
	case "left":
		return -length, 0
	}
	return length, 0
}
