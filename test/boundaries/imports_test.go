package boundaries

import (
	"sort"
	"strings"
	"testing"
)

// The operator and the loop meet only through the pod contract
// (internal/README.md, docs/architecture.md): the engine and everything it
// imports never import controller-runtime or controllers/.
func TestEngineImportsNoOperator(t *testing.T) {
	g := loadGraph(t)
	roots := packagesUnder(g, "internal/engine")
	for _, v := range g.reach(roots, func(_, p string) bool {
		return under(p, "sigs.k8s.io/controller-runtime") || under(p, "controllers")
	}) {
		t.Errorf("%s reaches %s: the engine and everything it imports never import controller-runtime or controllers/ (internal/README.md)\n\t%s",
			v.chain[0], v.chain[len(v.chain)-1], g.describe(v))
	}
}

// controllers/ never import the engine, the providers or the rig client
// (internal/README.md). The rig client is internal/rig itself: the manager
// reads rig listings through toolpolicy, so internal/rig/listing is allowed.
func TestControllersImportNoLoop(t *testing.T) {
	g := loadGraph(t)
	roots := packagesUnder(g, "controllers")
	for _, v := range g.reach(roots, func(_, p string) bool {
		return under(p, "internal/engine") || under(p, "internal/provider") || p == "internal/rig"
	}) {
		t.Errorf("%s reaches %s: controllers/ never import the engine (internal/engine/...), the providers (internal/provider/...) or the rig client (internal/rig) (internal/README.md)\n\t%s",
			v.chain[0], v.chain[len(v.chain)-1], g.describe(v))
	}
}

// standIns are the trees of internal/README.md's "Stand-ins" table: what
// only tests and development use (DEVELOPERS.md: shipped code never imports
// them).
var standIns = []string{"internal/sim", "internal/testing", "internal/dev"}

// standInUsers are the binaries that may reach a stand-in, and which: the
// `cmd/…` entries of the "used by" column of internal/README.md's
// "Stand-ins" table (TestStandInUsersAreTheREADMEs keeps the two equal).
// cmd/rigsim and cmd/modelsim serve the simulators, for offline demos and
// rehearsals; cmd/devcluster is the local cluster (`make demo`).
var standInUsers = map[string][]string{
	"cmd/rigsim":     {"internal/sim/rigsim"}, // with its phone/
	"cmd/modelsim":   {"internal/sim/modelsim"},
	"cmd/devcluster": {"internal/dev/devcluster"},
}

func isStandIn(p string) bool {
	for _, s := range standIns {
		if under(p, s) {
			return true
		}
	}
	return false
}

// Shipped code — every binary under cmd/, controllers/, api/ and every
// internal/ package outside the stand-ins — never imports, even through
// another package, internal/sim/, internal/testing/ or internal/dev/; only
// the binaries of standInUsers reach their own stand-in. Tests (_test.go)
// may import them; hack/ (image build, vulnerability check) and test/ are
// tooling, not shipped.
func TestShippedCodeImportsNoStandIns(t *testing.T) {
	g := loadGraph(t)
	var roots []string
	for _, p := range g.project {
		shipped := under(p, "cmd") || under(p, "controllers") || under(p, "api") || under(p, "internal")
		if shipped && !isStandIn(p) {
			roots = append(roots, p)
		}
	}
	if len(roots) < 20 {
		t.Fatalf("found %d shipped packages (%s), want the whole tree", len(roots), strings.Join(roots, ", "))
	}
	for _, v := range g.reach(roots, func(root, p string) bool {
		if !isStandIn(p) {
			return false
		}
		for _, ok := range standInUsers[root] {
			if under(p, ok) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("%s reaches %s: shipped code never imports internal/sim/, internal/testing/ or internal/dev/ outside tests (DEVELOPERS.md; internal/README.md, \"Stand-ins\"); the only exceptions are %s\n\t%s",
			v.chain[0], v.chain[len(v.chain)-1], users(), g.describe(v))
	}
}

// The exceptions above are the README's: every `cmd/…` that the Stand-ins
// table names as a user of a package, and no other.
func TestStandInUsersAreTheREADMEs(t *testing.T) {
	readme := parseInternalREADME(t)
	fromREADME := map[string][]string{}
	for _, r := range readme.rows {
		if r.table != standInTable {
			continue
		}
		for _, u := range r.usedBy {
			if under(u, "cmd") {
				fromREADME[u] = append(fromREADME[u], "internal/"+r.pkg)
			}
		}
	}
	for cmd, pkgs := range fromREADME {
		sort.Strings(pkgs)
		if want := standInUsers[cmd]; strings.Join(want, " ") != strings.Join(pkgs, " ") {
			t.Errorf("internal/README.md's Stand-ins table names %s as a user of %s, but test/boundaries allows it %v: change standInUsers in test/boundaries/imports_test.go or the README",
				cmd, strings.Join(pkgs, ", "), want)
		}
	}
	for cmd, pkgs := range standInUsers {
		if _, ok := fromREADME[cmd]; !ok {
			t.Errorf("test/boundaries lets %s use %s, but internal/README.md's Stand-ins table does not name it in any row's \"used by\": add it there or drop it from standInUsers",
				cmd, strings.Join(pkgs, ", "))
		}
	}
}

// internal/contract is the pod contract as Go: it imports nothing of the
// project (internal/README.md), so both sides can read it.
func TestContractImportsNothingOfTheProject(t *testing.T) {
	g := loadGraph(t)
	if !g.mine["internal/contract"] {
		t.Fatal("go list shows no package internal/contract")
	}
	for _, imp := range g.imports["internal/contract"] {
		if g.mine[imp] || under(imp, module) {
			where := g.file[[2]string{"internal/contract", imp}]
			t.Errorf("%s imports %s: internal/contract imports nothing of the project (internal/README.md)", where, imp)
		}
	}
}

func packagesUnder(g *graph, dir string) []string {
	var ps []string
	for _, p := range g.project {
		if under(p, dir) {
			ps = append(ps, p)
		}
	}
	return ps
}

// users lists the exceptions: cmd/devcluster → internal/dev/devcluster, ….
func users() string {
	var us []string
	for u, pkgs := range standInUsers {
		us = append(us, u+" → "+strings.Join(pkgs, ", "))
	}
	sort.Strings(us)
	return strings.Join(us, "; ")
}
