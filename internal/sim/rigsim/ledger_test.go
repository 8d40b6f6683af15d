package rigsim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// tickClock is a ledger clock that moves a millisecond at every reading, so
// calls made one after the other never share an instant; advance jumps it.
type tickClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func (c *tickClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// ledgerRig serves a rig whose ledger reads a tick clock.
func ledgerRig(t *testing.T, idle time.Duration) (*Rig, string, *tickClock) {
	t.Helper()
	r := New("ledger", Config{SessionIdle: Duration(idle)})
	clk := &tickClock{t: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}
	r.ledger.now = clk.now
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	return r, srv.URL, clk
}

// callerHeaders sends a caller's identity the way the loop's rig client does.
type callerHeaders struct{ c Caller }

func (h callerHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range map[string]string{contract.HeaderRun: h.c.Run, contract.HeaderAttempt: h.c.Attempt, contract.HeaderPod: h.c.Pod} {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

// connectAs opens an MCP session that names itself as c (nothing when c is empty).
func connectAs(t *testing.T, endpoint string, c Caller) *mcp.ClientSession {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "ledger-test", Version: "0"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: callerHeaders{c}}, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func peek(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: contract.ToolPeek})
	if err != nil || res.IsError {
		t.Fatalf("peek: %v %+v", err, res)
	}
}

var (
	runA = Caller{Run: "farm/shop-a", Attempt: "1", Pod: "shop-a-a1"}
	runB = Caller{Run: "farm/shop-b", Attempt: "1", Pod: "shop-b-a1"}
)

// Two sessions overlap when different clients drive one rig at once; one
// attempt reconnecting, or two runs one after the other, do not.
func TestLedgerOverlaps(t *testing.T) {
	// atOnce: b's first call comes between two of a's, a's session still alive.
	atOnce := func(t *testing.T, _ *Rig, a, b *mcp.ClientSession) {
		peek(t, a)
		peek(t, b)
		peek(t, a)
	}
	// oneAfterOther: a drives the rig and closes its session, then b drives it.
	oneAfterOther := func(t *testing.T, r *Rig, a, b *mcp.ClientSession) {
		peek(t, a)
		peek(t, a)
		a.Close()
		if s := r.Ledger().Sessions[0]; s.Open || s.Ended != endedClosed {
			t.Fatalf("after its DELETE a's session is %+v, want closed", s)
		}
		peek(t, b)
	}
	cases := []struct {
		name  string
		a, b  Caller
		drive func(*testing.T, *Rig, *mcp.ClientSession, *mcp.ClientSession)
		want  int
	}{
		{"two runs at once", runA, runB, atOnce, 1},
		{"two attempts of one run at once", runA, Caller{Run: runA.Run, Attempt: "2", Pod: "shop-a-a2"}, atOnce, 1},
		{"an infrastructure retry beside its pod", runA, Caller{Run: runA.Run, Attempt: "1", Pod: "shop-a-a1-r1"}, atOnce, 1},
		{"two clients without headers at once", Caller{}, Caller{}, atOnce, 1},
		{"one attempt reconnecting", runA, runA, atOnce, 0},
		{"two runs one after the other", runA, runB, oneAfterOther, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, url, _ := ledgerRig(t, time.Minute)
			a, b := connectAs(t, url+"/mcp", c.a), connectAs(t, url+"/mcp", c.b)
			c.drive(t, r, a, b)

			var st SimState
			getJSON(t, url+"/api/sim/state", &st)
			if st.Page != "home" || st.SessionIdleSeconds != 60 {
				t.Fatalf("state: page %q, idle %vs: the phone's ground truth and the ledger belong side by side", st.Page, st.SessionIdleSeconds)
			}
			if len(st.Sessions) != 2 || st.SessionsRecorded != 2 {
				t.Fatalf("sessions %+v (%d recorded), want 2", st.Sessions, st.SessionsRecorded)
			}
			sa, sb := st.Sessions[0], st.Sessions[1]
			if sa.Caller != c.a || sb.Caller != c.b || sa.ID != a.ID() || sb.ID != b.ID() || sa.Calls != 2 || sb.Calls != 1 {
				t.Fatalf("sessions %+v, want a's (2 calls) then b's (1 call)", st.Sessions)
			}
			if len(st.Overlaps) != c.want {
				t.Fatalf("overlaps %+v, want %d", st.Overlaps, c.want)
			}
			if c.want == 0 {
				return
			}
			o := st.Overlaps[0]
			if o.A.Seq != sa.Seq || o.B.Seq != sb.Seq || o.A.Caller != c.a || o.B.Caller != c.b || o.A.ID != sa.ID || o.B.ID != sb.ID {
				t.Errorf("overlap names %+v and %+v, want a's and b's sessions", o.A, o.B)
			}
			// b drove the rig only inside a's interval: the overlap is b's interval.
			if !o.From.Equal(sb.FirstCall) || !o.To.Equal(sb.LastCall) || !sa.FirstCall.Before(o.From) || !o.To.Before(sa.LastCall) {
				t.Errorf("overlap %s..%s; a %s..%s, b %s..%s", o.From, o.To, sa.FirstCall, sa.LastCall, sb.FirstCall, sb.LastCall)
			}
		})
	}
}

