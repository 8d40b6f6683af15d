package rigsim

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// wireError is an error whose text is the one PhysiClaw writes, word for
// word: the loop and the model recognise these.
type wireError string

func (e wireError) Error() string { return string(e) }

// bridgeHint is what PhysiClaw adds to a bridge failure while the phone's
// bridge page does not poll.
const bridgeHint = "the phone may be off Wi-Fi or on a different Wi-Fi network than this computer"

// The errors a PhysiClaw rig reports (docs/rig-contract.md, "What comes back").
const (
	errBusy              wireError = "PhysiClaw is busy — wait for the current operation to finish, then retry."
	errNotSetUp          wireError = "Hardware not set up. Run /setup to connect and calibrate."
	errOriginNotPinned   wireError = "Arm work frame is not pinned to the calibration — restart the server (--hot-start with the arm at its park spot), or recalibrate."
	errScreenshotTimeout wireError = "Screenshot upload timed out — " + bridgeHint
	errClipboardMiss     wireError = "clipboard sync FAILED — AssistiveTouch long-pressed but the phone never fetched the text; " +
		"its clipboard still holds the PREVIOUS content, so do NOT paste (" + bridgeHint + ")"
)

// Verdicts of a gesture (docs/rig-contract.md, "What comes back"), and what
// replaces the view when the camera delivered none.
const (
	verdictChanged   = "screen: changed"
	verdictUnchanged = "screen: no visible change"
	viewUnavailable  = " (auto-view unavailable — `peek` to see the screen)"
)

// errResult is how the rig reports a failing tool: an error result the model can read.
func errResult(tool string, err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Error executing tool %s: %v", tool, err)}}}
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// gesture is what one tool does to the phone; it returns the action text. Runs with mu held.
type gesture func(r *Rig) (line string, err error)

// enter runs the checks every tool shares, in PhysiClaw's order: hardware
// set up, the arm's frame pinned, the lock free. The caller must call the
// returned release.
func (r *Rig) enter() (release func(), err error) {
	f := r.Faults()
	if !f.calibrated() {
		return nil, errNotSetUp
	}
	if !f.healthy("origin_pinned") {
		return nil, errOriginNotPinned
	}
	if !r.busy.TryLock() {
		return nil, errBusy
	}
	r.mu.Lock()
	contended := r.chance(r.faults.Busy)
	r.mu.Unlock()
	if contended {
		r.busy.Unlock()
		return nil, errBusy
	}
	return r.busy.Unlock, nil
}

// runGesture holds the lock, spends the tool's time and acts. Its result is
// PhysiClaw's: `<action> | <verdict> <hint>`, the view after the gesture and
// its listing; the clipboard's is its line and hint alone.
func (r *Rig) runGesture(ctx context.Context, tool string, extra time.Duration, g gesture) *mcp.CallToolResult {
	release, err := r.enter()
	if err != nil {
		return errResult(tool, err)
	}
	defer release()
	spent := r.sleep(ctx, tool, extra)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	before := signature(r.phone)
	text, err := g(r)
	r.phone.Advance(spent)
	r.crashIfDue()
	if err != nil {
		return errResult(tool, err)
	}
	if tool == contract.ToolSendToClipboard {
		return textResult(text + " " + hints[tool])
	}
	if r.chance(r.faults.CameraHiccups) {
		return textResult(text + " " + hints[tool] + viewUnavailable)
	}
	if !r.chance(r.faults.NoVerdict) {
		verdict := verdictUnchanged
		if signature(r.phone) != before {
			verdict = verdictChanged
		}
		text += " | " + verdict
	}
	img, listing, err := r.view(true)
	if err != nil {
		return errResult(tool, err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: text + " " + hints[tool]},
		&mcp.ImageContent{Data: img, MIMEType: "image/jpeg"},
		&mcp.TextContent{Text: listing},
	}}
}

