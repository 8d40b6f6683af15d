// Package gobuild builds one of the module's commands for a test that runs
// it as a process of its own, and tells go test's cache what the binary is
// made of.
//
// go test keys a cached result on the test binary and on the files and
// environment variables the test read; a binary the test builds with `go
// build` is out of its sight, so a change to that command's code would
// otherwise leave the old result in the cache. Build reads the directory of
// every package of this module the command is built from (a directory's
// entry in the cache key covers the size and time of each of its files), the
// files they embed, and go.mod and go.sum, which pin everything else.
package gobuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build builds the command pkg (an import path, or a directory relative to
// the test's) into a temporary directory of t and returns the binary's path.
// env (NAME=value) is added to go build's environment, e.g. CGO_ENABLED=0
// for a static binary that goes into an image.
func Build(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	Inputs(t, pkg)
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Inputs reads what pkg is built from, so that go test's cache keys on it.
func Inputs(t testing.TB, pkg string) {
	t.Helper()
	// GOFLAGS and the like change what go build makes: read them too.
	for _, v := range []string{"GOFLAGS", "GOOS", "GOARCH", "CGO_ENABLED", "GOEXPERIMENT", "GOTOOLCHAIN"} {
		_ = os.Getenv(v)
	}
	var stderr bytes.Buffer
	list := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .EmbedFiles}}{{"\t"}}{{.}}{{end}}{{"\n"}}{{end}}{{end}}`, pkg)
	list.Stderr = &stderr
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	var root string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "\t")
		dir := fields[0]
		read(t, dir)
		for _, f := range fields[1:] {
			read(t, filepath.Join(dir, f))
		}
		if root == "" {
			root = moduleRoot(dir)
		}
	}
	if root == "" {
		t.Fatalf("go list -deps %s: no package of this module", pkg)
	}
	read(t, filepath.Join(root, "go.mod"))
	read(t, filepath.Join(root, "go.sum"))
}

// read opens and closes name: go test records the open, and keys its cache
// on the file's size and time (a directory's: on each entry's).
func read(t testing.TB, name string) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}

// moduleRoot is the directory of the go.mod above dir.
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
