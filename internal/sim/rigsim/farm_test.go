package rigsim

import (
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Many rigs in one process, each under its own path, each with its own phone.
func TestFarmServesRigsByPath(t *testing.T) {
	farm := NewFarm(3, Config{})
	srv := httptest.NewServer(farm.Handler())
	defer srv.Close()
	var list []struct{ Name, MCP, Health string }
	getJSON(t, srv.URL+"/rigs", &list)
	if len(list) != 3 || list[1].MCP != RigPath("rig-1") {
		t.Fatalf("GET /rigs = %+v", list)
	}
	one := &testRig{rig: farm.Rig("rig-1"), url: srv.URL + "/rigs/rig-1", cs: connect(t, srv.URL+list[1].MCP)}
	one.tapLabel(t, "Settings")
	if s := one.state(t); s.Foreground != "Settings" {
		t.Fatalf("rig-1 foreground = %q", s.Foreground)
	}
	zero := &testRig{url: srv.URL + "/rigs/rig-0"}
	if s := zero.state(t); s.Foreground != "" {
		t.Fatalf("rig-0 moved when rig-1 was tapped: %q", s.Foreground)
	}
	var st farmv1.RigHealth
	getJSON(t, srv.URL+"/rigs/rig-2/api/status", &st)
	if !st.Ready {
		t.Fatalf("rig-2 status %+v", st)
	}
}

// The debug views show the screen without touching the phone.
func TestScreenEndpoints(t *testing.T) {
	tr := startRig(t, Config{})
	before := tr.state(t).Touches
	resp, err := http.Get(tr.url + "/api/sim/screen")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rows := parseListing(t, strings.TrimSpace(string(b))); !has(rows, "Clock") {
		t.Fatalf("GET /api/sim/screen = %q", b)
	}
	resp, err = http.Get(tr.url + "/api/sim/screen.jpg")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := jpeg.Decode(resp.Body); err != nil || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("GET /api/sim/screen.jpg: %v %s", err, resp.Header.Get("Content-Type"))
	}
	if tr.state(t).Touches != before {
		t.Fatal("looking at the screen touched the phone")
	}
}
