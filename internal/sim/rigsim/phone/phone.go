package phone

import (
	"slices"
	"strings"
	"time"
)

// Config is how a phone starts.
type Config struct {
	Passcode   string        // the phone's passcode (default "111111")
	Locked     bool          // start on the lock screen
	AutoLock   time.Duration // lock after this long without a touch (0: never)
	ReplyAfter time.Duration // how long a Messages contact takes to answer (default 2m)
	WiFi       *bool         // Wi-Fi starts on unless set false
	Start      time.Time     // the simulated clock's start (default 2026-11-29 09:41 UTC)
}

// DefaultPasscode is the passcode a PhysiClaw rig types (its unlock_phone is hard-wired to it).
const DefaultPasscode = "111111"

// DefaultReplyAfter is how long a Messages contact takes to answer.
const DefaultReplyAfter = 2 * time.Minute

// Phone is the simulated phone. It is not safe for concurrent use: the rig serialises access.
type Phone struct {
	cfg   Config
	now   time.Time
	touch time.Time // last touch, for auto-lock

	locked   bool
	passcode bool   // the passcode keypad is showing (locked only)
	entry    string // digits typed so far
	wrong    bool   // the last passcode was wrong

	fg       string              // the foreground app; "" is the home screen
	switcher bool                // the app switcher is showing
	recents  []string            // running apps, most recent first
	stacks   map[string][]string // app → its page stack ("page" or "page:arg")
	scroll   map[string]float64  // app/depth/page → scroll offset
	popover  *popover            // a Paste menu, if one is open
	toast    string              // a transient message shown once

	clipboard string
	wifi      bool
	timer     timer
	threads   []*thread
	banners   int // notification banners shown (Banners)
	shop      shop
	taps      int
}

// popover is the Paste menu a long press on a text field opens.
type popover struct {
	box   Box
	paste func(p *Phone, text string)
}

// New builds a phone in its starting state.
func New(cfg Config) *Phone {
	if cfg.Passcode == "" {
		cfg.Passcode = DefaultPasscode
	}
	if cfg.ReplyAfter == 0 {
		cfg.ReplyAfter = DefaultReplyAfter
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 11, 29, 9, 41, 0, 0, time.UTC)
	}
	p := &Phone{cfg: cfg, now: cfg.Start, touch: cfg.Start, locked: cfg.Locked,
		stacks: map[string][]string{}, scroll: map[string]float64{}, wifi: cfg.WiFi == nil || *cfg.WiFi}
	p.threads = initialThreads()
	p.shop = newShop()
	return p
}

// Now is the phone's clock.
func (p *Phone) Now() time.Time { return p.now }

// Advance moves the phone's clock forward: timers run down, contacts reply, the screen auto-locks.
func (p *Phone) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	p.now = p.now.Add(d)
	p.timer.tick(p.now)
	for _, t := range p.threads {
		p.banners += t.deliver(p.now, p.viewingThread(t.name))
	}
	if p.cfg.AutoLock > 0 && !p.locked && p.now.Sub(p.touch) >= p.cfg.AutoLock {
		p.Lock()
	}
}

// Lock puts the phone to sleep on its lock screen, the way it locks itself.
func (p *Phone) Lock() {
	p.locked, p.passcode, p.entry, p.wrong, p.popover, p.switcher = true, false, "", false, nil, false
}

// Locked reports whether the lock screen is up.
func (p *Phone) Locked() bool { return p.locked }

// Foreground is the app on screen ("" for the home screen).
func (p *Phone) Foreground() string { return p.fg }

// SetClipboard puts text on the clipboard (the rig's bridge does this).
func (p *Phone) SetClipboard(text string) { p.clipboard = text }

// Crash closes app the way a crash does: gone from the screen and from the recents.
// It reports whether the app was running.
func (p *Phone) Crash(app string) bool {
	if !slices.Contains(p.recents, app) {
		return false
	}
	p.quit(app)
	return true
}

// Tap touches the screen once at (x, y).
func (p *Phone) Tap(x, y float64) {
	p.touched()
	if pop := p.popover; pop != nil {
		p.popover = nil
		if pop.box.Contains(x, y) {
			pop.paste(p, p.clipboard)
			return
		}
	}
	if e, ok := p.hit(x, y, func(e Element) bool { return e.Tap != nil }); ok {
		p.toast = ""
		e.Tap(p)
	}
}

// DoubleTap is two taps; only apps that zoom would care, and none of ours do.
func (p *Phone) DoubleTap(x, y float64) {
	p.Tap(x, y)
	p.Tap(x, y)
}

// LongPress holds at (x, y): it opens the Paste menu on text fields.
func (p *Phone) LongPress(x, y float64) {
	p.touched()
	p.popover = nil
	if e, ok := p.hit(x, y, func(e Element) bool { return e.LongPress != nil }); ok {
		e.LongPress(p)
	}
}

