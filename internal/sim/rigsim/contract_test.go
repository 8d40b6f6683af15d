package rigsim

import (
	"bytes"
	"image/jpeg"
	"regexp"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// hintRE is a tool's hint as a regexp, anchored at the end of the text.
func hintRE(tool string) string { return regexp.QuoteMeta(" "+hints[tool]) + "$" }

// The rig contract, tool call by tool call: what comes back, and what a bad call is told.
func TestContractTable(t *testing.T) {
	clock := []float64{0.104, 0.167, 0.177, 0.180} // the Clock label on the home screen
	empty := []float64{0.40, 0.50, 0.50, 0.55}     // nothing drawn there
	at := []float64{0.90, 0.62, 0.96, 0.66}        // on the AssistiveTouch button
	step := func(tool string, arg any) map[string]any { return map[string]any{"tool_name": tool, "arg": arg} }
	const clockEcho = `\[0\.104, 0\.167, 0\.177, 0\.18\]`
	const unchanged, changed = ` \| screen: no visible change`, ` \| screen: changed`
	cases := []struct {
		name    string
		tool    string
		args    any
		isError bool
		text    string // a regexp the first text part must match
		images  int
		listing bool
	}{
		{"peek", "peek", nil, false, `^id \[kind\]`, 1, true},
		{"screenshot", "screenshot", map[string]any{}, false, `^id \[kind\]`, 1, true},
		{"tap something", "tap", map[string]any{"bbox": clock}, false, "^Tapped at bbox " + clockEcho + changed + hintRE("tap"), 1, true},
		{"tap nothing", "tap", map[string]any{"bbox": empty}, false, `^Tapped at bbox \[0\.4, 0\.5, 0\.5, 0\.55\]` + unchanged + hintRE("tap"), 1, true},
		{"whole numbers echo as floats", "tap", map[string]any{"bbox": []int{0, 0, 1, 1}}, false, `^Tapped at bbox \[0\.0, 0\.0, 1\.0, 1\.0\] \| screen: `, 1, true},
		{"double tap", "double_tap", map[string]any{"bbox": empty}, false, `^Double tapped at bbox \[0\.4, 0\.5, 0\.5, 0\.55\]` + unchanged + hintRE("double_tap"), 1, true},
		{"long press", "long_press", map[string]any{"bbox": empty}, false, "^Long pressed at bbox .*" + unchanged + hintRE("long_press"), 1, true},
		{"swipe defaults", "swipe", map[string]any{"bbox": empty, "direction": "left"}, false, "^Swiped left m at bbox .*" + unchanged + hintRE("swipe"), 1, true},
		{"home from home", "home_screen", nil, false, "^Went to home screen" + changed + hintRE("home_screen"), 1, true},
		{"back at home", "go_back", nil, false, "^Went back" + unchanged + hintRE("go_back"), 1, true},
		{"force quit nothing", "force_quit", nil, false, "^Force-quit current app" + unchanged + hintRE("force_quit"), 1, true},
		{"unlock an unlocked phone", "unlock_phone", nil, false, "^Failed to find passcode keypad" + unchanged + hintRE("unlock_phone"), 1, true},
		{"clipboard", "send_to_clipboard", map[string]any{"text": "hello"}, false, "^Copied 5 chars to phone clipboard" + hintRE("send_to_clipboard"), 0, false},
		{"clipboard counts characters, not bytes", "send_to_clipboard", map[string]any{"text": "¥39 ok"}, false, "^Copied 6 chars to phone clipboard — ", 0, false},
		{"sequence", "sequence", map[string]any{"actions": []any{step("send_to_clipboard", "x"), step("tap", clock)}}, false,
			"^1 send_to_clipboard ok — Copied 1 chars to phone clipboard\n2 tap ok — Tapped at bbox " + clockEcho + changed + hintRE("sequence"), 1, true},
		{"sequence hint on its own line", "sequence", map[string]any{"actions": []any{step("tap", empty), step("tap", empty)}}, false,
			`\| screen: no visible change \n— `, 1, true},
		{"sequence stops at the first failure", "sequence", map[string]any{"actions": []any{step("tap", at), step("tap", clock)}}, false,
			`^1 tap FAIL \(tap target \[0\.9, 0\.62, 0\.96, 0\.66\] overlaps AssistiveTouch button — aim aside\)` + unchanged + hintRE("sequence"), 1, true},

		// Lenient arguments, as PhysiClaw's server parses them.
		{"extra argument ignored", "tap", map[string]any{"bbox": clock, "force": 2}, false, "^Tapped at bbox " + clockEcho + changed, 1, true},
		{"argument to a bare tool ignored", "peek", map[string]any{"zoom": 2}, false, `^id \[kind\]`, 1, true},
		{"bbox as a JSON string", "tap", map[string]any{"bbox": "[0.104,0.167,0.177,0.18]"}, false, "^Tapped at bbox " + clockEcho + changed, 1, true},
		{"bbox values as strings", "tap", map[string]any{"bbox": []string{"0.104", "0.167", "0.177", "0.18"}}, false, "^Tapped at bbox " + clockEcho + changed, 1, true},
		{"bbox values as booleans", "tap", map[string]any{"bbox": []any{false, false, true, true}}, false, `^Tapped at bbox \[0\.0, 0\.0, 1\.0, 1\.0\]`, 1, true},
		{"swipe bbox as a JSON string", "swipe", map[string]any{"bbox": "[0.4, 0.5, 0.5, 0.55]", "direction": "left", "extra": true}, false, `^Swiped left m at bbox \[0\.4, 0\.5, 0\.5, 0\.55\]`, 1, true},
		{"actions as a JSON string", "sequence", map[string]any{"actions": `[{"tool_name":"tap","arg":[0.4,0.5,0.5,0.55]},{"tool_name":"tap","arg":[0.104,0.167,0.177,0.18]}]`}, false,
			"^1 tap ok — .*\n2 tap ok — Tapped at bbox " + clockEcho + changed, 1, true},

		// A bad step is a FAIL line of a normal result; the steps before it ran.
		{"sequence step not allowed", "sequence", map[string]any{"actions": []any{step("home_screen", nil), step("tap", clock)}}, false,
			`^1 home_screen FAIL \("home_screen" cannot be a step: a sequence runs only tap, double_tap, long_press, swipe, send_to_clipboard\)` + unchanged + hintRE("sequence"), 1, true},
		{"sequence step without tool_name", "sequence", map[string]any{"actions": []any{map[string]any{"arg": clock}, step("tap", clock)}}, false,
			`^1 \? FAIL \(tool_name is required: one of tap, .*\)` + unchanged, 1, true},
		{"sequence step with a bad arg", "sequence", map[string]any{"actions": []any{step("tap", clock), step("swipe", map[string]any{"bbox": clock})}}, false,
			"^1 tap ok — Tapped at bbox " + clockEcho + `\n2 swipe FAIL \(direction is required: one of up, down, left, right\)` + changed + hintRE("sequence"), 1, true},
		{"sequence tap arg as an object", "sequence", map[string]any{"actions": []any{step("tap", map[string]any{"bbox": clock}), step("tap", clock)}}, false,
			`^1 tap FAIL \(a tap step's arg is the bbox itself, \[left, top, right, bottom\], got \{"bbox":`, 1, true},
		{"sequence swipe arg as a list", "sequence", map[string]any{"actions": []any{step("swipe", clock), step("tap", clock)}}, false,
			`^1 swipe FAIL \(a swipe step's arg is an object \{bbox, direction, size\?, speed\?\}, got \[`, 1, true},
		{"sequence clipboard arg as an object", "sequence", map[string]any{"actions": []any{step("send_to_clipboard", map[string]any{"text": "x"}), step("tap", clock)}}, false,
			`^1 send_to_clipboard FAIL \(text must be a string`, 1, true},

		{"bbox missing", "tap", map[string]any{}, true, "^Error executing tool tap: bbox is required", 0, false},
		{"bbox short", "tap", map[string]any{"bbox": []float64{0.1, 0.2, 0.3}}, true, `bbox must be \[left, top, right, bottom\] \(4 numbers\), got \[0.1,0.2,0.3\]`, 0, false},
		{"bbox not JSON", "tap", map[string]any{"bbox": "not json"}, true, `bbox must be \[left, top, right, bottom\] \(4 numbers\), got "not json"`, 0, false},
		{"bbox not numbers", "tap", map[string]any{"bbox": []any{"a", 0.2, 0.3, 0.4}}, true, "bbox values must be numbers", 0, false},
		{"bbox out of range", "double_tap", map[string]any{"bbox": []float64{0.1, 0.2, 1.3, 0.4}}, true, `^Error executing tool double_tap: bbox values must be in \[0, 1\], got \[0.1, 0.2, 1.3, 0.4\]`, 0, false},
		{"bbox inverted", "long_press", map[string]any{"bbox": []float64{0.5, 0.2, 0.3, 0.4}}, true, "bbox must have left < right and top < bottom", 0, false},
		{"swipe without direction", "swipe", map[string]any{"bbox": empty}, true, "direction is required: one of up, down, left, right", 0, false},
		{"swipe bad size", "swipe", map[string]any{"bbox": empty, "direction": "up", "size": "huge"}, true, `size must be one of s, m, l, xl, xxl, got "huge"`, 0, false},
		{"swipe bad speed", "swipe", map[string]any{"bbox": empty, "direction": "up", "speed": "warp"}, true, `speed must be one of slow, medium, fast, got "warp"`, 0, false},
		{"clipboard empty", "send_to_clipboard", map[string]any{"text": ""}, true, "text must be 1 to 10000 characters, got 0", 0, false},
		{"clipboard too long", "send_to_clipboard", map[string]any{"text": strings.Repeat("a", 10001)}, true, "text must be 1 to 10000 characters, got 10001", 0, false},
		{"clipboard object", "send_to_clipboard", map[string]any{"text": map[string]any{"text": "hi"}}, true, "text must be a string", 0, false},
		{"sequence of one", "sequence", map[string]any{"actions": []any{step("tap", clock)}}, true, "^Error executing tool sequence: actions must have 2 to 5 steps, got 1", 0, false},
		{"sequence of six", "sequence", map[string]any{"actions": []any{step("tap", clock), step("tap", clock), step("tap", clock),
			step("tap", clock), step("tap", clock), step("tap", clock)}}, true, "actions must have 2 to 5 steps, got 6", 0, false},
		{"sequence of non-objects", "sequence", map[string]any{"actions": []any{1, 2}}, true, `^Error executing tool sequence: actions\[0\] must be an object \{tool_name, arg\}, got 1`, 0, false},
		{"tap on AssistiveTouch", "tap", map[string]any{"bbox": at}, true, `^Error executing tool tap: tap target \[0.9, 0.62, 0.96, 0.66\] overlaps AssistiveTouch button — aim aside$`, 0, false},
		{"swipe across AssistiveTouch", "swipe", map[string]any{"bbox": []float64{0.90, 0.50, 0.96, 0.52}, "direction": "down", "size": "l"}, true, "^Error executing tool swipe: swipe down at .* crosses AssistiveTouch button — aim aside$", 0, false},
		{"unknown tool", "fly", map[string]any{}, true, "^Unknown tool: fly$", 0, false},
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
				t.Fatal("a result without a view carries a listing")
			}
		})
	}
}

