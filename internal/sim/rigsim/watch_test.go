package rigsim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// watch reads GET /api/phone/watch at base (a rig's root) and checks its
// shape: exactly the two keys PhysiClaw writes.
func watch(t *testing.T, base string) Watch {
	t.Helper()
	var raw map[string]any
	getJSON(t, base+"/api/phone/watch", &raw)
	if _, ok := raw["wake"].(bool); !ok || len(raw) != 2 {
		t.Fatalf("GET /api/phone/watch = %v, want {\"wake\": bool, \"reason\": string}", raw)
	}
	if _, ok := raw["reason"].(string); !ok {
		t.Fatalf("GET /api/phone/watch = %v, want {\"wake\": bool, \"reason\": string}", raw)
	}
	return Watch{Wake: raw["wake"].(bool), Reason: raw["reason"].(string)}
}

// raisedWake is the wake GET /api/sim/state reports.
func raisedWake(t *testing.T, base string) WakeState {
	t.Helper()
	var s SimState
	getJSON(t, base+"/api/sim/state", &s)
	return s.Wake
}

var (
	noWake     = Watch{}
	bannerWake = Watch{Wake: true, Reason: WakeBanner}
)

const saturday = `{"from": "Ana", "text": "Are you free on Saturday?"}`

func expectWatch(t *testing.T, base string, want Watch, when string) {
	t.Helper()
	if got := watch(t, base); got != want {
		t.Fatalf("%s: watch = %+v, want %+v", when, got, want)
	}
}

// A message arriving raises one wake: the first read reports it and
// consumes it, the next reads nothing until something new happens.
func TestWatchMessageWakesOnce(t *testing.T) {
	tr := startRig(t, Config{})
	expectWatch(t, tr.url, noWake, "a fresh phone")
	if w := raisedWake(t, tr.url); w.Raised || w.Reason != "" {
		t.Fatalf("state wake on a fresh phone = %+v", w)
	}

	r := postJSON(t, tr.url+"/api/sim/message", saturday)
	var s phone.State
	if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&s) != nil {
		t.Fatalf("POST /api/sim/message: %s", r.Status)
	}
	want := phone.MessageRecord{Contact: "Ana", Text: "Are you free on Saturday?", At: s.Clock}
	if len(s.Messages.Received) != 1 || s.Messages.Received[0] != want || s.Messages.Unread != 1 {
		t.Fatalf("POST /api/sim/message answered messages %+v, want Ana's message received now, unread", s.Messages)
	}
	if w := raisedWake(t, tr.url); w != (WakeState{Raised: true, Reason: WakeBanner}) {
		t.Fatalf("state wake after the message = %+v, want raised with the banner reason", w)
	}
	if w := raisedWake(t, tr.url); !w.Raised {
		t.Fatal("reading the state consumed the wake")
	}
	expectWatch(t, tr.url, bannerWake, "after the message")
	expectWatch(t, tr.url, noWake, "the second read")
	if w := raisedWake(t, tr.url); w.Raised || w.Reason != "" {
		t.Fatalf("state wake after the read = %+v, want none", w)
	}

	// Two messages before a read are one wake.
	postJSON(t, tr.url+"/api/sim/message", `{"from": "Bob", "text": "Lunch?"}`)
	postJSON(t, tr.url+"/api/sim/message", `{"from": "Bob", "text": "Or dinner?"}`)
	expectWatch(t, tr.url, bannerWake, "after two messages")
	expectWatch(t, tr.url, noWake, "the read after two messages")

	// A contact the phone never talked to gets a thread of their own, with the unread dot.
	postJSON(t, tr.url+"/api/sim/message", `{"from": "Cleo", "text": "New number, it's Cleo"}`)
	expectWatch(t, tr.url, bannerWake, "a new contact's message")
	if s := tr.state(t); s.Messages.Unread != 4 || s.Messages.Received[3].Contact != "Cleo" {
		t.Fatalf("messages = %+v, want Cleo's unread beside the others", s.Messages)
	}
	tr.tapLabel(t, "Messages")
	rows := tr.tapLabel(t, "Cleo").listing(t)
	if !has(rows, "New number, it's Cleo") {
		t.Fatalf("Cleo's thread does not show her message: %+v", rows)
	}
	if s := tr.state(t); s.Messages.Unread != 3 {
		t.Fatalf("unread = %d after opening Cleo's thread, want 3", s.Messages.Unread)
	}
}

