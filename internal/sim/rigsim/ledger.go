package rigsim

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// The session ledger: the rig's own count of who drove it, the ground truth
// for "two sessions on one phone" that does not depend on the operator's
// Lease (docs/rigsim.md, "The session ledger").
//
// A session is one interval of one MCP session: from its first tool call to
// its last. It is open while the MCP session lives; it closes when the client
// deletes the session, when the rig restarts, or when no call came for the
// idle window — then it ends at its last call, and a later call of the same
// MCP session opens a new interval. A call in flight keeps its session from
// going idle and counts as happening now.
//
// Two sessions overlap when their intervals (closed ranges) intersect, unless
// they are the same client: both named themselves with the loop's headers
// (contract.HeaderRun, HeaderAttempt, HeaderPod) and every one of the three
// is equal. That is one attempt reconnecting after a dropped connection, not
// two sessions on one phone. Different runs, different attempts, or one
// attempt in two pods (an infrastructure retry beside a pod that still runs)
// overlap; a session that sent none of the headers is a client of its own.

// DefaultSessionIdle is how long a session may go without a tool call before
// the ledger closes it. An interval always ends at its last call, so a long
// window never invents an overlap; a short one would miss a loop that was
// silent, waiting for its model (idle timeout up to 300 s,
// presets.LocalIdleTimeout), while another client drove the phone. Ten
// minutes covers such a silence with room to spare.
const DefaultSessionIdle = 10 * time.Minute

// ledgerKeepClosed is how many closed sessions a rig remembers; older ones are
// forgotten once no open session can still overlap them. Overlaps are never
// forgotten.
const ledgerKeepClosed = 100

// How a session ended.
const (
	endedClosed  = "closed"  // the client deleted the MCP session
	endedRestart = "restart" // the rig's server restarted
	endedIdle    = "idle"    // no call for the idle window
)

// Caller is who a session says it is: the loop's identity headers, empty when
// a header was not sent.
type Caller struct {
	Run     string `json:"run"`
	Attempt string `json:"attempt"`
	Pod     string `json:"pod"`
}

// callerOf reads the identity headers of a request.
func callerOf(h http.Header) Caller {
	return Caller{Run: h.Get(contract.HeaderRun), Attempt: h.Get(contract.HeaderAttempt), Pod: h.Get(contract.HeaderPod)}
}

// sameClient says whether two sessions are one client reconnecting: both
// named themselves and the names agree.
func (c Caller) sameClient(o Caller) bool { return c != Caller{} && c == o }

// Session is one interval during which a client drove the rig.
type Session struct {
	// Seq numbers the rig's sessions from 1, in the order they started.
	Seq int `json:"seq"`
	// ID is the MCP session id (Mcp-Session-Id).
	ID string `json:"id"`
	Caller
	FirstCall time.Time `json:"firstCall"`
	LastCall  time.Time `json:"lastCall"`
	// Calls counts tools/call requests, refused ones (busy, bad arguments) included.
	Calls int  `json:"calls"`
	Open  bool `json:"open"`
	// Ended is how a closed session ended: closed, restart or idle.
	Ended string `json:"ended,omitempty"`

	inFlight int
}

// SessionRef names a session in an overlap.
type SessionRef struct {
	Seq int    `json:"seq"`
	ID  string `json:"id"`
	Caller
}

// Overlap is two sessions of different clients driving one rig at once.
type Overlap struct {
	// A started first.
	A SessionRef `json:"a"`
	B SessionRef `json:"b"`
	// From and To bound the time both were driving the rig.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Ledger is a rig's ledger as GET /api/sim/state reports it.
type Ledger struct {
	SessionIdleSeconds float64 `json:"sessionIdleSeconds"`
	// SessionsRecorded counts every session since the rig started, forgotten ones included.
	SessionsRecorded int       `json:"sessionsRecorded"`
	Sessions         []Session `json:"sessions"`
	Overlaps         []Overlap `json:"overlaps"`
}

// ledger records a rig's sessions. Its times are the wall clock's, not the phone's.
type ledger struct {
	mu       sync.Mutex
	now      func() time.Time
	idle     time.Duration
	keep     int
	seq      int
	sessions []*Session          // oldest first
	current  map[string]*Session // MCP session id → its open session
	overlaps []Overlap
	pairs    map[[2]int]int // (A.Seq, B.Seq) → index in overlaps
}

func newLedger(idle time.Duration) *ledger {
	if idle <= 0 {
		idle = DefaultSessionIdle
	}
	return &ledger{now: time.Now, idle: idle, keep: ledgerKeepClosed,
		current: map[string]*Session{}, pairs: map[[2]int]int{}}
}

// begin records the start of a tool call of MCP session id.
func (l *ledger) begin(id string, c Caller) *Session {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	s := l.current[id]
	if s == nil {
		l.seq++
		s = &Session{Seq: l.seq, ID: id, Caller: c, FirstCall: now, Open: true}
		l.current[id] = s
		l.sessions = append(l.sessions, s)
	}
	s.Calls++
	s.inFlight++
	s.LastCall = now
	l.overlapsOf(s, now)
	l.forget()
	return s
}

// end records the end of a tool call begun by begin: the rig stopped moving
// for it, whether or not its session is still open.
func (l *ledger) end(s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s.inFlight--
	s.LastCall = now
	l.overlapsOf(s, now)
}

// close ends the open session of MCP session id.
func (l *ledger) close(id, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.current[id]; s != nil {
		s.Open, s.Ended = false, how
		delete(l.current, id)
	}
}

// closeAll ends every open session.
func (l *ledger) closeAll(how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.current {
		s.Open, s.Ended = false, how
		delete(l.current, id)
	}
}

// expire closes the sessions idle for the window. Holds mu.
func (l *ledger) expire(now time.Time) {
	for id, s := range l.current {
		if s.inFlight == 0 && now.Sub(s.LastCall) >= l.idle {
			s.Open, s.Ended = false, endedIdle
			delete(l.current, id)
		}
	}
}

// active says whether any session is active: open, or with a call in
// flight.
func (l *ledger) active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.now())
	if len(l.current) > 0 {
		return true
	}
	for _, s := range l.sessions {
		if s.inFlight > 0 {
			return true
		}
	}
	return false
}