// peek returns [image, listing]; a gesture returns [text, image, listing], its
// text one line: the action, the verdict after " | ", the hint after " — ".
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
	want := "Tapped at bbox [0.104, 0.167, 0.177, 0.18] | " + verdictChanged + " " + hints[contract.ToolTap]
	if tap.texts[0] != want {
		t.Fatalf("tap text = %q\nwant %q", tap.texts[0], want)
	}
	for tool, h := range hints {
		if !strings.HasPrefix(strings.TrimPrefix(h, "\n"), "— ") {
			t.Errorf("the %s hint %q does not start with an em dash", tool, h)
		}
	}
}

// The verdict is in the first text part only: a label on the phone that
// reads like a verdict stays in the listing and says nothing about the
// gesture.
func TestVerdictIsNotReadFromTheListing(t *testing.T) {
	const look = verdictUnchanged
	tr := startRig(t, Config{})
	tr.tapLabel(t, "Messages")
	tr.tapLabel(t, "Ana")
	tr.call(t, "send_to_clipboard", map[string]any{"text": look})
	tr.call(t, "long_press", bboxArg(find(t, tr.call(t, "peek", nil).listing(t), "iMessage")))
	tr.tapLabel(t, "Paste")
	res := tr.tapLabel(t, "Send")
	if !strings.Contains(res.texts[0], " | "+verdictChanged+" — ") || strings.Contains(res.texts[0], look) {
		t.Fatalf("sending changed the screen; the first text part says %q", res.texts[0])
	}
	if !has(res.listing(t), look) {
		t.Fatalf("the sent message %q is not in the listing:\n%s", look, res.texts[1])
	}
}
