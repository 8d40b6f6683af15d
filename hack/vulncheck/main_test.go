package main

import (
	"io"
	"strings"
	"testing"
)

// A stream as govulncheck -format json writes it: config, OSV entries, then
// findings at module, package and symbol level.
const stream = `{"config":{"go_version":"go1.26.8","db":"file:///db"}}
{"osv":{"id":"GO-1","summary":"panic in compress"}}
{"osv":{"id":"GO-2","summary":"net/http desync"}}
{"osv":{"id":"GO-3","summary":"only imported"}}
{"finding":{"osv":"GO-1","fixed_version":"v1.20.2","trace":[{"module":"github.com/klauspost/compress","version":"v1.20.1"}]}}
{"finding":{"osv":"GO-1","fixed_version":"v1.20.2","trace":[{"module":"github.com/klauspost/compress","version":"v1.20.1","package":"p","function":"Decode"}]}}
{"finding":{"osv":"GO-2","fixed_version":"v1.26.10","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Serve"}]}}
{"finding":{"osv":"GO-3","fixed_version":"v1.0.1","trace":[{"module":"example.com/m","version":"v1.0.0","package":"example.com/m"}]}}
`

func TestReport(t *testing.T) {
	r, err := read(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.called) != 2 {
		t.Fatalf("called = %v, want GO-1 and GO-2 (GO-3 is only imported)", r.called)
	}
	if err := r.report(io.Discard, false); err == nil || !strings.Contains(err.Error(), "required modules") {
		t.Errorf("a reachable module vulnerability: err = %v, want a failure naming required modules", err)
	}
	delete(r.called, "GO-1")
	if err := r.report(io.Discard, false); err != nil {
		t.Errorf("only Go's own finding, -stdlib=warn: err = %v, want nil", err)
	}
	if err := r.report(io.Discard, true); err == nil {
		t.Error("only Go's own finding, -stdlib=fail: err = nil, want a failure")
	}
}

func TestLater(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"v1.26.10", "v1.26.9", true}, {"v1.26.9", "v1.26.10", false}, {"go1.27", "v1.26.10", true}, {"v1.26.9", "", true}} {
		if got := later(tc.a, tc.b); got != tc.want {
			t.Errorf("later(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
