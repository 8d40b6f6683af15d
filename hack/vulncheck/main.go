// Command vulncheck runs govulncheck (pinned in go.mod as a tool) on the
// whole module against the offline database hack/build-vulndb.sh makes, and
// decides what fails `make vulncheck`.
//
// A vulnerability the code reaches in a required module fails: go.mod can fix
// it. One in the standard library fails too when -stdlib=fail; with
// -stdlib=warn (make's default) it is printed with the Go release that fixes
// it and does not fail, because the toolchain is the machine's (GOTOOLCHAIN
// is local here), not something a commit can change.
//
//	go run ./hack/vulncheck -db DIR [-stdlib warn|fail] [packages]
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck:", err)
		os.Exit(1)
	}
}

func run() error {
	db := flag.String("db", "", "the vulnerability database's directory (hack/build-vulndb.sh)")
	stdlib := flag.String("stdlib", "warn", "what a standard-library vulnerability does: warn or fail")
	flag.Parse()
	if *db == "" {
		return errors.New("-db is required: the directory hack/build-vulndb.sh prints")
	}
	if *stdlib != "warn" && *stdlib != "fail" {
		return fmt.Errorf("-stdlib=%q: want warn or fail", *stdlib)
	}
	abs, err := filepath.Abs(*db)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(abs, "index", "db.json")); err != nil {
		return fmt.Errorf("no vulnerability database at %s (run hack/build-vulndb.sh): %w", abs, err)
	}
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	var out bytes.Buffer
	cmd := exec.Command("go", append([]string{"tool", "govulncheck", "-db", "file://" + abs, "-format", "json"}, pkgs...)...)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("govulncheck: %w", err)
	}
	r, err := read(&out)
	if err != nil {
		return err
	}
	return r.report(os.Stdout, *stdlib == "fail")
}

// The parts of govulncheck's JSON stream (golang.org/x/vuln/internal/govulncheck)
// that decide the outcome.
type message struct {
	Config *struct {
		GoVersion string `json:"go_version"`
		DB        string `json:"db"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

// vuln is one vulnerability the code reaches (govulncheck's symbol level).
type vuln struct {
	id, summary, module, version, fixed string
}

type result struct {
	goVersion string
	called    map[string]vuln
}

func read(r io.Reader) (*result, error) {
	res := &result{called: map[string]vuln{}}
	summaries := map[string]string{}
	dec := json.NewDecoder(r)
	for {
		var m message
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("read govulncheck's output: %w", err)
		}
		switch {
		case m.Config != nil:
			res.goVersion = m.Config.GoVersion
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil && len(m.Finding.Trace) > 0 && m.Finding.Trace[0].Function != "":
			f := m.Finding
			res.called[f.OSV] = vuln{id: f.OSV, module: f.Trace[0].Module, version: f.Trace[0].Version, fixed: f.FixedVersion}
		}
	}
	for id, v := range res.called {
		v.summary = summaries[id]
		res.called[id] = v
	}
	return res, nil
}

// goModule reports whether a finding is in Go itself: the standard library
// or the go command.
func goModule(module string) bool { return module == "stdlib" || module == "toolchain" }

func (r *result) report(w io.Writer, stdlibFails bool) error {
	var mods, std []vuln
	for _, v := range r.called {
		if goModule(v.module) {
			std = append(std, v)
		} else {
			mods = append(mods, v)
		}
	}
	for _, l := range [][]vuln{mods, std} {
		sort.Slice(l, func(i, j int) bool { return l[i].id < l[j].id })
	}
	for _, v := range mods {
		fmt.Fprintf(w, "%s %s@%s (fixed in %s): %s\n", v.id, v.module, v.version, orNone(v.fixed), v.summary)
	}
	if len(std) > 0 {
		newest := ""
		for _, v := range std {
			fmt.Fprintf(w, "%s Go %s (fixed in %s): %s\n", v.id, strings.TrimLeft(r.goVersion, "vgo"), orNone(v.fixed), v.summary)
			if later(v.fixed, newest) {
				newest = v.fixed
			}
		}
		fmt.Fprintf(w, "vulncheck: %d vulnerabilities of Go %s that the code reaches; build with Go %s or later\n",
			len(std), strings.TrimLeft(r.goVersion, "vgo"), strings.TrimLeft(newest, "vgo"))
	}
	switch {
	case len(mods) > 0:
		return fmt.Errorf("%d vulnerabilities in required modules that the code reaches; upgrade them (go get module@fixed)", len(mods))
	case len(std) > 0 && stdlibFails:
		return fmt.Errorf("the Go toolchain %s has vulnerabilities the code reaches", r.goVersion)
	case len(std) > 0:
		fmt.Fprintln(w, "vulncheck: standard-library findings are warnings (-stdlib=warn): the toolchain is the machine's")
	}
	fmt.Fprintln(w, "vulncheck: no vulnerability in a required module is reachable")
	return nil
}

// later reports whether release a (v1.26.10, go1.26.10) is later than b.
func later(a, b string) bool {
	num := func(v string) []int {
		var n []int
		for _, p := range strings.Split(strings.TrimLeft(v, "vgo"), ".") {
			i := 0
			fmt.Sscan(p, &i)
			n = append(n, i)
		}
		return n
	}
	x, y := num(a), num(b)
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] > y[i]
		}
	}
	return len(x) > len(y)
}

func orNone(v string) string {
	if v == "" {
		return "no release yet"
	}
	return v
}
