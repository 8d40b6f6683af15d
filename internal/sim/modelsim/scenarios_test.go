package modelsim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// simRig is a rigsim rig behind HTTP with an MCP session to it.
type simRig struct {
	url string
	cs  *mcp.ClientSession
}

func startSimRig(t *testing.T, cfg rigsim.Config) simRig {
	t.Helper()
	srv := httptest.NewServer(rigsim.New("scenario", cfg).Handler())
	t.Cleanup(srv.Close)
	c := mcp.NewClient(&mcp.Implementation{Name: "driver", Version: "0"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect to rigsim: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return simRig{url: srv.URL, cs: cs}
}

func (r simRig) state(t *testing.T) phone.State {
	t.Helper()
	resp, err := http.Get(r.url + "/api/sim/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s phone.State
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (r simRig) advance(t *testing.T, seconds int) {
	t.Helper()
	resp, err := http.Post(r.url+"/api/sim/advance", "application/json", strings.NewReader(`{"seconds":`+itoa(seconds)+`}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("advance the rig's clock: %v %v", err, resp)
	}
	resp.Body.Close()
}

// message makes a message arrive on the rig's phone now, as the wake end-to-end test does.
func (r simRig) message(t *testing.T, from, text string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"from": from, "text": text})
	resp, err := http.Post(r.url+"/api/sim/message", "application/json", strings.NewReader(string(body)))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a message to the rig's phone: %v %v", err, resp)
	}
	resp.Body.Close()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Each built-in scenario, played against rigsim, ends with the sentinel it names and leaves
// the phone in the state the task implies.
func TestScenariosAgainstRigsim(t *testing.T) {
	locked := rigsim.Config{Phone: rigsim.PhoneConfig{Locked: true}}
	wrongPasscode := rigsim.Config{Phone: rigsim.PhoneConfig{Locked: true, Passcode: "246810"}}
	cases := []struct {
		name    string
		model   string
		trigger string
		cfg     rigsim.Config
		stream  bool
		want    string
		check   func(t *testing.T, s phone.State)
	}{
		{"timer", "sim/timer", "Set a 5 minute timer.", rigsim.Config{}, false, "DONE", func(t *testing.T, s phone.State) {
			if !s.Timer.Running || s.Timer.DurationSeconds != 300 || s.Timer.RemainingSeconds <= 0 {
				t.Errorf("timer = %+v, want a running 5-minute timer", s.Timer)
			}
		}},
		{"timer on a locked phone", "sim/timer", "Set a 5 minute timer.", locked, true, "DONE", func(t *testing.T, s phone.State) {
			if s.Locked || !s.Timer.Running || s.Timer.DurationSeconds != 300 {
				t.Errorf("locked=%v timer=%+v, want unlocked with a running 5-minute timer", s.Locked, s.Timer)
			}
		}},
		{"wifi", "modelsim", "[scenario:wifi] Turn off Wi-Fi.", rigsim.Config{}, true, "DONE", func(t *testing.T, s phone.State) {
			if s.WiFi {
				t.Error("Wi-Fi is still on")
			}
		}},
		{"sold out", "sim/soldout", "Buy me headphones.", rigsim.Config{}, false, "FAIL", func(t *testing.T, s phone.State) {
			if len(s.Shop.Cart) != 0 || len(s.Shop.Orders) != 0 {
				t.Errorf("shop = %+v, want nothing bought", s.Shop)
			}
			if s.Page != "Shop/shop.product" || s.Clipboard != "headphones" {
				t.Errorf("page=%q clipboard=%q, want the product page reached by a pasted search", s.Page, s.Clipboard)
			}
		}},
		{"shop", "sim/shop", "Order coffee beans.", rigsim.Config{}, true, "DONE", func(t *testing.T, s phone.State) {
			if len(s.Shop.Orders) != 1 || s.Shop.Orders[0].Lines[0].Name != "Coffee Beans" || len(s.Shop.Cart) != 0 {
				t.Errorf("shop = %+v, want one order of Coffee Beans", s.Shop)
			}
		}},
		{"idle", "sim/idle", "Check for new messages.", rigsim.Config{}, false, "IDLE", func(t *testing.T, s phone.State) {
			if len(s.Messages.Sent) != 0 {
				t.Errorf("sent %+v, want nothing", s.Messages.Sent)
			}
		}},
		{"stuck", "sim/stuck", "Set a timer.", wrongPasscode, true, "STUCK", func(t *testing.T, s phone.State) {
			if !s.Locked || s.Timer.Running {
				t.Errorf("locked=%v timer=%+v, want a phone still locked and untouched", s.Locked, s.Timer)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rig := startSimRig(t, c.cfg)
			d := newDriver(t, startModel(t, builtin(t)), c.model, rig.cs, c.stream)
			end := d.play(c.trigger)
			if end.status != c.want {
				t.Fatalf("session ended %s (%q), want %s", end.status, end.recap, c.want)
			}
			if d.rejected != 0 {
				t.Errorf("%d turns were malformed", d.rejected)
			}
			c.check(t, rig.state(t))
		})
	}
}

// The WAIT case: the message is really sent; a follow-up before Ana answers cannot finish;
// once she has, the follow-up reads her answer and ends DONE.
func TestMessageWaitThenFollowUp(t *testing.T) {
	rig := startSimRig(t, rigsim.Config{})
	llm := startModel(t, builtin(t))

	d := newDriver(t, llm, "sim/message", rig.cs, true)
	first := d.play("Ask Ana what time dinner is tomorrow.")
	if first.status != "WAIT" {
		t.Fatalf("first session ended %s (%q), want WAIT", first.status, first.recap)
	}
	if len(d.engineCalls) != 1 || d.engineCalls[0].Function.Name != "create_job" {
		t.Fatalf("engine calls = %+v, want one create_job for the follow-up", d.engineCalls)
	}
	var job struct{ ID, Kind, Schedule, Context string }
	json.Unmarshal([]byte(d.engineCalls[0].Function.Arguments), &job)
	want := time.Now().UTC().Add(20 * time.Minute)
	if f := strings.Fields(job.Schedule); len(f) != 5 || f[1] != itoa(want.Hour()) || f[2] != itoa(want.Day()) || job.Kind != "one-time" || !strings.Contains(job.Context, "waiting for Ana's reply") {
		t.Fatalf("create_job %+v, want a one-time job about 20 minutes from now", job)
	}
	s := rig.state(t)
	if len(s.Messages.Sent) != 1 || s.Messages.Sent[0].Contact != "Ana" || s.Messages.Sent[0].Text != "What time is dinner tomorrow?" {
		t.Fatalf("sent = %+v, want the question to Ana", s.Messages.Sent)
	}
	if s.Messages.Pending != 1 || len(s.Messages.Received) != 0 {
		t.Fatalf("messages = %+v, want Ana's answer still pending", s.Messages)
	}

	followUp := "Follow-up of an earlier session. Its recap: " + first.recap
	early := newDriver(t, llm, "sim/message", rig.cs, false).play(followUp)
	if early.status != "STUCK" {
		t.Fatalf("a follow-up before the answer ended %s (%q), want STUCK", early.status, early.recap)
	}

	rig.advance(t, 300)
	late := newDriver(t, llm, "sim/message", rig.cs, false).play(followUp)
	if late.status != "DONE" || !strings.Contains(late.recap, "7pm") {
		t.Fatalf("the follow-up ended %s (%q), want DONE with Ana's answer", late.status, late.recap)
	}
	if s := rig.state(t); len(s.Messages.Received) != 1 || !strings.Contains(s.Messages.Received[0].Text, "7pm at Luigi's") {
		t.Fatalf("received = %+v, want Ana's answer", s.Messages.Received)
	}
}

// The triggers of the runs a rig's wake-ups start: they carry the watch's reason.
const (
	bannerTrigger = "Woken by the rig's watch: notification banner appeared at top of screen"
	idleTrigger   = "Woken by the rig's watch: idle check-in (no wake for 30+ min)"
	// saturday is the message the wake scenario expects, as the wake end-to-end test sends it.
	saturday = "Are you free on Saturday?"
)

// The wake scenario is not in TestScenariosAgainstRigsim's table: its banner
// session reads a message that must be on the phone before it plays, as the
// watch's wake comes from it. So it is played here, the message posted first;
// and without the message, its check fails the session rather than trusting
// the recap.
func TestWakeScenarioAgainstRigsim(t *testing.T) {
	llm := startModel(t, builtin(t))
	t.Run("a banner: Ana's new message is read", func(t *testing.T) {
		rig := startSimRig(t, rigsim.Config{})
		rig.message(t, "Ana", saturday)
		d := newDriver(t, llm, "sim/wake", rig.cs, true)
		end := d.play(bannerTrigger)
		if end.status != "DONE" || end.recap != "Read Ana's new message: "+saturday || d.rejected != 0 {
			t.Fatalf("session ended %s (%q), %d turns rejected; want DONE with Ana's message", end.status, end.recap, d.rejected)
		}
		s := rig.state(t)
		if s.Page != "Messages/messages.thread" || s.Messages.Unread != 0 || len(s.Messages.Sent) != 0 {
			t.Errorf("page=%q messages=%+v, want Ana's thread open, nothing unread, nothing sent", s.Page, s.Messages)
		}
	})
	t.Run("a banner with no such message", func(t *testing.T) {
		rig := startSimRig(t, rigsim.Config{})
		end := newDriver(t, llm, "sim/wake", rig.cs, false).play(bannerTrigger)
		if end.status != "STUCK" || !strings.Contains(end.recap, saturday) {
			t.Fatalf("session ended %s (%q), want STUCK: the message never appeared", end.status, end.recap)
		}
	})
	t.Run("an idle check-in", func(t *testing.T) {
		rig := startSimRig(t, rigsim.Config{})
		end := newDriver(t, llm, "sim/wake", rig.cs, false).play(idleTrigger)
		if end.status != "IDLE" {
			t.Fatalf("session ended %s (%q), want IDLE", end.status, end.recap)
		}
		if s := rig.state(t); s.Page != "Messages/messages.root" || len(s.Messages.Sent) != 0 {
			t.Errorf("page=%q sent=%+v, want Messages open and nothing sent", s.Page, s.Messages.Sent)
		}
	})
}

// Every built-in scenario is played against rigsim by one of the tests
// above; a new one must be added to one of them, and here.
func TestEveryBuiltinScenarioIsPlayed(t *testing.T) {
	played := []string{
		"timer", "wifi", "soldout", "shop", "idle", "stuck", // TestScenariosAgainstRigsim
		"message", // TestMessageWaitThenFollowUp
		"wake",    // TestWakeScenarioAgainstRigsim
	}
	for _, name := range builtin(t).Names() {
		if !slices.Contains(played, name) {
			t.Errorf("built-in scenario %s is played against rigsim by no test", name)
		}
	}
}
