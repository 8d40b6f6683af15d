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

// NewFarm builds n rigs named rig-0, rig-1, … from one configuration; each gets its own seed stream.
func NewFarm(n int, cfg Config) *Farm {
	f := &Farm{}
	for i := 0; i < n; i++ {
		f.Rigs = append(f.Rigs, New(fmt.Sprintf("rig-%d", i), cfg))
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

// Handler serves every rig under /rigs/<name>/ (so /rigs/rig-0/mcp, /rigs/rig-0/api/status…)
// and lists them at GET /rigs.
func (f *Farm) Handler() http.Handler {
	mux := http.NewServeMux()
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
