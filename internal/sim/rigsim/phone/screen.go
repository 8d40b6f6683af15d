package phone

import (
	"fmt"
	"slices"
)

// page is what one app page draws. Elements not pinned are content, shifted by the scroll offset.
type page struct {
	elements   []Element
	scrollable bool
}

func (pg page) maxScroll() float64 {
	bottom := 0.0
	for _, e := range pg.elements {
		if !e.fixed {
			bottom = max(bottom, e.Box.B)
		}
	}
	return max(0, bottom-contentBottom+0.02)
}

// app is one installed app: its home-screen icon colour and its root page.
type app struct {
	color string
	root  string
	dock  bool
}

// apps is everything installed. The first four rows of the grid are these, in homeOrder.
var apps = map[string]app{
	"Clock":    {color: "black", root: "clock.world"},
	"Settings": {color: "grey", root: "settings.root"},
	"Messages": {color: "green", root: "messages.root"},
	"Shop":     {color: "orange", root: "shop.root"},
	"Photos":   {color: "yellow", root: "plain"},
	"Maps":     {color: "teal", root: "plain"},
	"Notes":    {color: "yellow", root: "plain"},
	"Weather":  {color: "blue", root: "plain"},
	"Phone":    {color: "green", root: "plain", dock: true},
	"Safari":   {color: "blue", root: "plain", dock: true},
	"Mail":     {color: "blue", root: "plain", dock: true},
	"Music":    {color: "red", root: "plain", dock: true},
}

var (
	homeOrder = []string{"Clock", "Settings", "Messages", "Shop", "Photos", "Maps", "Notes", "Weather"}
	dockOrder = []string{"Phone", "Safari", "Mail", "Music"}
)

// Screen is what the phone shows now, drawn elements only, back to front.
func (p *Phone) Screen() []Element {
	return slices.DeleteFunc(p.visible(), func(e Element) bool { return e.hidden })
}

// Page names the screen for ground truth: "lock", "passcode", "home", "switcher" or "<App>/<page>".
func (p *Phone) Page() string {
	switch {
	case p.locked && p.passcode:
		return "passcode"
	case p.locked:
		return "lock"
	case p.switcher:
		return "switcher"
	case p.fg == "":
		return "home"
	}
	pg, _ := p.top()
	return p.fg + "/" + pg
}

// visible is every element on screen including undrawn touch targets, back to front.
func (p *Phone) visible() []Element {
	var els []Element
	switch {
	case p.locked && p.passcode:
		els = p.passcodeScreen()
	case p.locked:
		els = p.lockScreen()
	case p.switcher:
		els = p.switcherScreen()
	case p.fg == "":
		els = p.homeScreen()
	default:
		els = p.appScreen()
	}
	if !p.locked {
		els = append(els, p.statusBar()...)
	}
	if p.toast != "" {
		els = append(els, centered(p.toast, 0.5, 0.80, 2).filled("black"))
	}
	if p.popover != nil {
		b := p.popover.box
		els = append(els, Element{Kind: Text, Label: "Paste", Box: b, Style: Style{Scale: 2, Color: "black", Filled: true}})
	}
	return els
}

func (p *Phone) statusBar() []Element {
	els := []Element{textEl(p.now.Format("15:04"), marginX, 0.015, 2)}
	if p.wifi {
		els = append(els, icon(Box{0.76, 0.015, 0.81, 0.038}, "black"))
	}
	return append(els, icon(Box{0.84, 0.017, 0.93, 0.036}, "black"))
}

func (p *Phone) lockScreen() []Element {
	els := []Element{
		centered(p.now.Format("15:04"), 0.5, 0.12, 6),
		centered(p.now.Format("Monday, January 2"), 0.5, 0.22, 2),
	}
	y := 0.30
	for _, t := range p.threads {
		if t.unread > 0 {
			last := t.messages[len(t.messages)-1]
			els = append(els, textEl(fmt.Sprintf("%s: %s", t.name, last.text), marginX, y, 2).filled("white"))
			y += rowHeight
		}
	}
	if p.timer.fired {
		els = append(els, textEl("Timer done", marginX, y, 2).filled("white"))
	}
	return append(els, centered("Swipe up to unlock", 0.5, 0.92, 2))
}

// keypad is the passcode keypad: digits in a 3×4 grid with 0 under 8.
func (p *Phone) passcodeScreen() []Element {
	title := "Enter Passcode"
	if p.wrong {
		title = "Wrong Passcode"
	}
	els := []Element{centered(title, 0.5, 0.18, 2)}
	dots := ""
	for range p.entry {
		dots += "*"
	}
	if dots != "" {
		els = append(els, centered(dots, 0.5, 0.24, 2))
	}
	for i, d := range []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "", "0", ""} {
		if d == "" {
			continue
		}
		cx, cy := 0.25+float64(i%3)*0.25, 0.36+float64(i/3)*0.11
		digit := d
		els = append(els, centered(d, cx, cy, 4).onTap(func(p *Phone) { p.typeDigit(digit) }))
	}
	els = append(els, centered("Emergency", 0.22, 0.86, 2))
	return append(els, centered("Cancel", 0.78, 0.86, 2).onTap(func(p *Phone) { p.Back() }))
}

