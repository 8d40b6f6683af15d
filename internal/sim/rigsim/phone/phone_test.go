package phone

import (
	"testing"
	"time"
)

// tapLabel taps the centre of the first drawn element labelled label.
func tapLabel(t *testing.T, p *Phone, label string) {
	t.Helper()
	for _, e := range p.Screen() {
		if e.Label == label {
			p.Tap(e.Box.Center())
			return
		}
	}
	t.Fatalf("no %q on %s", label, p.Page())
}

func TestSystemGestures(t *testing.T) {
	p := New(Config{})
	tapLabel(t, p, "Settings")
	tapLabel(t, p, "Wi-Fi")
	p.Swipe(0.02, 0.5, "right", 0.3) // the edge swipe goes back
	if p.Page() != "Settings/settings.root" {
		t.Fatalf("after the edge swipe: %s", p.Page())
	}
	p.Swipe(0.5, 0.97, "up", 0.5) // the bottom-edge swipe goes home
	if p.Page() != "home" {
		t.Fatalf("after the home swipe: %s", p.Page())
	}
	p.Home()
	if p.Page() != "switcher" {
		t.Fatalf("home from home: %s", p.Page())
	}
	p.Swipe(0.2, 0.25, "up", 0.5) // swipe the Settings card away
	if s := p.State(); len(s.Running) != 0 {
		t.Fatalf("after swiping the card up: running %v", s.Running)
	}
}

func TestScrollIsClamped(t *testing.T) {
	p := New(Config{})
	tapLabel(t, p, "Settings")
	for range 10 {
		p.Swipe(0.5, 0.6, "up", 0.9)
	}
	bottom := p.Screen()
	p.Swipe(0.5, 0.6, "up", 0.9)
	if len(p.Screen()) != len(bottom) {
		t.Fatal("scrolling past the end moved the page")
	}
	for range 10 {
		p.Swipe(0.5, 0.4, "down", 0.9)
	}
	tapLabel(t, p, "Airplane Mode") // back at the top; Airplane Mode opens nothing
	if p.Page() != "Settings/settings.root" {
		t.Fatalf("page %s", p.Page())
	}
}

func TestCrashAndAutoLock(t *testing.T) {
	p := New(Config{AutoLock: 30 * time.Second})
	tapLabel(t, p, "Shop")
	if !p.Crash("Shop") || p.Page() != "home" || p.Crash("Shop") {
		t.Fatal("a crash should close the app once")
	}
	p.Advance(29 * time.Second)
	if p.Locked() {
		t.Fatal("locked before the auto-lock delay")
	}
	p.Advance(2 * time.Second)
	if !p.Locked() || p.Page() != "lock" {
		t.Fatal("did not auto-lock")
	}
	p.Wake()
	p.EnterPasscode(DefaultPasscode)
	if p.Locked() {
		t.Fatal("the right passcode did not unlock")
	}
}

func TestSoldOutCannotBeBought(t *testing.T) {
	p := New(Config{})
	tapLabel(t, p, "Shop")
	tapLabel(t, p, "Headphones")
	for _, e := range p.Screen() {
		if e.Label == "Add to Cart" {
			t.Fatal("a sold-out product offers Add to Cart")
		}
	}
	tapLabel(t, p, "Sold Out")
	if s := p.State(); len(s.Shop.Cart) != 0 {
		t.Fatalf("cart = %+v", s.Shop.Cart)
	}
}
