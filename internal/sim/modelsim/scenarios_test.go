package modelsim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
