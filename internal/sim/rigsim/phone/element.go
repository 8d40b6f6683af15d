// Package phone is rigsim's simulated phone: a lock screen with a passcode, a
// home screen with app icons and a dock, and a few apps with pages and real
// state (Clock, Settings, Messages, Shop). It knows nothing of MCP or cameras:
// the rig taps and swipes it at screen fractions and asks it what it shows.
package phone

// Kind is how the rig's vision sees an element: an icon (no label) or OCR'd text.
type Kind string

// The two kinds of element in a listing.
const (
	Icon Kind = "icon"
	Text Kind = "text"
)

// Box is a rectangle in screen fractions (0..1), left/top inclusive.
type Box struct{ L, T, R, B float64 }

// Contains reports whether the point (x, y) lies in the box.
func (b Box) Contains(x, y float64) bool { return x >= b.L && x < b.R && y >= b.T && y < b.B }

// Center is the middle of the box.
func (b Box) Center() (x, y float64) { return (b.L + b.R) / 2, (b.T + b.B) / 2 }

// Shift moves the box down by dy.
func (b Box) Shift(dy float64) Box { return Box{b.L, b.T + dy, b.R, b.B + dy} }

// Style tells the renderer how to draw an element.
type Style struct {
	Scale  int    // text scale (1 small, 2 normal, 3+ big); 0 means 2
	Color  string // a palette name: "blue", "green", "red", "grey", "white", "black"…
	Filled bool   // draw a filled background (buttons, icons, bubbles)
}

// Element is one thing drawn on the screen. Tap and LongPress are nil when
// touching it does nothing.
type Element struct {
	Kind      Kind
	Label     string
	Box       Box
	Style     Style
	Tap       func(p *Phone) `json:"-"`
	LongPress func(p *Phone) `json:"-"`
	fixed     bool           // not scrolled with the page (title bars, tab bars)
	hidden    bool           // a touch target that is not drawn (a whole table row)
}

// Screen geometry shared by the pages, in screen fractions.
const (
	charWidth     = 0.0292 // one character at text scale 2 (7 px font ×2 on a 480 px wide screen)
	lineHeight    = 0.026  // one line at text scale 2 (13 px ×2 on a 1040 px tall screen)
	marginX       = 0.06
	statusBarH    = 0.05
	titleTop      = 0.065
	contentTop    = 0.14 // below the title bar: where scrolled content starts
	contentBottom = 0.90 // above the tab bar / input bar
	rowHeight     = 0.065
)

// textEl is a text element whose box fits its label at the given scale.
func textEl(label string, x, y float64, scale int) Element {
	if scale == 0 {
		scale = 2
	}
	f := float64(scale) / 2
	return Element{Kind: Text, Label: label, Box: Box{x, y, x + float64(len([]rune(label)))*charWidth*f, y + lineHeight*f}, Style: Style{Scale: scale}}
}

// centered is textEl centred on x.
func centered(label string, cx, y float64, scale int) Element {
	e := textEl(label, 0, y, scale)
	w := e.Box.R - e.Box.L
	e.Box.L, e.Box.R = cx-w/2, cx+w/2
	return e
}

// rightAligned is textEl ending at x.
func rightAligned(label string, right, y float64, scale int) Element {
	e := textEl(label, 0, y, scale)
	w := e.Box.R - e.Box.L
	e.Box.L, e.Box.R = right-w, right
	return e
}

func (e Element) onTap(f func(p *Phone)) Element { e.Tap = f; return e }
func (e Element) color(c string) Element         { e.Style.Color = c; return e }
func (e Element) filled(c string) Element        { e.Style.Color = c; e.Style.Filled = true; return e }
func (e Element) pinned() Element                { e.fixed = true; return e }

// rowTarget is an undrawn touch target across a whole table row.
func rowTarget(y float64, f func(p *Phone)) Element {
	return Element{Box: Box{0, y - 0.012, 1, y + rowHeight - 0.012}, hidden: true, Tap: f}
}

// icon is an unlabelled element (an app icon, a switch, a status glyph).
func icon(b Box, color string) Element {
	return Element{Kind: Icon, Box: b, Style: Style{Color: color, Filled: true}}
}
