// Package boundaries checks the rules of the tree that no compiler does: which
// package may import which (internal/README.md, DEVELOPERS.md), that
// internal/README.md lists every package, and that comments and documents
// cite only documents that are in the repository. It reads the tree with
// `git ls-files`, `go list` and go/parser: no cluster, no build of the
// binaries. What git and go list read is not in the test cache's key: run
// it with -count=1, as `make test` does.
package boundaries

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// module is the module path of the repository (go.mod; TestModulePath).
const module = "github.com/clawfarm/clawfarm"

// The import rules name packages by module path: go.mod says which it is.
func TestModulePath(t *testing.T) {
	for _, line := range strings.Split(readFile(t, "go.mod"), "\n") {
		if m, ok := strings.CutPrefix(line, "module "); ok {
			if m = strings.TrimSpace(m); m != module {
				t.Fatalf("go.mod's module is %s; test/boundaries/repo_test.go has %s: change its module constant", m, module)
			}
			return
		}
	}
	t.Fatal("go.mod has no module line")
}

// root is the repository's top directory, from this package's directory.
var root = filepath.Join("..", "..")

// tracked lists the files git tracks that match the patterns (git
// pathspecs), relative to the repository's top, with forward slashes.
func tracked(t *testing.T, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"ls-files", "-z", "--"}, patterns...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files %s: %v\n%s", strings.Join(patterns, " "), err, stderr.String())
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// rel turns an import path of the module into its directory in the tree
// ("internal/engine"); other paths stay as they are.
func rel(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

// under reports whether p is dir or a package below it (both as paths
// relative to the module, or both as import paths).
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// graph is the import graph of the module's packages and everything they
// import, without tests: the code that goes into the binaries.
type graph struct {
	// imports of every package: the module's packages by their directory
	// (rel), the others by import path. A module package's imports are the
	// union over all its non-test files, whatever their build constraints,
	// so a file for another platform is checked too.
	imports map[string][]string
	// std marks the standard library, which the walks do not enter.
	std map[string]bool
	// file names, for an import of a module package, a file that writes it.
	file map[[2]string]string
	// project lists the module's packages that have non-test Go files;
	// mine is the same as a set.
	project []string
	mine    map[string]bool
}

var (
	graphOnce sync.Once
	theGraph  *graph
	graphErr  error
)

// loadGraph reads the graph once for the whole test binary:
// `go list -deps -json` for the packages and their imports, go/parser for
// the files that write each import.
func loadGraph(t *testing.T) *graph {
	t.Helper()
	graphOnce.Do(func() { theGraph, graphErr = readGraph() })
	if graphErr != nil {
		t.Fatal(graphErr)
	}
	return theGraph
}

func readGraph() (*graph, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,Imports,GoFiles,Standard,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New("go list -deps -json ./...: " + err.Error() + "\n" + stderr.String())
	}
	g := &graph{imports: map[string][]string{}, std: map[string]bool{}, file: map[[2]string]string{}, mine: map[string]bool{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Dir        string
			Imports    []string
			GoFiles    []string
			Standard   bool
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, errors.New("reading go list's output: " + err.Error())
		}
		if p.Error != nil {
			return nil, errors.New("go list: " + p.ImportPath + ": " + p.Error.Err)
		}
		if p.Standard {
			g.std[p.ImportPath] = true
			continue
		}
		if !under(p.ImportPath, module) {
			g.imports[p.ImportPath] = p.Imports
			continue
		}
		name := rel(p.ImportPath)
		if len(p.GoFiles) == 0 {
			continue // tests only (test/docs, …)
		}
		imports, err := parseImports(name)
		if err != nil {
			return nil, err
		}
		for _, imp := range p.Imports {
			if _, ok := imports[imp]; !ok {
				imports[imp] = "" // a generated or cgo file go/parser did not see
			}
		}
		for imp, file := range imports {
			to := imp
			if under(imp, module) {
				to = rel(imp)
			}
			g.imports[name] = append(g.imports[name], to)
			if file != "" {
				g.file[[2]string{name, to}] = file
			}
		}
		sort.Strings(g.imports[name])
		g.project = append(g.project, name)
		g.mine[name] = true
	}
	sort.Strings(g.project)
	return g, nil
}

// parseImports reads the imports of every non-test .go file in a module
// directory: import path → the first file (by name) that writes it. A file
// built never (`//go:build ignore`) is not part of the package.
func parseImports(dir string) (map[string]string, error) {
	names, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	imports := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if ignored(f.Comments) {
			continue
		}
		file := path.Join(dir, filepath.Base(name))
		for _, s := range f.Imports {
			imp, err := strconv.Unquote(s.Path.Value)
			if err != nil || imp == "C" {
				continue
			}
			if _, ok := imports[imp]; !ok {
				imports[imp] = file
			}
		}
	}
	return imports, nil
}

func ignored(comments []*ast.CommentGroup) bool {
	for _, g := range comments {
		for _, c := range g.List {
			if strings.TrimSpace(c.Text) == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

// A violation is a root that reaches a package it must not: the chain of
// imports from the root (first) to that package (last).
type violation struct {
	chain []string
}

// reach walks the graph from each root, breadth first, and returns for each
// root every package bad says it must not reach, with the shortest chain.
// The walk does not go past a bad package, nor into the standard library.
// A chain that passes through another root is left to that root, so one
// wrong import is reported once, by the package that writes it or the
// nearest root above it.
func (g *graph) reach(roots []string, bad func(root, pkg string) bool) []violation {
	isRoot := map[string]bool{}
	for _, r := range roots {
		isRoot[r] = true
	}
	var found []violation
	for _, r := range roots {
		parent := map[string]string{r: ""}
		queue := []string{r}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, imp := range g.imports[p] {
				if _, seen := parent[imp]; seen || g.std[imp] {
					continue
				}
				parent[imp] = p
				if !bad(r, imp) {
					queue = append(queue, imp)
					continue
				}
				var chain []string
				for q := imp; q != ""; q = parent[q] {
					chain = append([]string{q}, chain...)
				}
				mine := true
				for _, q := range chain[1:] {
					if isRoot[q] {
						mine = false
					}
				}
				if mine {
					found = append(found, violation{chain})
				}
			}
		}
	}
	return found
}

// describe writes a chain one import a line, each with the file that
// writes it when the importer is the module's:
//
//	internal/engine/hooks
//	  imports internal/toolpolicy (internal/engine/hooks/hooks.go)
//	  imports sigs.k8s.io/controller-runtime/pkg/client (internal/toolpolicy/policy.go)
func (g *graph) describe(v violation) string {
	var b strings.Builder
	b.WriteString(v.chain[0])
	for i := 1; i < len(v.chain); i++ {
		b.WriteString("\n\t  imports " + v.chain[i])
		if f := g.file[[2]string{v.chain[i-1], v.chain[i]}]; f != "" {
			b.WriteString(" (" + f + ")")
		}
	}
	return b.String()
}

// readFile reads a file of the repository, by its path from the top.
func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
