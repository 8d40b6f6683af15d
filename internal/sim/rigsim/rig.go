// Package rigsim is a simulated PhysiClaw rig: the same twelve MCP tools over
// streamable HTTP, the same health route, the same results and the same ways of
// failing, over a simulated phone (package phone) instead of a real one. A loop
// cannot tell it from a real rig; a test can read its ground truth and inject
// faults through /api/sim/.
package rigsim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/clock"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// Rig is one simulated rig: a phone, its faults, its busy lock and its MCP server.
type Rig struct {
	name string
	cfg  Config
	at   phone.Box // the AssistiveTouch button

	busy sync.Mutex // the gesture lock: held for the whole of a tool call, never waited on

	mu       sync.Mutex // guards everything below
	phone    *phone.Phone
	faults   Faults
	rng      *rand.Rand
	lastWall time.Time

	wake        WakeState // the watchdog's wake, raised and not yet read (watch.go)
	bannersSeen int       // the phone's notification banners the watchdog has seen

	server  *mcp.Server
	handler *mcp.StreamableHTTPHandler // replaced by Restart; guarded by mu

	ledger *ledger // who drove the rig, and when (ledger.go)
}

// New builds a rig named name from its configuration.
func New(name string, cfg Config) *Rig {
	if cfg.UnlockCode == "" {
		cfg.UnlockCode = DefaultUnlockCode
	}
	r := &Rig{name: name, cfg: cfg, at: cfg.assistiveTouch(), phone: phone.New(cfg.Phone.phone()), faults: cfg.Faults,
		rng: rand.New(rand.NewPCG(cfg.Seed, nameHash(name))), lastWall: time.Now(),
		ledger: newLedger(time.Duration(cfg.SessionIdle))}
	r.server = newMCPServer(r)
	r.handler = r.newHandler()
	return r
}

// newHandler is a fresh streamable HTTP endpoint with no sessions. Localhost protection is off:
// loop pods reach rigs by service names, never as localhost.
func (r *Rig) newHandler() *mcp.StreamableHTTPHandler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return r.server },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
}

// Restart drops every MCP session, as a rig whose server restarted does: clients must reconnect.
// The watchdog forgets the wake it had raised.
func (r *Rig) Restart() {
	r.mu.Lock()
	r.handler = r.newHandler()
	r.forgetWake()
	r.mu.Unlock()
	for ss := range r.server.Sessions() {
		ss.Close()
	}
	r.ledger.closeAll(endedRestart)
}

// serveMCP hands the request to the current endpoint. A DELETE is the client
// closing its MCP session: the ledger closes that session too.
func (r *Rig) serveMCP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	h := r.handler
	r.mu.Unlock()
	h.ServeHTTP(w, req)
	if id := req.Header.Get(mcpSessionHeader); req.Method == http.MethodDelete && id != "" {
		r.ledger.close(id, endedClosed)
	}
}

// mcpSessionHeader carries the MCP session id on every request after the
// handshake (MCP specification, streamable HTTP transport).
const mcpSessionHeader = "Mcp-Session-Id"

// Name is the rig's name.
func (r *Rig) Name() string { return r.name }

func nameHash(s string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// syncClock advances the phone with the wall clock when the rig runs in wall-clock mode. Holds mu.
func (r *Rig) syncClock() {
	now := time.Now()
	if r.cfg.WallClock {
		r.phone.Advance(now.Sub(r.lastWall))
	}
	r.lastWall = now
}

// chance draws against a fault fraction. Holds mu.
func (r *Rig) chance(p float64) bool { return p > 0 && r.rng.Float64() < p }

// Faults returns the faults in force.
func (r *Rig) Faults() Faults {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.faults
}

// SetFaults replaces the faults in force.
func (r *Rig) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = f
	return nil
}

// State is the phone's ground truth.
func (r *Rig) State() phone.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	return r.phone.State()
}

// Advance moves the phone's clock forward (replies arrive, timers run down, the phone may auto-lock).
func (r *Rig) Advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phone.Advance(d)
}

// LockPhone makes the phone lock itself now.
func (r *Rig) LockPhone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phone.Lock()
}

// CrashApp crashes app now (the foreground app if empty); it reports whether anything crashed.
func (r *Rig) CrashApp(app string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if app == "" {
		app = r.phone.Foreground()
	}
	return app != "" && r.phone.Crash(app)
}

// Status is GET /api/status, as a PhysiClaw rig writes it: every field true
// and every set-up step done unless a fault says otherwise. bridge is false
// while an MCP session is active, as PhysiClaw's is: the phone's bridge page
// stops polling while a task drives the phone.
func (r *Rig) Status() contract.RigStatus {
	f := r.Faults()
	steps := map[string]json.RawMessage{}
	for _, k := range simSteps {
		if f.healthy(k) {
			steps[k] = r.stepValue(k)
		}
	}
	return contract.RigStatus{Arm: f.healthy("arm"), Camera: f.healthy("camera"),
		Bridge: f.healthy("bridge") && !r.ledger.active(), Calibrated: f.calibrated(),
		OriginPinned: f.healthy("origin_pinned"), Ready: f.ready(), LayoutLearned: f.healthy("layout_learned"),
		Steps: steps}
}

// stepValue is what a done step reports, in PhysiClaw's forms: a calibrated
// viewport at device pixel ratio 3, a camera that needs no rotation, and the
// AssistiveTouch button's centre.
func (r *Rig) stepValue(step string) json.RawMessage {
	var v any = "OK"
	switch step {
	case contract.StepViewportShift:
		v = "dpr=3, offset=(0, 0)"
	case contract.StepRotation:
		v = "none"
	case contract.StepValidated:
		v = true
	case contract.StepAssistiveTouch:
		x, y := r.at.Center()
		v = fmt.Sprintf("(%.3f, %.3f)", x, y)
	}
	b, _ := json.Marshal(v)
	return b
}

// sleep waits a tool's real time: its typical (or fault-overridden) duration times the time scale.
func (r *Rig) sleep(ctx context.Context, tool string, extra time.Duration) time.Duration {
	r.mu.Lock()
	d := typicalDuration[tool]
	if o, ok := r.faults.Latency[tool]; ok {
		d = time.Duration(o)
	}
	r.mu.Unlock()
	d += extra
	_ = clock.Sleep(ctx, time.Duration(float64(d)*r.cfg.TimeScale)) // a cancelled call stops waiting; the phone still advances by d
	return d
}