// Swipe strokes from (x, y) in direction ("up", "down", "left", "right", the stylus's motion) over length (screen fraction).
func (p *Phone) Swipe(x, y float64, direction string, length float64) {
	p.touched()
	p.popover = nil
	switch {
	case p.locked && !p.passcode && direction == "up":
		p.passcode, p.entry, p.wrong = true, "", false
	case p.locked:
	case direction == "up" && y > homeEdge && length >= homeStroke:
		p.Home()
	case direction == "right" && x < backEdge:
		p.Back()
	case p.switcher && direction == "up":
		if app := p.switcherCardAt(x, y); app != "" {
			p.quit(app)
		}
	case direction == "up" || direction == "down":
		p.scrollBy(map[bool]float64{true: length, false: -length}[direction == "up"])
	}
}

// The edge zones of the system gestures, in screen fractions.
const (
	homeEdge   = 0.95 // a swipe up starting below this goes home
	homeStroke = 0.25 // …if it is at least this long
	backEdge   = 0.05 // a swipe right starting left of this goes back
)

// Home is the home gesture: from an app it goes home, from home it opens the app switcher.
func (p *Phone) Home() {
	p.touched()
	p.popover = nil
	switch {
	case p.locked:
		p.passcode, p.entry, p.wrong = true, "", false
	case p.switcher:
		p.switcher = false
	case p.fg == "":
		p.switcher = true
	default:
		p.fg = ""
	}
}

// Back pops one page; it does nothing at an app's root or on the home screen.
func (p *Phone) Back() {
	p.touched()
	p.popover = nil
	switch {
	case p.locked && p.passcode:
		p.passcode, p.entry, p.wrong = false, "", false
	case p.locked, p.switcher, p.fg == "":
	default:
		if st := p.stacks[p.fg]; len(st) > 1 {
			p.stacks[p.fg] = st[:len(st)-1]
		}
	}
}

// ForceQuit quits the foreground app. It reports the app it quit ("" if none was open).
func (p *Phone) ForceQuit() string {
	p.touched()
	if p.locked || p.fg == "" {
		p.switcher = false
		return ""
	}
	app := p.fg
	p.quit(app)
	return app
}

// Wake shows the lock screen's passcode keypad (the first half of unlock_phone).
func (p *Phone) Wake() {
	p.touched()
	if p.locked {
		p.passcode = true
	}
}

// EnterPasscode types digits on the keypad, as unlock_phone does.
func (p *Phone) EnterPasscode(digits string) {
	for _, d := range digits {
		p.typeDigit(string(d))
	}
}

func (p *Phone) typeDigit(d string) {
	p.touched()
	if !p.locked || !p.passcode {
		return
	}
	p.wrong = false
	p.entry += d
	if len(p.entry) < len(p.cfg.Passcode) {
		return
	}
	if p.entry == p.cfg.Passcode {
		p.locked, p.passcode = false, false
	} else {
		p.wrong = true
	}
	p.entry = ""
}

func (p *Phone) touched() { p.touch = p.now; p.taps++ }

// open brings app to the foreground, on the page it was left on.
func (p *Phone) open(app string) {
	p.switcher = false
	p.fg = app
	p.recents = append([]string{app}, slices.DeleteFunc(p.recents, func(a string) bool { return a == app })...)
	if len(p.stacks[app]) == 0 {
		p.stacks[app] = []string{apps[app].root}
	}
}

func (p *Phone) quit(app string) {
	p.recents = slices.DeleteFunc(p.recents, func(a string) bool { return a == app })
	delete(p.stacks, app)
	for k := range p.scroll {
		if strings.HasPrefix(k, app+"/") {
			delete(p.scroll, k)
		}
	}
	if app == "Shop" {
		p.shop.query = ""
	}
	if p.fg == app {
		p.fg = ""
	}
	p.popover = nil
}

// push opens a page on top of the foreground app's stack.
func (p *Phone) push(page string) { p.stacks[p.fg] = append(p.stacks[p.fg], page) }

// replaceTop swaps the top page (tab bars switch this way).
func (p *Phone) replaceTop(page string) {
	st := p.stacks[p.fg]
	st[len(st)-1] = page
}

// top is the foreground app's current page and its argument.
func (p *Phone) top() (page, arg string) {
	st := p.stacks[p.fg]
	if len(st) == 0 {
		return "", ""
	}
	page, arg, _ = strings.Cut(st[len(st)-1], ":")
	return page, arg
}

func (p *Phone) scrollKey() string {
	st := p.stacks[p.fg]
	if len(st) == 0 {
		return ""
	}
	return p.fg + "/" + st[len(st)-1]
}

func (p *Phone) scrollBy(d float64) {
	if p.locked || p.fg == "" || p.switcher {
		return
	}
	pg := p.page()
	if !pg.scrollable {
		return
	}
	k := p.scrollKey()
	p.scroll[k] = min(max(p.scroll[k]+d, 0), pg.maxScroll())
}

// hit finds the element drawn at (x, y) that accepts the touch, front-most first.
func (p *Phone) hit(x, y float64, accepts func(Element) bool) (Element, bool) {
	els := p.visible()
	for i := len(els) - 1; i >= 0; i-- {
		if e := els[i]; e.Box.Contains(x, y) && accepts(e) {
			return e, true
		}
	}
	return Element{}, false
}