// runLook is peek or screenshot: the picture and the listing, nothing else.
func (r *Rig) runLook(ctx context.Context, tool string) *mcp.CallToolResult {
	release, err := r.enter()
	if err != nil {
		return errResult(tool, err)
	}
	defer release()
	camera := tool == contract.ToolPeek
	if !camera && !r.Faults().healthy("bridge") {
		r.sleep(ctx, tool, 0)
		return errResult(tool, errScreenshotTimeout)
	}
	spent := r.sleep(ctx, tool, 0)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	r.phone.Advance(spent)
	img, listing, err := r.view(camera)
	if err != nil {
		return errResult(tool, err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: img, MIMEType: "image/jpeg"}, &mcp.TextContent{Text: listing}}}
}

// view renders what the rig sees now. Through the camera, glare washes out labels; the
// phone's own screenshot is pixel-perfect. Holds mu.
func (r *Rig) view(camera bool) ([]byte, string, error) {
	els := append(r.phone.Screen(), phone.Element{Kind: phone.Icon, Box: r.at})
	glare := 0.0
	if camera {
		glare = r.faults.Glare
	}
	img, err := renderJPEG(frame{elements: els[:len(els)-1], assistiveTouch: r.at, locked: r.phone.Locked(), glare: glare > 0})
	if err != nil {
		return nil, "", err
	}
	return img, formatListing(look(els, glare, r.rng)), nil
}

// timeLike matches clock readouts, which tick without the screen really changing.
var timeLike = regexp.MustCompile(`^\d{1,2}:\d{2}$`)

// signature is what the verdict compares: the page and what is drawn on it, less the clock.
func signature(p *phone.Phone) string {
	var b strings.Builder
	b.WriteString(p.Page())
	for _, e := range p.Screen() {
		if timeLike.MatchString(e.Label) {
			continue
		}
		fmt.Fprintf(&b, "|%s %q %.3f %.3f", e.Kind, e.Label, e.Box.L, e.Box.T)
	}
	return b.String()
}

// crashIfDue crashes the CrashApp fault's app once it is in the foreground. Holds mu.
func (r *Rig) crashIfDue() {
	if app := r.faults.CrashApp; app != "" && r.phone.Foreground() == app {
		r.phone.Crash(app)
		r.faults.CrashApp = ""
	}
}

// touchAt applies the touch faults (offset, missed taps) and touches the phone. Holds mu.
func (r *Rig) touchAt(b bbox, touch func(x, y float64)) {
	x, y := b.center()
	x, y = x+r.faults.TapOffset[0], y+r.faults.TapOffset[1]
	if r.chance(r.faults.MissedTaps) {
		return
	}
	touch(x, y)
}

func (r *Rig) checkAT(tool string, b bbox) error {
	if r.overlapsAssistiveTouch(b.center()) {
		return fmt.Errorf("%s target %s overlaps AssistiveTouch button — aim aside", tool, b)
	}
	return nil
}

func (r *Rig) tap(b bbox) (string, error) {
	if err := r.checkAT(contract.ToolTap, b); err != nil {
		return "", err
	}
	r.touchAt(b, r.phone.Tap)
	return "Tapped at bbox " + b.String(), nil
}

func (r *Rig) doubleTap(b bbox) (string, error) {
	if err := r.checkAT(contract.ToolDoubleTap, b); err != nil {
		return "", err
	}
	r.touchAt(b, r.phone.DoubleTap)
	return "Double tapped at bbox " + b.String(), nil
}

func (r *Rig) longPress(b bbox) (string, error) {
	if err := r.checkAT(contract.ToolLongPress, b); err != nil {
		return "", err
	}
	r.touchAt(b, r.phone.LongPress)
	return "Long pressed at bbox " + b.String(), nil
}

func (r *Rig) swipe(s swipeArgs) (string, error) {
	if r.swipeCrossesAssistiveTouch(s) {
		return "", fmt.Errorf("swipe %s at %s crosses AssistiveTouch button — aim aside", s.direction, s.box)
	}
	r.touchAt(s.box, func(x, y float64) { r.phone.Swipe(x, y, s.direction, swipeSizes[s.size]) })
	return fmt.Sprintf("Swiped %s %s at bbox %s", s.direction, s.size, s.box), nil
}