// sendToAna opens Ana's thread and sends text; Ana answers after the phone's ReplyAfter.
func sendToAna(t *testing.T, tr *testRig, text string) {
	t.Helper()
	tr.tapLabel(t, "Messages")
	tr.tapLabel(t, "Ana")
	tr.call(t, "send_to_clipboard", map[string]any{"text": text})
	field := find(t, tr.call(t, "peek", nil).listing(t), "iMessage")
	tr.call(t, "long_press", bboxArg(field))
	tr.tapLabel(t, "Paste")
	tr.tapLabel(t, "Send")
	if s := tr.state(t); len(s.Messages.Sent) != 1 || s.Messages.Pending != 1 {
		t.Fatalf("sending to Ana: messages %+v", s.Messages)
	}
}

// A contact's reply that arrives while its thread is not on screen shows a
// banner and raises a wake; one that arrives on screen does not.
func TestWatchReplies(t *testing.T) {
	t.Run("away from the thread", func(t *testing.T) {
		tr := startRig(t, Config{Phone: PhoneConfig{ReplyAfter: Duration(30 * time.Second)}})
		sendToAna(t, tr, "dinner?")
		tr.call(t, "home_screen", nil)
		tr.cs.Close() // the session ends, as a run's does; the watch is polled between runs
		expectWatch(t, tr.url, noWake, "before the reply")
		tr.rig.Advance(time.Minute)
		if s := tr.state(t); len(s.Messages.Received) != 1 || s.Messages.Unread != 1 {
			t.Fatalf("after ReplyAfter: messages %+v, want Ana's reply, unread", s.Messages)
		}
		expectWatch(t, tr.url, bannerWake, "after the reply")
		expectWatch(t, tr.url, noWake, "the second read")
	})
	t.Run("on the thread", func(t *testing.T) {
		tr := startRig(t, Config{Phone: PhoneConfig{ReplyAfter: Duration(30 * time.Second)}})
		sendToAna(t, tr, "dinner?")
		tr.cs.Close()
		tr.rig.Advance(time.Minute)
		if s := tr.state(t); len(s.Messages.Received) != 1 || s.Messages.Unread != 0 {
			t.Fatalf("after ReplyAfter: messages %+v, want Ana's reply, read on screen", s.Messages)
		}
		postJSON(t, tr.url+"/api/sim/message", `{"from": "Ana", "text": "Also, bring wine"}`)
		if s := tr.state(t); len(s.Messages.Received) != 2 || s.Messages.Unread != 0 {
			t.Fatalf("a message on screen: messages %+v, want it read", s.Messages)
		}
		if w := raisedWake(t, tr.url); w.Raised {
			t.Fatalf("state wake = %+v, want none for messages that arrived on screen", w)
		}
		expectWatch(t, tr.url, noWake, "messages on the thread on screen")
	})
}

