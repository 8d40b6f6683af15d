package rigsim

import (
	"bytes"
	"image/jpeg"
	"regexp"
	"strings"
	"testing"
)

// The rig contract, tool call by tool call: what comes back, and what a bad call is told.
func TestContractTable(t *testing.T) {
	clock := []float64{0.104, 0.167, 0.177, 0.180} // the Clock label on the home screen
	empty := []float64{0.40, 0.50, 0.50, 0.55}     // nothing drawn there
	at := []float64{0.90, 0.62, 0.96, 0.66}        // on the AssistiveTouch button
	cases := []struct {
		name    string
		tool    string
		args    any
		isError bool
		text    string // a regexp the text parts must match
		images  int
		listing bool
	}{
		{"peek", "peek", nil, false, `^id \[kind\]`, 1, true},
		{"screenshot", "screenshot", map[string]any{}, false, `^id \[kind\]`, 1, true},
		{"tap something", "tap", map[string]any{"bbox": clock}, false, "^Tapped at bbox \\[0.104, 0.167, 0.177, 0.18\\]\nscreen: changed\nhint: ", 1, true},
		{"tap nothing", "tap", map[string]any{"bbox": empty}, false, "^Tapped at bbox .*\nscreen: no visible change\nhint: .*missed", 1, true},
		{"double tap", "double_tap", map[string]any{"bbox": empty}, false, "^Double tapped at bbox", 1, true},
		{"long press", "long_press", map[string]any{"bbox": empty}, false, "^Long pressed at bbox", 1, true},
		{"swipe defaults", "swipe", map[string]any{"bbox": empty, "direction": "left"}, false, "^Swiped left m at bbox .*\nscreen: no visible change", 1, true},
		{"home from home", "home_screen", nil, false, "^Went to home screen\nscreen: changed", 1, true},
		{"back at home", "go_back", nil, false, "^Went back\nscreen: no visible change", 1, true},
		{"force quit nothing", "force_quit", nil, false, "^No app in the foreground to quit", 1, true},
		{"unlock an unlocked phone", "unlock_phone", nil, false, "^Failed to find passcode keypad — phone may already be unlocked", 1, true},
		{"clipboard", "send_to_clipboard", map[string]any{"text": "hello"}, false, "^Copied \"hello\" to phone clipboard\nscreen: no visible change\nhint: next: `long_press`", 1, true},
		{"sequence", "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "send_to_clipboard", "arg": "x"},
			map[string]any{"tool_name": "tap", "arg": clock}}}, false, "^1 send_to_clipboard ok — Copied \"x\".*\n2 tap ok — Tapped at bbox .*\nscreen: changed", 1, true},
		{"sequence stops at the first failure", "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "tap", "arg": at},
			map[string]any{"tool_name": "tap", "arg": clock}}}, false, "^1 tap FAIL \\(tap target .* overlaps AssistiveTouch button — aim aside\\)\nscreen: no visible change", 1, true},

		{"bbox missing", "tap", map[string]any{}, true, "^Error executing tool tap: bbox is required", 0, false},
		{"bbox short", "tap", map[string]any{"bbox": []float64{0.1, 0.2, 0.3}}, true, `bbox must be \[left, top, right, bottom\] \(4 numbers\), got \[0.1,0.2,0.3\]`, 0, false},
		{"bbox not numbers", "tap", map[string]any{"bbox": []any{"a", 0.2, 0.3, 0.4}}, true, "bbox values must be numbers", 0, false},
		{"bbox out of range", "double_tap", map[string]any{"bbox": []float64{0.1, 0.2, 1.3, 0.4}}, true, `^Error executing tool double_tap: bbox values must be in \[0, 1\], got \[0.1, 0.2, 1.3, 0.4\]`, 0, false},
		{"bbox inverted", "long_press", map[string]any{"bbox": []float64{0.5, 0.2, 0.3, 0.4}}, true, "bbox must have left < right and top < bottom", 0, false},
		{"unexpected argument", "tap", map[string]any{"bbox": clock, "force": 2}, true, `unexpected argument "force": this tool takes bbox`, 0, false},
		{"argument to a bare tool", "peek", map[string]any{"zoom": 2}, true, `unexpected argument "zoom": this tool takes no arguments`, 0, false},
		{"swipe without direction", "swipe", map[string]any{"bbox": empty}, true, "direction is required: one of up, down, left, right", 0, false},
		{"swipe bad size", "swipe", map[string]any{"bbox": empty, "direction": "up", "size": "huge"}, true, `size must be one of s, m, l, xl, xxl, got "huge"`, 0, false},
		{"swipe bad speed", "swipe", map[string]any{"bbox": empty, "direction": "up", "speed": "warp"}, true, `speed must be one of slow, medium, fast, got "warp"`, 0, false},
		{"clipboard empty", "send_to_clipboard", map[string]any{"text": ""}, true, "text must be 1 to 10000 characters, got 0", 0, false},
		{"clipboard too long", "send_to_clipboard", map[string]any{"text": strings.Repeat("a", 10001)}, true, "text must be 1 to 10000 characters, got 10001", 0, false},
		{"clipboard object", "send_to_clipboard", map[string]any{"text": map[string]any{"text": "hi"}}, true, "text must be a string", 0, false},
		{"sequence of one", "sequence", map[string]any{"actions": []any{map[string]any{"tool_name": "tap", "arg": clock}}}, true, "actions must have 2 to 5 steps, got 1", 0, false},
		{"sequence of six", "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "tap", "arg": clock}, map[string]any{"tool_name": "tap", "arg": clock}, map[string]any{"tool_name": "tap", "arg": clock},
			map[string]any{"tool_name": "tap", "arg": clock}, map[string]any{"tool_name": "tap", "arg": clock}, map[string]any{"tool_name": "tap", "arg": clock}}}, true, "actions must have 2 to 5 steps, got 6", 0, false},
		{"sequence bad tool", "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "home_screen", "arg": nil}, map[string]any{"tool_name": "tap", "arg": clock}}}, true, `actions\[0\].tool_name must be one of tap, double_tap, long_press, swipe, send_to_clipboard, got "home_screen"`, 0, false},
		{"sequence bad arg", "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "tap", "arg": clock}, map[string]any{"tool_name": "swipe", "arg": map[string]any{"bbox": clock}}}}, true, `actions\[1\].arg \(swipe\): direction is required`, 0, false},
		{"tap on AssistiveTouch", "tap", map[string]any{"bbox": at}, true, `^Error executing tool tap: tap target \[0.9, 0.62, 0.96, 0.66\] overlaps AssistiveTouch button — aim aside`, 0, false},
		{"swipe across AssistiveTouch", "swipe", map[string]any{"bbox": []float64{0.90, 0.50, 0.96, 0.52}, "direction": "down", "size": "l"}, true, "swipe down at .* crosses AssistiveTouch button — aim aside", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := startRig(t, Config{})
			res := tr.call(t, c.tool, c.args)
			if res.isError != c.isError {
				t.Fatalf("isError = %v, want %v: %s", res.isError, c.isError, res.text())
			}
			if !regexp.MustCompile(c.text).MatchString(res.texts[0]) {
				t.Fatalf("text %q does not match %q", res.texts[0], c.text)
			}
			if res.images != c.images {
				t.Fatalf("%d images, want %d", res.images, c.images)
			}
			if c.listing {
				rows := res.listing(t)
				if len(rows) == 0 {
					t.Fatal("empty listing")
				}
				img, err := jpeg.Decode(bytes.NewReader(res.jpeg))
				if err != nil {
					t.Fatalf("the image is not a JPEG: %v", err)
				}
				if b := img.Bounds(); max(b.Dx(), b.Dy()) > maxLongEdge {
					t.Fatalf("image is %v, longest edge over 1566 px", b)
				}
			} else if strings.Contains(res.text(), ListingHeader) {
				t.Fatal("an error carries a listing")
			}
		})
	}
}

// peek returns [image, listing]; a gesture returns [text, image, listing].
func TestResultShapes(t *testing.T) {
	tr := startRig(t, Config{})
	peek := tr.call(t, "peek", nil)
	if len(peek.texts) != 1 || peek.images != 1 {
		t.Fatalf("peek = %d texts, %d images, want the image and the listing", len(peek.texts), peek.images)
	}
	tap := tr.call(t, "tap", bboxArg(find(t, peek.listing(t), "Clock")))
	if len(tap.texts) != 2 || tap.images != 1 || !strings.HasPrefix(tap.texts[1], ListingHeader) {
		t.Fatalf("tap = %q, %d images, want the action text, the image and the listing", tap.texts, tap.images)
	}
	if lines := strings.Split(tap.texts[0], "\n"); len(lines) != 3 || lines[1] != verdictChanged || !strings.HasPrefix(lines[2], "hint: ") {
		t.Fatalf("tap text = %q, want action line, verdict, hint", tap.texts[0])
	}
}
