// Package docs checks that the documentation names code that exists.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rowRef matches the "where" cell of docs/architecture.md's rule table:
// `path/to/file.go:Name`.
var rowRef = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go):([A-Za-z_][A-Za-z0-9_]*)`")

// Every row of the rule → file:function table names a file that exists and a
// declaration (function, method, type, constant or variable) in that file.
func TestArchitectureTableNamesRealCode(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range rowRef.FindAllStringSubmatch(line, -1) {
			rows++
			file, name := m[1], m[2]
			if !declares(t, filepath.Join(root, file), name) {
				t.Errorf("docs/architecture.md: %s does not declare %s", file, name)
			}
		}
	}
	if rows < 40 {
		t.Fatalf("found %d file:function references in docs/architecture.md, want the whole table (at least 40)", rows)
	}
}

func declares(t *testing.T, path, name string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("docs/architecture.md names %s: %v", path, err)
		return true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name == name {
				return true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.Name == name {
						return true
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.Name == name {
							return true
						}
					}
				}
			}
		}
	}
	return false
}
