package rigsim

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// The errors a PhysiClaw rig reports, as the loop reads them.
var (
	errBusy              = errors.New("busy, retry: the rig is running another gesture; wait for it to finish, then retry")
	errNotSetUp          = errors.New("hardware not set up: the arm, camera or calibration is missing; run /setup to connect and calibrate")
	errScreenshotTimeout = errors.New("screenshot upload timed out — check the iOS Shortcut (the phone bridge is not answering)")
)

// Verdicts of a gesture (docs/rig-contract.md, "What comes back").
const (
	verdictChanged   = "screen: changed"
	verdictUnchanged = "screen: no visible change"
	cameraHiccupLine = "camera hiccup: no view after the gesture — `peek` to see the screen"
	clipboardTimeout = "AssistiveTouch long-pressed but clipboard not confirmed — check the iOS Shortcut"
)

// errResult is how the rig reports a failing tool: an error result the model can read.
func errResult(tool string, err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Error executing tool %s: %v", tool, err)}}}
}

// gesture is what one tool does to the phone; it returns the action line. Runs with mu held.
type gesture func(r *Rig) (line string, err error)

// enter runs the checks every tool shares: hardware present, lock free. The caller must call the returned release.
func (r *Rig) enter(tool string) (release func(), err error) {
	f := r.Faults()
	if !f.healthy("arm") || !f.healthy("camera") || !f.healthy("calibrated") {
		return nil, errNotSetUp
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

// runGesture holds the lock, spends the tool's time, acts, and returns the action line,
// the verdict, a hint and the view after the gesture.
func (r *Rig) runGesture(ctx context.Context, tool string, extra time.Duration, g gesture) *mcp.CallToolResult {
	release, err := r.enter(tool)
	if err != nil {
		return errResult(tool, err)
	}
	defer release()
	spent := r.sleep(ctx, tool, extra)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	before := signature(r.phone)
	line, err := g(r)
	r.phone.Advance(spent)
	r.crashIfDue()
	if err != nil {
		return errResult(tool, err)
	}
	if r.chance(r.faults.CameraHiccups) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: line + "\n" + cameraHiccupLine}}}
	}
	changed := signature(r.phone) != before
	verdict := verdictUnchanged
	if changed {
		verdict = verdictChanged
	}
	img, listing, err := r.view(true)
	if err != nil {
		return errResult(tool, err)
	}
	text := fmt.Sprintf("%s\n%s\nhint: %s", line, verdict, hint(tool, changed))
	return &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: text},
		&mcp.ImageContent{Data: img, MIMEType: "image/jpeg"},
		&mcp.TextContent{Text: listing},
	}}
}

// runLook is peek or screenshot: the picture and the listing, nothing else.
func (r *Rig) runLook(ctx context.Context, tool string) *mcp.CallToolResult {
	release, err := r.enter(tool)
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
	els := append(r.phone.Screen(), phone.Element{Kind: phone.Icon, Box: assistiveTouch})
	glare := 0.0
	if camera {
		glare = r.faults.Glare
	}
	img, err := renderJPEG(frame{elements: els[:len(els)-1], locked: r.phone.Locked(), glare: glare > 0})
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

func checkAT(tool string, b bbox) error {
	if overlapsAssistiveTouch(b.center()) {
		return fmt.Errorf("%s target %s overlaps AssistiveTouch button — aim aside", tool, b)
	}
	return nil
}

func (r *Rig) tap(b bbox) (string, error) {
	if err := checkAT(contract.ToolTap, b); err != nil {
		return "", err
	}
	r.touchAt(b, r.phone.Tap)
	return "Tapped at bbox " + b.String(), nil
}

func (r *Rig) doubleTap(b bbox) (string, error) {
	if err := checkAT(contract.ToolDoubleTap, b); err != nil {
		return "", err
	}
	r.touchAt(b, r.phone.DoubleTap)
	return "Double tapped at bbox " + b.String(), nil
}

func (r *Rig) longPress(b bbox) (string, error) {
	if err := checkAT(contract.ToolLongPress, b); err != nil {
		return "", err
	}
	r.touchAt(b, r.phone.LongPress)
	return "Long pressed at bbox " + b.String(), nil
}

func (r *Rig) swipe(s swipeArgs) (string, error) {
	if swipeCrossesAssistiveTouch(s) {
		return "", fmt.Errorf("swipe %s at %s crosses AssistiveTouch button — aim aside", s.direction, s.box)
	}
	r.touchAt(s.box, func(x, y float64) { r.phone.Swipe(x, y, s.direction, swipeSizes[s.size]) })
	return fmt.Sprintf("Swiped %s %s at bbox %s", s.direction, s.size, s.box), nil
}

func (r *Rig) sendToClipboard(text string) (string, error) {
	if !r.faults.healthy("bridge") {
		return clipboardTimeout, nil
	}
	r.phone.SetClipboard(text)
	return fmt.Sprintf("Copied %q to phone clipboard", clip(text, 60)), nil
}

func (r *Rig) homeScreen() (string, error) {
	r.phone.Home()
	return "Went to home screen", nil
}

func (r *Rig) goBack() (string, error) {
	r.phone.Back()
	return "Went back", nil
}

func (r *Rig) forceQuit() (string, error) {
	if app := r.phone.ForceQuit(); app != "" {
		return "Force quit " + app, nil
	}
	return "No app in the foreground to quit", nil
}

func (r *Rig) unlockPhone() (string, error) {
	if !r.phone.Locked() {
		return "Failed to find passcode keypad — phone may already be unlocked", nil
	}
	r.phone.Wake()
	r.phone.EnterPasscode(r.cfg.UnlockCode)
	return "Passcode entered", nil
}

// sequence runs the steps under one lock, stopping at the first failure; nothing is rolled back.
func (r *Rig) sequence(steps []step) (string, error) {
	var lines []string
	for i, s := range steps {
		var line string
		var err error
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
		if err != nil {
			lines = append(lines, fmt.Sprintf("%d %s FAIL (%v)", i+1, s.tool, err))
			break
		}
		lines = append(lines, fmt.Sprintf("%d %s ok — %s", i+1, s.tool, line))
	}
	return strings.Join(lines, "\n"), nil
}

func sequenceTime(steps []step) time.Duration {
	var d time.Duration
	for _, s := range steps {
		d += typicalDuration[s.tool]
	}
	return d
}

// hint is the advice line after a gesture.
func hint(tool string, changed bool) string {
	switch {
	case tool == contract.ToolSendToClipboard:
		return "next: `long_press` the target field, then `tap` the Paste button that appears"
	case tool == contract.ToolLongPress && changed:
		return "a menu or popover opened: tap its item (Paste, Copy…) with a bbox from this view"
	case tool == contract.ToolUnlockPhone && changed:
		return "check this view: the home screen or an app means the phone is unlocked"
	case tool == contract.ToolSwipe && !changed:
		return "nothing moved: the list may be at its end, or try a longer size or another spot"
	case !changed:
		return "the gesture may have missed (retry once) or the bbox was wrong: pick a target from this view"
	case tool == contract.ToolSequence:
		return "check this view to see where the sequence left the screen"
	}
	return "this view is the screen after the gesture: plan the next move from it"
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
