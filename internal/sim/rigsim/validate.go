package rigsim

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
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

// args are a tool call's arguments, checked for names the tool does not take.
type args map[string]json.RawMessage

func parseArgs(raw json.RawMessage, allowed ...string) (args, error) {
	a := args{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("arguments must be a JSON object, got %s", clipRaw(raw))
		}
	}
	for k := range a {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, fmt.Errorf("unexpected argument %q: this tool takes no arguments", k)
			}
			return nil, fmt.Errorf("unexpected argument %q: this tool takes %s", k, strings.Join(allowed, ", "))
		}
	}
	return a, nil
}

// bbox is [left, top, right, bottom] in screen fractions.
type bbox [4]float64

func (b bbox) center() (float64, float64) { return (b[0] + b[2]) / 2, (b[1] + b[3]) / 2 }

// String prints the bbox the way the rig echoes it in action lines.
func (b bbox) String() string {
	return fmt.Sprintf("[%s, %s, %s, %s]", fnum(b[0]), fnum(b[1]), fnum(b[2]), fnum(b[3]))
}

func fnum(v float64) string { return fmt.Sprintf("%g", v) }

func parseBBox(raw json.RawMessage) (bbox, error) {
	if len(raw) == 0 {
		return bbox{}, fmt.Errorf("bbox is required: give [left, top, right, bottom] as 0-1 fractions of the screen")
	}
	var vals []any
	if err := json.Unmarshal(raw, &vals); err != nil || len(vals) != 4 {
		return bbox{}, fmt.Errorf("bbox must be [left, top, right, bottom] (4 numbers), got %s", clipRaw(raw))
	}
	var b bbox
	for i, v := range vals {
		f, ok := v.(float64)
		if !ok || math.IsNaN(f) {
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

func parseSwipe(a args) (swipeArgs, error) {
	var s swipeArgs
	var err error
	if s.box, err = parseBBox(a["bbox"]); err != nil {
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

// step is one checked step of a sequence.
type step struct {
	tool  string
	box   bbox
	swipe swipeArgs
	text  string
}

func parseSequence(a args) ([]step, error) {
	raw, ok := a["actions"]
	if !ok {
		return nil, fmt.Errorf("actions is required: a list of %d to %d steps {tool_name, arg}", minSequenceSteps, maxSequenceSteps)
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("actions must be a list of steps {tool_name, arg}, got %s", clipRaw(raw))
	}
	if len(items) < minSequenceSteps || len(items) > maxSequenceSteps {
		return nil, fmt.Errorf("actions must have %d to %d steps, got %d", minSequenceSteps, maxSequenceSteps, len(items))
	}
	steps := make([]step, 0, len(items))
	for i, it := range items {
		var s step
		if err := json.Unmarshal(it["tool_name"], &s.tool); err != nil || !slices.Contains(sequenceTools, s.tool) {
			return nil, fmt.Errorf("actions[%d].tool_name must be one of %s, got %s", i, strings.Join(sequenceTools, ", "), clipRaw(it["tool_name"]))
		}
		for k := range it {
			if k != "tool_name" && k != "arg" {
				return nil, fmt.Errorf("actions[%d]: unexpected field %q: a step is {tool_name, arg}", i, k)
			}
		}
		arg := it["arg"]
		var err error
		switch s.tool {
		case contract.ToolTap, contract.ToolDoubleTap, contract.ToolLongPress:
			s.box, err = parseBBox(arg)
		case contract.ToolSwipe:
			var sa args
			if sa, err = parseArgs(arg, "bbox", "direction", "size", "speed"); err == nil {
				s.swipe, err = parseSwipe(sa)
			}
		case contract.ToolSendToClipboard:
			s.text, err = parseClipboardText(arg)
		}
		if err != nil {
			return nil, fmt.Errorf("actions[%d].arg (%s): %w", i, s.tool, err)
		}
		steps = append(steps, s)
	}
	return steps, nil
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

// assistiveTouch is where the floating AssistiveTouch button sits; gestures may not land on it.
var assistiveTouch = phone.Box{L: 0.88, T: 0.62, R: 0.98, B: 0.666}

// assistiveTouchMargin widens the refusal zone around the button.
const assistiveTouchMargin = 0.01

func overlapsAssistiveTouch(x, y float64) bool {
	z := assistiveTouch
	return (phone.Box{L: z.L - assistiveTouchMargin, T: z.T - assistiveTouchMargin, R: z.R + assistiveTouchMargin, B: z.B + assistiveTouchMargin}).Contains(x, y)
}

// swipeCrossesAssistiveTouch samples the stroke from the bbox centre.
func swipeCrossesAssistiveTouch(s swipeArgs) bool {
	x, y := s.box.center()
	dx, dy := strokeVector(s.direction, swipeSizes[s.size])
	const samples = 20
	for i := 0; i <= samples; i++ {
		f := float64(i) / samples
		if overlapsAssistiveTouch(x+dx*f, y+dy*f) {
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
