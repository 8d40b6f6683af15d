package boundaries

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The tables of internal/README.md.
type readmeTable int

const (
	shippedTable readmeTable = iota + 1 // "## Shipped": package | what it is | in
	standInTable                        // "## Stand-ins…": package | what it is | used by
)

func (t readmeTable) String() string {
	if t == standInTable {
		return "Stand-ins"
	}
	return "Shipped"
}

// A readmeRow is one package's row of internal/README.md.
type readmeRow struct {
	table readmeTable
	line  int
	// pkg is the first name in the package cell, relative to internal/
	// (`sim/rigsim`).
	pkg string
	// names are every `name` of the row, a trailing slash dropped: a
	// package below pkg is listed by its parent's row as `name` or `name/`
	// (the engine's policies, `openai/`, `phone/`).
	names []string
	// usedBy are the names of the last cell ("in", "used by").
	usedBy []string
}

type internalREADME struct {
	rows []readmeRow
}

var backticked = regexp.MustCompile("`([^`]+)`")

func parseInternalREADME(t *testing.T) internalREADME {
	t.Helper()
	var r internalREADME
	table := readmeTable(0)
	for i, line := range strings.Split(readFile(t, "internal/README.md"), "\n") {
		switch {
		case strings.HasPrefix(line, "## Shipped"):
			table = shippedTable
		case strings.HasPrefix(line, "## Stand-ins"):
			table = standInTable
		case strings.HasPrefix(line, "#"):
			table = 0
		}
		if table == 0 || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		first := backticked.FindStringSubmatch(cells[0])
		if first == nil { // the header and the separator
			continue
		}
		row := readmeRow{table: table, line: i + 1, pkg: strings.TrimSuffix(first[1], "/")}
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			row.names = append(row.names, strings.TrimSuffix(m[1], "/"))
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			row.usedBy = append(row.usedBy, m[1])
		}
		r.rows = append(r.rows, row)
	}
	if len(r.rows) < 20 {
		t.Fatalf("found %d package rows in internal/README.md, want both tables (at least 20)", len(r.rows))
	}
	return r
}

// Every package under internal/ (a directory with non-test Go files) has
// its row in internal/README.md — its own, or its name in its parent's row
// — in the table it belongs to: the Stand-ins for internal/sim, testing and
// dev, the Shipped table for every other. Every row names a package that
// exists.
func TestInternalREADMEListsEveryPackage(t *testing.T) {
	readme := parseInternalREADME(t)
	packages := map[string]bool{}
	for _, f := range tracked(t, "internal/*.go") {
		if !strings.HasSuffix(f, "_test.go") {
			packages[strings.TrimPrefix(path.Dir(f), "internal/")] = true
		}
	}
	if len(packages) < 30 {
		t.Fatalf("git ls-files shows %d packages under internal/, want the whole tree", len(packages))
	}
	var dirs []string
	for d := range packages {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		want := shippedTable
		if isStandIn("internal/" + d) {
			want = standInTable
		}
		var in []readmeRow
		for _, r := range readme.rows {
			if r.pkg == d || listsChild(r, d) {
				in = append(in, r)
			}
		}
		if len(in) == 0 {
			parent, name := path.Split(d)
			hint := ""
			if parent != "" {
				hint = fmt.Sprintf(", or name `%s` in the row of `%s`", name, strings.TrimSuffix(parent, "/"))
			}
			t.Errorf("internal/%s is a package, but internal/README.md has no row for it: add `%s` to the %s table (what it is, and %s)%s",
				d, d, want, map[readmeTable]string{shippedTable: "which binary it is in", standInTable: "what uses it"}[want], hint)
			continue
		}
		for _, r := range in {
			if r.table != want {
				t.Errorf("internal/README.md:%d lists internal/%s in the %s table; it belongs in the %s table (DEVELOPERS.md: shipped code never imports internal/sim/, internal/testing/ or internal/dev/)",
					r.line, d, r.table, want)
			}
		}
	}
	for _, r := range readme.rows {
		if !packages[r.pkg] {
			t.Errorf("internal/README.md:%d has a row for `%s`, but internal/%s has no Go package: rename the row or drop it", r.line, r.pkg, r.pkg)
		}
	}
}

// listsChild reports whether row r names dir as a package below its own
// (`openai/` in the provider row lists provider/openai).
func listsChild(r readmeRow, dir string) bool {
	for _, n := range r.names {
		if n != r.pkg && path.Join(r.pkg, n) == dir {
			return true
		}
	}
	return false
}