// A rig that is not set up, or that a session holds, answers no wake and
// keeps the raised one for a read once it is set up, or free again.
func TestWatchKeepsTheWakeWhileItCannotAnswer(t *testing.T) {
	for _, key := range []string{"camera", "calibrated", "ready", "assistive_touch"} {
		t.Run("not set up: "+key+" false", func(t *testing.T) {
			tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{key: false}}})
			postJSON(t, tr.url+"/api/sim/message", saturday)
			expectWatch(t, tr.url, noWake, "a rig not set up")
			if w := raisedWake(t, tr.url); !w.Raised {
				t.Fatal("reading the watch of a rig not set up consumed the wake")
			}
			req, _ := http.NewRequest(http.MethodDelete, tr.url+"/api/sim/faults", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			expectWatch(t, tr.url, bannerWake, "set up again")
		})
	}
	t.Run("a session holds the rig", func(t *testing.T) {
		tr := startRig(t, Config{})
		tr.call(t, "peek", nil)
		postJSON(t, tr.url+"/api/sim/message", saturday)
		expectWatch(t, tr.url, noWake, "during a session")
		if w := raisedWake(t, tr.url); !w.Raised {
			t.Fatal("reading the watch during a session consumed the wake")
		}
		tr.cs.Close()
		expectWatch(t, tr.url, bannerWake, "after the session")
		expectWatch(t, tr.url, noWake, "the second read")
	})
	t.Run("disconnected", func(t *testing.T) {
		tr := startRig(t, Config{})
		postJSON(t, tr.url+"/api/sim/message", saturday)
		postJSON(t, tr.url+"/api/sim/faults", `{"disconnected": true}`)
		if resp, err := http.Get(tr.url + "/api/phone/watch"); err == nil {
			resp.Body.Close()
			t.Fatalf("GET /api/phone/watch on a disconnected rig answered %s, want the connection dropped", resp.Status)
		}
		if w := raisedWake(t, tr.url); !w.Raised {
			t.Fatal("a dropped watch request consumed the wake")
		}
	})
	t.Run("a restart forgets it", func(t *testing.T) {
		tr := startRig(t, Config{})
		postJSON(t, tr.url+"/api/sim/message", saturday)
		postJSON(t, tr.url+"/api/sim/restart", "")
		expectWatch(t, tr.url, noWake, "after a restart")
		postJSON(t, tr.url+"/api/sim/message", saturday)
		expectWatch(t, tr.url, bannerWake, "a message after a restart")
	})
}

// POST /api/sim/wake raises a wake with its reason, or the idle check-in;
// the latest raise is the one read.
func TestSimWake(t *testing.T) {
	tr := startRig(t, Config{})
	r := postJSON(t, tr.url+"/api/sim/wake", "")
	var w WakeState
	if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&w) != nil || w != (WakeState{Raised: true, Reason: WakeIdle}) {
		t.Fatalf("POST /api/sim/wake with no body: %s %+v, want the idle check-in raised", r.Status, w)
	}
	if s := tr.state(t); len(s.Messages.Received) != 0 || s.Messages.Unread != 0 {
		t.Fatalf("an idle wake changed the phone: %+v", s.Messages)
	}
	expectWatch(t, tr.url, Watch{Wake: true, Reason: "idle check-in (no wake for 30+ min)"}, "an idle wake")
	expectWatch(t, tr.url, noWake, "the read after an idle wake")

	postJSON(t, tr.url+"/api/sim/wake", `{}`)
	expectWatch(t, tr.url, Watch{Wake: true, Reason: WakeIdle}, "POST {}")

	postJSON(t, tr.url+"/api/sim/message", saturday)
	postJSON(t, tr.url+"/api/sim/wake", `{"reason": "screen content changed in lower half"}`)
	if w := raisedWake(t, tr.url); w != (WakeState{Raised: true, Reason: "screen content changed in lower half"}) {
		t.Fatalf("state wake = %+v, want the later reason", w)
	}
	expectWatch(t, tr.url, Watch{Wake: true, Reason: "screen content changed in lower half"}, "a wake with a reason")
	expectWatch(t, tr.url, noWake, "the second read")

	// A banner after a raised wake is the latest change.
	postJSON(t, tr.url+"/api/sim/wake", `{"reason": "new red badge appeared on dock app"}`)
	postJSON(t, tr.url+"/api/sim/message", saturday)
	expectWatch(t, tr.url, bannerWake, "a message after a raised wake")
}

