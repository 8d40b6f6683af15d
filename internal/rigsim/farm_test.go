package rigsim

import (
	"net/http/httptest"
	"testing"
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
	var st Status
	getJSON(t, srv.URL+"/rigs/rig-2/api/status", &st)
	if !st.Ready {
		t.Fatalf("rig-2 status %+v", st)
	}
}