// last is when s last drove the rig: now while a call of it runs. Holds mu.
func last(s *Session, now time.Time) time.Time {
	if s.inFlight > 0 {
		return now
	}
	return s.LastCall
}

// active says whether s may still grow: open, or a call of it still runs.
func (s *Session) active() bool { return s.Open || s.inFlight > 0 }

// overlapsOf records or widens the overlaps of s with every other client's
// sessions. Holds mu.
func (l *ledger) overlapsOf(s *Session, now time.Time) {
	sLast := last(s, now)
	for _, o := range l.sessions {
		if o == s || o.ID == s.ID || o.Caller.sameClient(s.Caller) {
			continue
		}
		oLast := last(o, now)
		if o.FirstCall.After(sLast) || s.FirstCall.After(oLast) {
			continue
		}
		a, b := o, s
		if b.Seq < a.Seq {
			a, b = b, a
		}
		from, to := maxTime(a.FirstCall, b.FirstCall), minTime(sLast, oLast)
		key := [2]int{a.Seq, b.Seq}
		if i, ok := l.pairs[key]; ok {
			l.overlaps[i].To = maxTime(l.overlaps[i].To, to)
			continue
		}
		l.pairs[key] = len(l.overlaps)
		l.overlaps = append(l.overlaps, Overlap{A: ref(a), B: ref(b), From: from, To: to})
	}
}

// forget drops the oldest closed sessions beyond keep, each only once no
// active session of another client started before it ended: such a session
// could still come to overlap it. Holds mu.
func (l *ledger) forget() {
	closed := 0
	for _, s := range l.sessions {
		if !s.active() {
			closed++
		}
	}
	kept := l.sessions[:0]
	for _, s := range l.sessions {
		if closed > l.keep && !s.active() && !l.mayOverlap(s) {
			closed--
			continue
		}
		kept = append(kept, s)
	}
	clear(l.sessions[len(kept):])
	l.sessions = kept
}

// mayOverlap says whether an active session of another client could still
// overlap the closed session s. Holds mu.
func (l *ledger) mayOverlap(s *Session) bool {
	for _, o := range l.sessions {
		if o.active() && o.ID != s.ID && !o.Caller.sameClient(s.Caller) && !o.FirstCall.After(s.LastCall) {
			return true
		}
	}
	return false
}

// report is the ledger as of now, with idle sessions closed.
func (l *ledger) report() Ledger {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	for _, s := range l.sessions {
		if s.inFlight > 0 {
			l.overlapsOf(s, now)
		}
	}
	out := Ledger{SessionIdleSeconds: l.idle.Seconds(), SessionsRecorded: l.seq,
		Sessions: make([]Session, 0, len(l.sessions)), Overlaps: make([]Overlap, 0, len(l.overlaps))}
	for _, s := range l.sessions {
		v := *s
		v.FirstCall, v.LastCall = v.FirstCall.UTC(), last(s, now).UTC()
		out.Sessions = append(out.Sessions, v)
	}
	for _, o := range l.overlaps {
		o.From, o.To = o.From.UTC(), o.To.UTC()
		out.Overlaps = append(out.Overlaps, o)
	}
	return out
}

func ref(s *Session) SessionRef { return SessionRef{Seq: s.Seq, ID: s.ID, Caller: s.Caller} }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// recordCalls is the server middleware that enters every tool call in the
// rig's ledger, under its MCP session and the caller's identity headers.
func (r *Rig) recordCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		id := ""
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
			id = ss.ID()
		}
		var c Caller
		if ex := req.GetExtra(); ex != nil {
			c = callerOf(ex.Header)
		}
		s := r.ledger.begin(id, c)
		defer r.ledger.end(s)
		return next(ctx, method, req)
	}
}

// Ledger is the rig's session ledger as of now.
func (r *Rig) Ledger() Ledger { return r.ledger.report() }
