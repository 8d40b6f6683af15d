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

// A message received now is unread and shows a banner unless its thread is on screen; a
// contact the phone does not know gets a new thread; a locked phone lists it on the lock screen.
func TestReceive(t *testing.T) {
	p := New(Config{})
	p.Receive("Ana", "Are you free on Saturday?")
	if s := p.State(); len(s.Messages.Received) != 1 || s.Messages.Unread != 1 || p.Banners() != 1 {
		t.Fatalf("messages %+v, banners %d: want one unread with a banner", s.Messages, p.Banners())
	}
	tapLabel(t, p, "Messages")
	tapLabel(t, p, "Ana")
	p.Receive("Ana", "Say yes")
	if s := p.State(); s.Messages.Unread != 0 || p.Banners() != 1 {
		t.Fatalf("on Ana's thread: unread %d, banners %d, want 0 and still 1", s.Messages.Unread, p.Banners())
	}
	p.Receive("Dan", "hello")
	p.Lock()
	found := false
	for _, e := range p.Screen() {
		found = found || e.Label == "Dan: hello"
	}
	if s := p.State(); !found || s.Messages.Unread != 1 || p.Banners() != 2 || s.Messages.Received[2].Contact != "Dan" {
		t.Fatalf("a new contact: found on the lock screen %v, messages %+v, banners %d", found, s.Messages, p.Banners())
	}
}