// sendToClipboard puts text on the phone's clipboard through the bridge;
// with the bridge page in the background the phone never fetches it.
func (r *Rig) sendToClipboard(text string) (string, error) {
	if !r.faults.healthy("bridge") {
		return "", errClipboardMiss
	}
	r.phone.SetClipboard(text)
	return fmt.Sprintf("Copied %d chars to phone clipboard", len([]rune(text))), nil
}

func (r *Rig) homeScreen() (string, error) {
	r.phone.Home()
	return "Went to home screen", nil
}

func (r *Rig) goBack() (string, error) {
	r.phone.Back()
	return "Went back", nil
}

// forceQuit quits the foreground app, if any; PhysiClaw's line is the same
// either way, the view after tells.
func (r *Rig) forceQuit() (string, error) {
	r.phone.ForceQuit()
	return "Force-quit current app", nil
}

func (r *Rig) unlockPhone() (string, error) {
	if !r.phone.Locked() {
		return "Failed to find passcode keypad", nil
	}
	r.phone.Wake()
	r.phone.EnterPasscode(r.cfg.UnlockCode)
	return "Passcode entered", nil
}

// sequence runs the steps under one lock, one line each, stopping at the
// first that fails; nothing is rolled back. A step that cannot run fails
// there, as one that the rig refuses does.
func (r *Rig) sequence(steps []step) (string, error) {
	var lines []string
	for i, s := range steps {
		line, err := "", s.err
		if err == nil {
			switch s.tool {
			case contract.ToolTap:
				line, err = r.tap(s.box)
			case contract.ToolDoubleTap:
				line, err = r.doubleTap(s.box)
			case contract.ToolLongPress:
				line, err = r.longPress(s.box)
			case contract.ToolSwipe:
				line, err = r.swipe(s.swipe)
			case contract.ToolSendToClipboard:
				line, err = r.sendToClipboard(s.text)
			}
		}
		if err != nil {
			lines = append(lines, fmt.Sprintf("%d %s FAIL (%v)", i+1, s.tool, err))
			break
		}
		lines = append(lines, fmt.Sprintf("%d %s ok — %s", i+1, s.tool, line))
	}
	return strings.Join(lines, "\n"), nil
}

// sequenceTime is the steps' typical time, up to the first that cannot run.
func sequenceTime(steps []step) time.Duration {
	var d time.Duration
	for _, s := range steps {
		if s.err != nil {
			break
		}
		d += typicalDuration[s.tool]
	}
	return d
}

// hints are the advice each tool's result ends with, after its verdict.
// Each starts with "— ", as PhysiClaw's do; the sequence's starts on a line
// of its own.
var hints = map[string]string{
	contract.ToolTap:             "— look at the view below: did the element you aimed at react?",
	contract.ToolDoubleTap:       "— look at the view below: did it zoom in or select?",
	contract.ToolLongPress:       "— a menu or popover that opened is in the view below; pick your item from its listing",
	contract.ToolSwipe:           "— the view below is the page once the stroke ended",
	contract.ToolHomeScreen:      "— the view below is where you are now; the app switcher means you were home already: close it by tapping an empty spot, not with another `home_screen`",
	contract.ToolGoBack:          "— look at the view below: is the previous screen back?",
	contract.ToolForceQuit:       "— the view below should be the home screen: open the app again from there; any other screen means the gesture missed",
	contract.ToolUnlockPhone:     "— the home screen or an app in the view below means the phone is unlocked",
	contract.ToolSendToClipboard: "— to paste it, long-press the field and tap Paste, or bundle that long-press and the Paste tap in one `sequence`",
	contract.ToolSequence:        "\n— the view below is the screen after the last step that ran",
}
