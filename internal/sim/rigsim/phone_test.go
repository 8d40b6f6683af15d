package rigsim

import (
	"strings"
	"testing"
)

// The simulated phone behaves like a phone: taps act on what is drawn, swipes scroll,
// back, home, the switcher, force quit, unlock and paste work.
func TestPhoneBehaves(t *testing.T) {
	t.Run("swipe scrolls a long list", func(t *testing.T) {
		tr := startRig(t, Config{})
		rows := tr.tapLabel(t, "Settings").listing(t)
		if has(rows, "Passwords") {
			t.Fatal("the last row is visible before scrolling")
		}
		res := tr.call(t, "swipe", map[string]any{"bbox": []float64{0.3, 0.6, 0.5, 0.65}, "direction": "up", "size": "xl"})
		if !strings.Contains(res.texts[0], verdictChanged) || !has(res.listing(t), "Passwords") {
			t.Fatalf("after swiping up: %s", res.texts[0])
		}
		res = tr.call(t, "swipe", map[string]any{"bbox": []float64{0.3, 0.5, 0.5, 0.55}, "direction": "down", "size": "xxl"})
		if !has(res.listing(t), "Airplane Mode") {
			t.Fatal("swiping down did not scroll back to the top")
		}
	})
	t.Run("back pops a page and stops at the root", func(t *testing.T) {
		tr := startRig(t, Config{})
		tr.tapLabel(t, "Settings")
		tr.tapLabel(t, "Wi-Fi")
		if p := tr.state(t).Page; p != "Settings/settings.wifi" {
			t.Fatalf("page %q", p)
		}
		tr.call(t, "go_back", nil)
		if p := tr.state(t).Page; p != "Settings/settings.root" {
			t.Fatalf("after back: page %q", p)
		}
		if res := tr.call(t, "go_back", nil); !strings.Contains(res.texts[0], verdictUnchanged) {
			t.Fatalf("back at the root: %s", res.texts[0])
		}
	})
	t.Run("home, switcher, resume, force quit", func(t *testing.T) {
		tr := startRig(t, Config{})
		tr.tapLabel(t, "Settings")
		tr.tapLabel(t, "Wi-Fi")
		tr.call(t, "home_screen", nil)
		if s := tr.state(t); s.Page != "home" || len(s.Running) != 1 {
			t.Fatalf("after home: %+v", s)
		}
		tr.call(t, "home_screen", nil)
		if p := tr.state(t).Page; p != "switcher" {
			t.Fatalf("home from home: page %q, want the switcher", p)
		}
		tr.tapLabel(t, "Settings")
		if p := tr.state(t).Page; p != "Settings/settings.wifi" {
			t.Fatalf("resumed on %q, want where it was left", p)
		}
		if res := tr.call(t, "force_quit", nil); !strings.HasPrefix(res.texts[0], "Force-quit current app | "+verdictChanged) {
			t.Fatalf("force_quit: %s", res.texts[0])
		}
		if s := tr.state(t); s.Page != "home" || len(s.Running) != 0 {
			t.Fatalf("after force quit: %+v", s)
		}
		tr.tapLabel(t, "Settings")
		if p := tr.state(t).Page; p != "Settings/settings.root" {
			t.Fatalf("reopened on %q, want the root after a force quit", p)
		}
	})
	t.Run("the lock screen, its keypad and unlock_phone", func(t *testing.T) {
		tr := startRig(t, Config{Phone: PhoneConfig{Locked: true}})
		rows := tr.call(t, "peek", nil).listing(t)
		if !has(rows, "Swipe up to unlock") || has(rows, "Clock") {
			t.Fatal("a locked phone shows its apps")
		}
		if res := tr.tapLabel(t, "Swipe up to unlock"); !strings.Contains(res.texts[0], verdictUnchanged) {
			t.Fatal("tapping the lock screen did something")
		}
		tr.call(t, "swipe", map[string]any{"bbox": []float64{0.4, 0.8, 0.6, 0.85}, "direction": "up"})
		for range 6 {
			tr.tapLabel(t, "1")
		}
		if tr.state(t).Locked {
			t.Fatal("typing the passcode on the keypad did not unlock")
		}
		tr.rig.LockPhone()
		res := tr.call(t, "unlock_phone", nil)
		if !strings.HasPrefix(res.texts[0], "Passcode entered | "+verdictChanged+" — ") || tr.state(t).Locked {
			t.Fatalf("unlock_phone: %s", res.texts[0])
		}
	})
	t.Run("a wrong passcode keeps the phone locked", func(t *testing.T) {
		tr := startRig(t, Config{Phone: PhoneConfig{Locked: true, Passcode: "246810"}})
		res := tr.call(t, "unlock_phone", nil)
		if !strings.HasPrefix(res.texts[0], "Passcode entered") || !has(res.listing(t), "Wrong Passcode") || !tr.state(t).Locked {
			t.Fatalf("unlock with the wrong code: %s", res.text())
		}
	})
	t.Run("paste into a field and send", func(t *testing.T) {
		tr := startRig(t, Config{})
		tr.tapLabel(t, "Messages")
		tr.tapLabel(t, "Ana")
		tr.call(t, "send_to_clipboard", map[string]any{"text": "hi Ana"})
		rows := tr.call(t, "peek", nil).listing(t)
		res := tr.call(t, "long_press", bboxArg(find(t, rows, "iMessage")))
		if !has(res.listing(t), "Paste") {
			t.Fatal("long-pressing the field opened no Paste menu")
		}
		tr.tapLabel(t, "Paste")
		tr.tapLabel(t, "Send")
		s := tr.state(t)
		if len(s.Messages.Sent) != 1 || s.Messages.Sent[0].Text != "hi Ana" || s.Messages.Pending != 1 {
			t.Fatalf("messages = %+v", s.Messages)
		}
	})
	t.Run("a reply arrives after the configured delay, unread when away", func(t *testing.T) {
		tr := startRig(t, Config{Phone: PhoneConfig{ReplyAfter: Duration(30e9)}})
		tr.tapLabel(t, "Messages")
		tr.tapLabel(t, "Ana")
		tr.call(t, "send_to_clipboard", map[string]any{"text": "dinner?"})
		field := find(t, tr.call(t, "peek", nil).listing(t), "iMessage")
		res := tr.call(t, "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "long_press", "arg": field.box[:]},
			map[string]any{"tool_name": "tap", "arg": []float64{0.10, 0.86, 0.26, 0.90}}, // where the Paste menu opens
		}})
		if !has(res.listing(t), "dinner?") {
			t.Fatalf("the sequence did not paste: %s", res.text())
		}
		tr.tapLabel(t, "Send")
		tr.call(t, "home_screen", nil)
		if s := tr.state(t); len(s.Messages.Received) != 0 {
			t.Fatalf("the reply came too early: %+v", s.Messages)
		}
		tr.rig.Advance(60e9)
		if s := tr.state(t); len(s.Messages.Received) != 1 || s.Messages.Unread != 1 {
			t.Fatalf("after the delay: %+v", s.Messages)
		}
	})
	t.Run("the timer counts down on the phone's clock", func(t *testing.T) {
		tr := startRig(t, Config{})
		tr.tapLabel(t, "Clock")
		tr.tapLabel(t, "Timers")
		tr.tapLabel(t, "1 min")
		tr.tapLabel(t, "Start")
		if s := tr.state(t).Timer; !s.Running || s.DurationSeconds != 60 {
			t.Fatalf("timer %+v", s)
		}
		tr.rig.Advance(120e9)
		if s := tr.state(t).Timer; s.Running || !s.Fired {
			t.Fatalf("after two minutes: %+v", s)
		}
	})
}
