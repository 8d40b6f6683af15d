package rigsim

import (
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
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
	var st contract.RigStatus
	getJSON(t, srv.URL+"/rigs/rig-2/api/status", &st)
	if !st.Ready || !st.Bridge {
		t.Fatalf("rig-2 status %+v", st)
	}
}

// Each rig of a farm may have its AssistiveTouch button elsewhere: its status
// reports that centre, its views draw the button there, and only its own
// zone refuses a gesture.
func TestFarmRigsHaveTheirOwnAssistiveTouch(t *testing.T) {
	other := [4]float64{0.05, 0.40, 0.15, 0.446} // centre (0.100, 0.423)
	farm := NewFarm(2, Config{Rigs: map[string]RigConfig{"rig-1": {AssistiveTouch: &other}}})
	srv := httptest.NewServer(farm.Handler())
	defer srv.Close()
	rigs := []*testRig{
		{rig: farm.Rig("rig-0"), url: srv.URL + "/rigs/rig-0", cs: connect(t, srv.URL+RigPath("rig-0"))},
		{rig: farm.Rig("rig-1"), url: srv.URL + "/rigs/rig-1", cs: connect(t, srv.URL+RigPath("rig-1"))},
	}
	at := [][4]float64{DefaultAssistiveTouch, other}
	for i, tr := range rigs {
		var st contract.RigStatus
		getJSON(t, tr.url+"/api/status", &st)
		if want := []string{"(0.930, 0.643)", "(0.100, 0.423)"}[i]; st.AssistiveTouchAt() != want {
			t.Errorf("rig-%d reports AssistiveTouch at %q, want %q", i, st.AssistiveTouchAt(), want)
		}
		rows := tr.call(t, "peek", nil).listing(t)
		drawn := false
		for _, r := range rows {
			drawn = drawn || r.kind == "icon" && r.box == at[i]
		}
		if !drawn {
			t.Errorf("rig-%d lists no button at %v: %+v", i, at[i], rows)
		}
	}
	for i, tr := range rigs {
		for j, box := range at {
			x, y := (box[0]+box[2])/2, (box[1]+box[3])/2
			res := tr.call(t, "tap", map[string]any{"bbox": []float64{x - 0.01, y - 0.01, x + 0.01, y + 0.01}})
			refused := res.isError && strings.Contains(res.text(), "overlaps AssistiveTouch button — aim aside")
			if refused != (i == j) {
				t.Errorf("rig-%d tapping the centre of rig-%d's button: %q", i, j, res.text())
			}
			tr.call(t, "home_screen", nil)
		}
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
