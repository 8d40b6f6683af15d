package rigsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// Handler serves the rig: the MCP endpoint, health route and watch route a real rig has, plus /api/sim/ for tests.
//
//	POST|GET|DELETE /mcp          MCP over streamable HTTP
//	GET  /api/status              PhysiClaw's status: health fields and set-up steps
//	GET  /api/phone/watch         PhysiClaw's camera watchdog: {"wake": bool, "reason": "..."}, once per wake (watch.go)
//	GET  /api/sim/state           the phone's ground truth, the session ledger and the raised wake
//	GET  /api/sim/faults          the faults in force
//	POST /api/sim/faults          merge a JSON object into the faults
//	DELETE /api/sim/faults        clear every fault
//	POST /api/sim/advance         {"seconds": N}: move the phone's clock
//	POST /api/sim/lock            the phone locks itself now
//	POST /api/sim/crash           {"app": "Shop"} (or the foreground app): it crashes now
//	POST /api/sim/message         {"from": "Ana", "text": "..."}: a message arrives now (and raises a wake unless on screen)
//	POST /api/sim/wake            {"reason": "..."} or no body: raise a wake (default: the idle check-in)
//	POST /api/sim/restart         the rig's server restarts: every MCP session is gone; answers the status
//	GET  /api/sim/screen          the current listing, as text
//	GET  /api/sim/screen.jpg      the current screen, as a JPEG
func (r *Rig) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", r.reachable(http.HandlerFunc(r.serveMCP)))
	mux.Handle("GET /api/status", r.reachable(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, r.Status()) })))
	mux.Handle("GET /api/phone/watch", r.reachable(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, r.Watch()) })))
	mux.HandleFunc("GET /api/sim/state", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, SimState{State: r.State(), Ledger: r.Ledger(), Wake: r.RaisedWake()})
	})
	mux.HandleFunc("GET /api/sim/faults", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, r.Faults()) })
	mux.HandleFunc("POST /api/sim/faults", r.postFaults)
	mux.HandleFunc("DELETE /api/sim/faults", func(w http.ResponseWriter, _ *http.Request) {
		_ = r.SetFaults(Faults{})
		writeJSON(w, r.Faults())
	})
	mux.HandleFunc("POST /api/sim/advance", func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Seconds float64 `json:"seconds"`
		}
		if err := decodeBody(req.Body, &body); err != nil || body.Seconds <= 0 {
			http.Error(w, `advance: want {"seconds": N} with N > 0`, http.StatusBadRequest)
			return
		}
		r.Advance(time.Duration(body.Seconds * float64(time.Second)))
		writeJSON(w, r.State())
	})
	mux.HandleFunc("POST /api/sim/lock", func(w http.ResponseWriter, _ *http.Request) {
		r.LockPhone()
		writeJSON(w, r.State())
	})
	mux.HandleFunc("POST /api/sim/crash", func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			App string `json:"app"`
		}
		if err := decodeBody(req.Body, &body); err != nil {
			http.Error(w, `crash: want {"app": "Shop"} or {} for the foreground app`, http.StatusBadRequest)
			return
		}
		if !r.CrashApp(body.App) {
			http.Error(w, fmt.Sprintf("crash: app %q is not running", body.App), http.StatusConflict)
			return
		}
		writeJSON(w, r.State())
	})
	mux.HandleFunc("POST /api/sim/message", r.postMessage)
	mux.HandleFunc("POST /api/sim/wake", r.postWake)
	mux.HandleFunc("POST /api/sim/restart", func(w http.ResponseWriter, _ *http.Request) {
		r.Restart()
		writeJSON(w, r.Status())
	})
	mux.HandleFunc("GET /api/sim/screen", func(w http.ResponseWriter, _ *http.Request) {
		_, listing, err := r.snapshot()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, listing+"\n")
	})
	mux.HandleFunc("GET /api/sim/screen.jpg", func(w http.ResponseWriter, _ *http.Request) {
		img, _, err := r.snapshot()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(img)
	})
	return mux
}

// SimState is GET /api/sim/state: the phone's ground truth and, beside it,
// the rig's session ledger (ledger.go) and the wake its watchdog has raised
// and nobody has read yet (watch.go).
type SimState struct {
	phone.State
	Ledger
	Wake WakeState `json:"wake"`
}

// snapshot is the screen as a clean screenshot would show it, without touching anything.
func (r *Rig) snapshot() ([]byte, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncClock()
	return r.view(false)
}

// postFaults merges the body into the faults in force: fields present replace, others stay.
func (r *Rig) postFaults(w http.ResponseWriter, req *http.Request) {
	f := r.Faults()
	f.Latency, f.Health = copyMap(f.Latency), copyMap(f.Health)
	if err := decodeBody(req.Body, &f); err != nil {
		http.Error(w, "faults: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := r.SetFaults(f); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, r.Faults())
}

// reachable drops the connection without an answer while the rig is disconnected, as a host
// that went to sleep or a split Wi-Fi does. It wraps the routes a real rig has: /mcp,
// /api/status and /api/phone/watch.
func (r *Rig) reachable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !r.Faults().Disconnected {
			next.ServeHTTP(w, req)
			return
		}
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	})
}

func decodeBody(body io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(body, 1<<20))
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return strictJSON(b, v)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return nil
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