// A call in flight drives the rig until it ends: a session that starts
// meanwhile overlaps it at once — unless it is the same attempt reconnecting,
// as the loop does when a call outlives its patience.
func TestLedgerCallInFlight(t *testing.T) {
	for _, c := range []struct {
		name string
		b    Caller
		want int
	}{
		{"another run", runB, 1},
		{"the same attempt reconnecting", runA, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A screenshot holds the busy lock for 30 s of real time, until cancelled.
			r := New("ledger", Config{TimeScale: 0.05, Faults: Faults{Latency: map[string]Duration{contract.ToolScreenshot: Duration(10 * time.Minute)}}})
			r.ledger.now = (&tickClock{t: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}).now
			srv := httptest.NewServer(r.Handler())
			defer srv.Close()
			a, b := connectAs(t, srv.URL+"/mcp", runA), connectAs(t, srv.URL+"/mcp", c.b)

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = a.CallTool(ctx, &mcp.CallToolParams{Name: contract.ToolScreenshot})
			}()
			for deadline := time.Now().Add(5 * time.Second); len(r.Ledger().Sessions) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("a's screenshot never reached the rig")
				}
			}
			res, err := b.CallTool(context.Background(), &mcp.CallToolParams{Name: contract.ToolPeek})
			if err != nil || !res.IsError {
				t.Fatalf("b's peek during a's screenshot: %v %+v, want refused busy", err, res)
			}
			inFlight := r.Ledger()
			cancel()
			<-done

			if len(inFlight.Overlaps) != c.want {
				t.Fatalf("while a's call runs: overlaps %+v, want %d (sessions %+v)", inFlight.Overlaps, c.want, inFlight.Sessions)
			}
			if sa, sb := inFlight.Sessions[0], inFlight.Sessions[1]; !sa.Open || sa.Calls != 1 || !sa.LastCall.After(sb.LastCall) {
				t.Fatalf("while a's call runs a's session is %+v, b's %+v: a's should reach now", sa, sb)
			}
			if l := r.Ledger(); len(l.Overlaps) != c.want {
				t.Fatalf("after a's call: overlaps %+v, want %d", l.Overlaps, c.want)
			}
		})
	}
}

// Two clients driving one rig from two goroutines at the same time, on the
// wall clock: one overlap, whatever the busy lock refused.
func TestLedgerTwoClientsAtTheSameTime(t *testing.T) {
	tr := startRig(t, Config{})
	a, b := connectAs(t, tr.url+"/mcp", runA), connectAs(t, tr.url+"/mcp", runB)
	var wg, barrier sync.WaitGroup
	barrier.Add(2)
	for _, cs := range []*mcp.ClientSession{a, b} {
		wg.Go(func() {
			// Both call before the barrier and after it, so each one's
			// interval spans a moment the other's also spans.
			for i := range 2 {
				if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: contract.ToolPeek}); err != nil {
					t.Errorf("peek: %v", err)
				}
				if i == 0 {
					barrier.Done()
					barrier.Wait()
				}
			}
		})
	}
	wg.Wait()
	l := tr.rig.Ledger()
	if len(l.Overlaps) != 1 {
		t.Fatalf("overlaps %+v, want 1; sessions %+v", l.Overlaps, l.Sessions)
	}
	o := l.Overlaps[0]
	if got := map[string]bool{o.A.Run: true, o.B.Run: true}; !got[runA.Run] || !got[runB.Run] || o.To.Before(o.From) {
		t.Fatalf("overlap %+v", o)
	}
}

// A session that goes without a call for the idle window closes at its last
// call; its client's next call opens a new interval.
func TestLedgerIdleWindowClosesASession(t *testing.T) {
	r, url, clk := ledgerRig(t, 10*time.Second)
	a := connectAs(t, url+"/mcp", runA)
	peek(t, a)
	clk.advance(9 * time.Second)
	first := r.Ledger().Sessions[0]
	if !first.Open {
		t.Fatalf("9 s after its call the session is %+v, want open", first)
	}
	clk.advance(2 * time.Second)
	if s := r.Ledger().Sessions[0]; s.Open || s.Ended != endedIdle || !s.LastCall.Equal(first.LastCall) {
		t.Fatalf("11 s after its call the session is %+v, want closed idle at its last call %s", s, first.LastCall)
	}

	// Another run drives the rig while a is silent; a comes back afterwards
	// on the same MCP session: a new interval, and no overlap.
	b := connectAs(t, url+"/mcp", runB)
	peek(t, b)
	b.Close()
	peek(t, a)
	l := r.Ledger()
	if len(l.Sessions) != 3 || len(l.Overlaps) != 0 {
		t.Fatalf("sessions %+v overlaps %+v, want a's two intervals around b's and no overlap", l.Sessions, l.Overlaps)
	}
	if again := l.Sessions[2]; again.ID != first.ID || again.Seq != 3 || !again.Open || again.Calls != 1 || !again.FirstCall.After(l.Sessions[1].LastCall) {
		t.Fatalf("a's call after the window: %+v", again)
	}
}