// Bad bodies are refused with what is wrong, and change nothing.
func TestWatchBadBodies(t *testing.T) {
	tr := startRig(t, Config{})
	for _, c := range []struct{ route, body, says string }{
		{"message", ``, `missing "from" (the contact) and "text" (the message)`},
		{"message", `{}`, `missing "from" (the contact) and "text" (the message)`},
		{"message", `{"from": "Ana"}`, `missing "text" (the message)`},
		{"message", `{"from": "Ana", "text": "  "}`, `missing "text" (the message)`},
		{"message", `{"text": "Are you free on Saturday?"}`, `missing "from" (the contact)`},
		{"message", `{"from": " ", "text": "hi"}`, `missing "from" (the contact)`},
		{"message", `{"from": "Ana", "text": "hi", "urgent": true}`, `unknown field "urgent"`},
		{"message", `{"from": 7, "text": "hi"}`, `cannot unmarshal number`},
		{"message", `not json`, `invalid character`},
		{"wake", `{"why": "because"}`, `unknown field "why"`},
		{"wake", `{"reason": 1}`, `cannot unmarshal number`},
		{"wake", `[`, `unexpected EOF`},
	} {
		r := postJSON(t, tr.url+"/api/sim/"+c.route, c.body)
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.says) || !strings.HasPrefix(string(b), c.route+": ") {
			t.Errorf("POST /api/sim/%s %s: %s %q, want 400 saying %q", c.route, c.body, r.Status, b, c.says)
		}
		if c.route == "message" && !strings.Contains(string(b), `want {"from": "Ana", "text": "Are you free on Saturday?"}`) {
			t.Errorf("POST /api/sim/message %s: %q, want the body it takes", c.body, b)
		}
	}
	if s := tr.state(t); len(s.Messages.Received) != 0 {
		t.Fatalf("a refused message arrived: %+v", s.Messages)
	}
	expectWatch(t, tr.url, noWake, "after refused bodies")
}

// In a farm each rig has its own watch, under /rigs/<name>/, and a wake on
// one is no other's.
func TestFarmWatchIsPerRig(t *testing.T) {
	farm := NewFarm(3, Config{})
	srv := httptest.NewServer(farm.Handler())
	defer srv.Close()
	rig := func(i int) string { return srv.URL + "/rigs/rig-" + strconv.Itoa(i) }

	if r := postJSON(t, rig(1)+"/api/sim/message", saturday); r.StatusCode != http.StatusOK {
		t.Fatalf("POST rig-1's message: %s", r.Status)
	}
	postJSON(t, rig(2)+"/api/sim/wake", `{"reason": "screen content changed in lower half"}`)
	if s := farm.Rig("rig-0").State(); len(s.Messages.Received) != 0 {
		t.Fatalf("rig-1's message arrived on rig-0: %+v", s.Messages)
	}
	expectWatch(t, rig(0), noWake, "rig-0")
	expectWatch(t, rig(1), bannerWake, "rig-1")
	if w := raisedWake(t, rig(2)); w != (WakeState{Raised: true, Reason: "screen content changed in lower half"}) {
		t.Fatalf("rig-2's state wake = %+v after rig-1's was read", w)
	}
	expectWatch(t, rig(2), Watch{Wake: true, Reason: "screen content changed in lower half"}, "rig-2")
	for i := range 3 {
		expectWatch(t, rig(i), noWake, "the second read of rig-"+strconv.Itoa(i))
	}
	resp, err := http.Get(srv.URL + "/api/phone/watch")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /api/phone/watch at the farm's root: %s, want 404 (each rig has its own)", resp.Status)
	}
}

// GET /api/sim/state carries the raised wake under "wake", after the ledger.
func TestSimStateReportsTheWake(t *testing.T) {
	tr := startRig(t, Config{})
	postJSON(t, tr.url+"/api/sim/wake", `{"reason": "new red badge appeared on dock app"}`)
	var raw map[string]json.RawMessage
	getJSON(t, tr.url+"/api/sim/state", &raw)
	var w map[string]any
	if err := json.Unmarshal(raw["wake"], &w); err != nil || !reflect.DeepEqual(w, map[string]any{"raised": true, "reason": "new red badge appeared on dock app"}) {
		t.Fatalf("state wake = %s, want {\"raised\": true, \"reason\": …}", raw["wake"])
	}
	if _, ok := raw["sessions"]; !ok {
		t.Fatal("the state lost the ledger")
	}
}
