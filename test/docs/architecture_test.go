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

// fileRef matches a file a rule's row names, with or without a declaration:
// `path/to/file.go` or `path/to/file.go:Name`.
var fileRef = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go)(?::[A-Za-z_][A-Za-z0-9_]*)?`")

// A rule of the "Where each rule lives" table lives in at most two files: a
// rule spread wider has no one place to read it.
func TestArchitectureRulesNameAtMostTwoFiles(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	in, rows := false, 0
	for i, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			in = strings.TrimSpace(strings.TrimLeft(line, "#")) == "Where each rule lives"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") || !strings.Contains(line, "`") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		files := map[string]bool{}
		var names []string
		for _, m := range fileRef.FindAllStringSubmatch(line, -1) {
			if !files[m[1]] {
				files[m[1]] = true
				names = append(names, m[1])
			}
		}
		if len(files) == 0 {
			continue
		}
		rows++
		if len(files) > 2 {
			t.Errorf("docs/architecture.md:%d: the rule %q names %d files (%s); a rule lives in at most two: name the one or two that decide it",
				i+1, cells[0], len(files), strings.Join(names, ", "))
		}
	}
	if rows < 40 {
		t.Fatalf("found %d rules naming files under docs/architecture.md's \"Where each rule lives\", want the whole table (at least 40)", rows)
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
