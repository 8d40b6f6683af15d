package rigsim

import (
	"fmt"
	"net/http"
	"strings"
)

// Farm is many rigs in one process, each under /rigs/<name>/ (and each may also listen on its own port).
type Farm struct {
	Rigs []*Rig
}

// NewFarm builds n rigs named rig-0, rig-1, … from one configuration; each gets its own seed stream,
// and the settings cfg.Rigs gives it.
func NewFarm(n int, cfg Config) *Farm {
	f := &Farm{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("rig-%d", i)
		f.Rigs = append(f.Rigs, New(name, cfg.forRig(name)))
	}
	return f
}

// Rig finds a rig by name.
func (f *Farm) Rig(name string) *Rig {
	for _, r := range f.Rigs {
		if r.name == name {
			return r
		}
	}
	return nil
}

// FarmLedger is GET /api/sim/ledger: every rig's overlaps and their total,
// so a benchmark asks once whether any phone had two sessions at once.
type FarmLedger struct {
	// Overlaps counts the overlaps on every rig.
	Overlaps int `json:"overlaps"`
	// SessionsRecorded counts the sessions recorded on every rig.
	SessionsRecorded int         `json:"sessionsRecorded"`
	Rigs             []RigLedger `json:"rigs"`
}

// RigLedger is one rig's part of the farm's ledger.
type RigLedger struct {
	Name             string    `json:"name"`
	SessionsRecorded int       `json:"sessionsRecorded"`
	OpenSessions     int       `json:"openSessions"`
	Overlaps         []Overlap `json:"overlaps"`
}

// Ledger gathers every rig's ledger.
func (f *Farm) Ledger() FarmLedger {
	out := FarmLedger{Rigs: make([]RigLedger, 0, len(f.Rigs))}
	for _, r := range f.Rigs {
		l := r.Ledger()
		rl := RigLedger{Name: r.name, SessionsRecorded: l.SessionsRecorded, Overlaps: l.Overlaps}
		for _, s := range l.Sessions {
			if s.Open {
				rl.OpenSessions++
			}
		}
		out.Overlaps += len(l.Overlaps)
		out.SessionsRecorded += l.SessionsRecorded
		out.Rigs = append(out.Rigs, rl)
	}
	return out
}

// Handler serves every rig under /rigs/<name>/ (so /rigs/rig-0/mcp, /rigs/rig-0/api/status…),
// lists them at GET /rigs and reports their ledgers at GET /api/sim/ledger.
func (f *Farm) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/sim/ledger", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, f.Ledger()) })
	mux.HandleFunc("GET /rigs", func(w http.ResponseWriter, _ *http.Request) {
		type entry struct {
			Name   string `json:"name"`
			MCP    string `json:"mcp"`
			Health string `json:"health"`
		}
		var out []entry
		for _, r := range f.Rigs {
			p := "/rigs/" + r.name
			out = append(out, entry{r.name, p + "/mcp", p + "/api/status"})
		}
		writeJSON(w, out)
	})
	for _, r := range f.Rigs {
		prefix := "/rigs/" + r.name
		mux.Handle(prefix+"/", http.StripPrefix(prefix, r.Handler()))
	}
	return mux
}

// RigPath is the MCP path of a named rig on the farm handler.
func RigPath(name string) string { return "/rigs/" + strings.TrimSpace(name) + "/mcp" }