// Home-screen grid geometry.
const (
	iconSize   = 0.15 // width; height is scaled for the screen's aspect
	iconAspect = 480.0 / 1040.0
	gridTop    = 0.09
	gridRowGap = 0.13
	dockTop    = 0.87
)

func (p *Phone) homeScreen() []Element {
	var els []Element
	place := func(name string, cx, top float64, label bool) {
		h := iconSize * iconAspect
		open := func(p *Phone) { p.open(name) }
		els = append(els, icon(Box{cx - iconSize/2, top, cx + iconSize/2, top + h}, apps[name].color).onTap(open))
		if label {
			els = append(els, centered(name, cx, top+h+0.008, 1).onTap(open))
		}
	}
	for i, name := range homeOrder {
		place(name, 0.14+float64(i%4)*0.24, gridTop+float64(i/4)*gridRowGap, true)
	}
	for i, name := range dockOrder {
		place(name, 0.14+float64(i)*0.24, dockTop, false)
	}
	return els
}

// switcherScreen shows a card per running app; tap one to go back to it, swipe it up to quit it.
func (p *Phone) switcherScreen() []Element {
	if len(p.recents) == 0 {
		return []Element{centered("No Recent Apps", 0.5, 0.45, 2).onTap(func(p *Phone) { p.switcher = false })}
	}
	var els []Element
	for i, name := range p.recents {
		x := marginX + float64(i%2)*0.46
		y := 0.12 + float64(i/2)*0.36
		app := name
		els = append(els, Element{Kind: Icon, Box: Box{x, y, x + 0.42, y + 0.30}, Style: Style{Color: "white", Filled: true}, Tap: func(p *Phone) { p.open(app) }})
		els = append(els, textEl(name, x, y-0.03, 2).onTap(func(p *Phone) { p.open(app) }))
	}
	return els
}

func (p *Phone) switcherCardAt(x, y float64) string {
	for i, name := range p.recents {
		cx := marginX + float64(i%2)*0.46
		cy := 0.12 + float64(i/2)*0.36
		if (Box{cx, cy - 0.03, cx + 0.42, cy + 0.30}).Contains(x, y) {
			return name
		}
	}
	return ""
}

// appScreen lays out the foreground app's top page, scrolled and clipped to the content area.
func (p *Phone) appScreen() []Element {
	pg := p.page()
	off := p.scroll[p.scrollKey()]
	var els []Element
	for _, e := range pg.elements {
		if !e.fixed {
			e.Box = e.Box.Shift(-off)
			if _, cy := e.Box.Center(); cy < contentTop || cy > contentBottom {
				continue
			}
		}
		els = append(els, e)
	}
	return els
}

// page builds the foreground app's top page.
func (p *Phone) page() page {
	name, arg := p.top()
	if build, ok := pages[name]; ok {
		return build(p, arg)
	}
	return plainPage(p, arg)
}

// pages are every app page by name; each builds itself from the phone's state.
var pages map[string]func(p *Phone, arg string) page

func init() {
	pages = map[string]func(*Phone, string) page{
		"plain":             plainPage,
		"clock.world":       clockWorld,
		"clock.alarms":      clockAlarms,
		"clock.stopwatch":   clockStopwatch,
		"clock.timers":      clockTimers,
		"settings.root":     settingsRoot,
		"settings.wifi":     settingsWiFi,
		"settings.general":  settingsPlain,
		"messages.root":     messagesRoot,
		"messages.thread":   messagesThread,
		"shop.root":         shopRoot,
		"shop.search":       shopSearch,
		"shop.product":      shopProduct,
		"shop.cart":         shopCart,
		"shop.checkout":     shopCheckout,
		"shop.confirmation": shopConfirmation,
	}
}

// plainPage is the whole of the decorative apps: a title and nothing to do.
func plainPage(p *Phone, _ string) page {
	return page{elements: []Element{
		textEl(p.fg, marginX, titleTop, 3).pinned(),
		centered("Nothing here yet", 0.5, 0.45, 2).color("grey"),
	}}
}

// titleBar is a page title with an optional back button labelled with the parent page.
func titleBar(title, back string) []Element {
	els := []Element{textEl(title, marginX, titleTop+0.02, 3).pinned()}
	if back != "" {
		els = append(els, textEl("< "+back, marginX, statusBarH+0.002, 2).color("blue").pinned().onTap(func(p *Phone) { p.Back() }))
	}
	return els
}

// textField is an editable field: long-press it to get the Paste menu.
func textField(value, placeholder string, b Box, set func(p *Phone, text string)) Element {
	label, color := value, "black"
	if value == "" {
		label, color = placeholder, "grey"
	}
	e := textEl(label, b.L+0.02, b.T+(b.B-b.T-lineHeight)/2, 2).color(color)
	e.Box.R = min(b.R, e.Box.R)
	e.LongPress = func(p *Phone) {
		if p.clipboard == "" {
			return
		}
		pb := Box{e.Box.L, e.Box.T - 0.06, e.Box.L + 0.2, e.Box.T - 0.015}
		p.popover = &popover{box: pb, paste: set}
	}
	return e.pinned()
}