// The rig's restart ends every session; a session that never called a tool
// is not in the ledger.
func TestLedgerRestartClosesSessions(t *testing.T) {
	r, url, _ := ledgerRig(t, time.Minute)
	a := connectAs(t, url+"/mcp", runA)
	connectAs(t, url+"/mcp", runB) // connects, lists nothing, calls nothing
	peek(t, a)
	postJSON(t, url+"/api/sim/restart", "")
	l := r.Ledger()
	if len(l.Sessions) != 1 || l.Sessions[0].Open || l.Sessions[0].Ended != endedRestart {
		t.Fatalf("sessions after a restart: %+v", l.Sessions)
	}
}

// Closed sessions are forgotten beyond the limit; overlaps never are.
func TestLedgerForgetsClosedSessionsNotOverlaps(t *testing.T) {
	r, url, _ := ledgerRig(t, time.Minute)
	r.ledger.keep = 3
	a, b := connectAs(t, url+"/mcp", runA), connectAs(t, url+"/mcp", runB)
	peek(t, a)
	peek(t, b)
	peek(t, a)
	a.Close()
	b.Close()
	for range 6 {
		cs := connectAs(t, url+"/mcp", runB)
		peek(t, cs)
		cs.Close()
	}
	l := r.Ledger()
	if l.SessionsRecorded != 8 || len(l.Sessions) != 4 || l.Sessions[0].Seq != 5 {
		t.Fatalf("%d recorded, kept %+v: want the last 4", l.SessionsRecorded, l.Sessions)
	}
	if len(l.Overlaps) != 1 || l.Overlaps[0].A.Caller != runA || l.Overlaps[0].B.Caller != runB {
		t.Fatalf("overlaps %+v, want a's and b's kept", l.Overlaps)
	}
}

// An open session keeps the closed sessions it may still overlap.
func TestLedgerKeepsWhatAnOpenSessionMayOverlap(t *testing.T) {
	r, url, _ := ledgerRig(t, time.Minute)
	r.ledger.keep = 1
	long := connectAs(t, url+"/mcp", runA)
	peek(t, long)
	for range 3 {
		cs := connectAs(t, url+"/mcp", runB)
		peek(t, cs)
		cs.Close()
	}
	// Each of those started after long's last call: no overlap yet. long's
	// next call makes all three overlap it; none may have been forgotten.
	peek(t, long)
	if l := r.Ledger(); len(l.Overlaps) != 3 {
		t.Fatalf("overlaps %+v, want 3 (sessions %+v)", l.Overlaps, l.Sessions)
	}
}

// The farm reports every rig's overlaps and their total in one answer.
func TestFarmLedger(t *testing.T) {
	farm := NewFarm(2, Config{})
	for _, r := range farm.Rigs {
		r.ledger.now = (&tickClock{t: time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}).now
	}
	srv := httptest.NewServer(farm.Handler())
	defer srv.Close()
	peek(t, connectAs(t, srv.URL+RigPath("rig-0"), runA))
	a, b := connectAs(t, srv.URL+RigPath("rig-1"), runA), connectAs(t, srv.URL+RigPath("rig-1"), runB)
	peek(t, a)
	peek(t, b)
	peek(t, a)

	var fl FarmLedger
	getJSON(t, srv.URL+"/api/sim/ledger", &fl)
	if fl.Overlaps != 1 || fl.SessionsRecorded != 3 || len(fl.Rigs) != 2 {
		t.Fatalf("farm ledger %+v", fl)
	}
	r0, r1 := fl.Rigs[0], fl.Rigs[1]
	if r0.Name != "rig-0" || r0.Overlaps == nil || len(r0.Overlaps) != 0 || r0.OpenSessions != 1 {
		t.Errorf("rig-0 %+v", r0)
	}
	if r1.Name != "rig-1" || len(r1.Overlaps) != 1 || r1.OpenSessions != 2 || r1.SessionsRecorded != 2 ||
		r1.Overlaps[0].A.Run != runA.Run || r1.Overlaps[0].B.Run != runB.Run {
		t.Errorf("rig-1 %+v", r1)
	}
}
