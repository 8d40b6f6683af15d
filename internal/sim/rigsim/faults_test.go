package rigsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
)

func TestFaultLatencyIsScaledAndOverridable(t *testing.T) {
	tr := startRig(t, Config{TimeScale: 0.05, Faults: Faults{Latency: map[string]Duration{"peek": Duration(8 * time.Second)}}})
	start := time.Now()
	tr.call(t, "peek", nil) // 8 s × 0.05 = 400 ms
	if d := time.Since(start); d < 400*time.Millisecond || d > 10*time.Second {
		t.Fatalf("peek took %s, want about 400ms", d)
	}
	clock0 := tr.state(t).Clock
	start = time.Now()
	tr.call(t, "go_back", nil) // typical 3 s × 0.05 = 150 ms
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("go_back took %s, want at least 150ms", d)
	}
	if adv := tr.state(t).Clock.Sub(clock0); adv != 3*time.Second {
		t.Fatalf("the phone's clock moved %s, want the tool's 3 s", adv)
	}
}

func TestBusyLockRefusesASecondGesture(t *testing.T) {
	tr := startRig(t, Config{TimeScale: 0.1}) // a tap holds the lock 200 ms
	second := connect(t, tr.url+"/mcp")
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i, cs := range []*mcp.ClientSession{tr.cs, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(50 * time.Millisecond)
			}
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tap", Arguments: map[string]any{"bbox": []float64{0.4, 0.5, 0.5, 0.55}}})
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = split(res)
		}()
	}
	wg.Wait()
	// Under load either call may win the lock; exactly one must be refused.
	refused := 0
	for _, r := range results {
		if r.isError {
			refused++
			if want := "Error executing tool tap: " + string(errBusy); r.text() != want {
				t.Fatalf("refused with %q, want %q", r.text(), want)
			}
		}
	}
	if refused != 1 {
		t.Fatalf("results %q and %q: want exactly one refused as busy", results[0].text(), results[1].text())
	}
	if res := tr.call(t, "peek", nil); res.isError {
		t.Fatalf("after the first finished: %s", res.text())
	}
}

func TestFaults(t *testing.T) {
	clock := map[string]any{"bbox": []float64{0.104, 0.167, 0.177, 0.180}}
	t.Run("busy contention", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{Busy: 1}})
		want := "Error executing tool peek: PhysiClaw is busy — wait for the current operation to finish, then retry."
		if res := tr.call(t, "peek", nil); !res.isError || res.text() != want {
			t.Fatalf("peek = %q, want %q", res.text(), want)
		}
		if res := tr.call(t, "tap", map[string]any{}); !strings.Contains(res.text(), "bbox is required") {
			t.Fatalf("a bad call on a busy rig = %q, want its argument checked first", res.text())
		}
	})
	t.Run("glare drops and misreads labels through the camera, not in a screenshot", func(t *testing.T) {
		tr := startRig(t, Config{Seed: 3, Faults: Faults{Glare: 1}})
		shot := tr.call(t, "screenshot", nil).listing(t)
		peek := tr.call(t, "peek", nil).listing(t)
		if !has(shot, "Settings") || !has(shot, "Messages") {
			t.Fatal("the screenshot lost labels")
		}
		texts, lowConf := 0, 0
		for _, r := range peek {
			if r.kind == "text" {
				texts++
				if has(shot, r.label) {
					t.Errorf("label %q read cleanly under full glare", r.label)
				}
				if r.conf < 0.7 {
					lowConf++
				}
			}
		}
		if texts == 0 || texts >= countText(shot) || lowConf != texts {
			t.Fatalf("glare: %d text rows (%d low confidence) against %d clean ones", texts, lowConf, countText(shot))
		}
	})
	t.Run("glare is repeatable with a seed", func(t *testing.T) {
		a := startRig(t, Config{Seed: 9, Faults: Faults{Glare: 0.5}})
		b := startRig(t, Config{Seed: 9, Faults: Faults{Glare: 0.5}})
		for range 3 {
			if x, y := a.call(t, "peek", nil).texts[0], b.call(t, "peek", nil).texts[0]; x != y {
				t.Fatalf("same seed, different listings:\n%s\n%s", x, y)
			}
		}
	})
	t.Run("missed taps do nothing", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{MissedTaps: 1}})
		res := tr.call(t, "tap", clock)
		if !strings.Contains(res.texts[0], "Tapped at bbox") || !strings.Contains(res.texts[0], verdictUnchanged) || tr.state(t).Page != "home" {
			t.Fatalf("tap = %q, page %q", res.texts[0], tr.state(t).Page)
		}
	})
	t.Run("a bumped rig taps off by a constant offset", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{TapOffset: [2]float64{0, 0.13}}})
		tr.call(t, "tap", clock) // lands a grid row lower: Photos
		if s := tr.state(t); s.Foreground != "Photos" {
			t.Fatalf("foreground = %q, want Photos (a row below Clock)", s.Foreground)
		}
	})
	t.Run("an app crashes", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{CrashApp: "Clock"}})
		res := tr.call(t, "tap", clock)
		if s := tr.state(t); s.Page != "home" || len(s.Running) != 0 || !strings.Contains(res.texts[0], verdictUnchanged) {
			t.Fatalf("after opening a crashing app: %+v, %q", s, res.texts[0])
		}
		tr.call(t, "tap", clock)
		if s := tr.state(t); s.Foreground != "Clock" {
			t.Fatal("the crash is one-shot; Clock should open the second time")
		}
		postJSON(t, tr.url+"/api/sim/crash", `{}`)
		if s := tr.state(t); s.Foreground != "" || len(s.Running) != 0 {
			t.Fatalf("after POST /api/sim/crash: %+v", s)
		}
		if r := postJSON(t, tr.url+"/api/sim/crash", `{"app":"Shop"}`); r.StatusCode != http.StatusConflict {
			t.Fatalf("crashing an app that is not running: %s", r.Status)
		}
	})
	t.Run("the phone locks itself", func(t *testing.T) {
		tr := startRig(t, Config{Phone: PhoneConfig{AutoLock: Duration(time.Minute)}})
		tr.tapLabel(t, "Settings")
		tr.rig.Advance(2 * time.Minute)
		if rows := tr.call(t, "peek", nil).listing(t); !has(rows, "Swipe up to unlock") {
			t.Fatal("auto-lock did not lock")
		}
		tr.call(t, "unlock_phone", nil)
		postJSON(t, tr.url+"/api/sim/lock", "")
		if !tr.state(t).Locked {
			t.Fatal("POST /api/sim/lock did not lock")
		}
	})
	t.Run("the bridge is down", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{"bridge": false}}})
		want := "Error executing tool screenshot: Screenshot upload timed out — the phone may be off Wi-Fi or on a different Wi-Fi network than this computer"
		if res := tr.call(t, "screenshot", nil); !res.isError || res.text() != want {
			t.Fatalf("screenshot = %q, want %q", res.text(), want)
		}
		if res := tr.call(t, "peek", nil); res.isError {
			t.Fatal("peek needs no bridge")
		}
		var st contract.RigStatus
		getJSON(t, tr.url+"/api/status", &st)
		if st.Bridge || !st.Arm || !st.Ready {
			t.Fatalf("status = %+v, want only the bridge down", st)
		}
	})
	t.Run("camera hiccups leave gestures text-only", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{CameraHiccups: 1}})
		res := tr.call(t, "tap", clock)
		want := "Tapped at bbox [0.104, 0.167, 0.177, 0.18] " + hints[contract.ToolTap] + " (auto-view unavailable — `peek` to see the screen)"
		if res.isError || res.images != 0 || len(res.texts) != 1 || res.texts[0] != want {
			t.Fatalf("tap = %q with %d images, want %q alone", res.texts, res.images, want)
		}
		if tr.state(t).Foreground != "Clock" {
			t.Fatal("the tap itself should still have happened")
		}
	})
	t.Run("frames that cannot be compared leave the verdict out", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{NoVerdict: 1}})
		res := tr.call(t, "tap", clock)
		want := "Tapped at bbox [0.104, 0.167, 0.177, 0.18] " + hints[contract.ToolTap]
		if res.isError || res.images != 1 || len(res.texts) != 2 || res.texts[0] != want || !has(res.listing(t), "Timers") {
			t.Fatalf("tap = %q with %d images, want %q, the view and its listing", res.texts, res.images, want)
		}
		res = tr.call(t, "sequence", map[string]any{"actions": []any{
			map[string]any{"tool_name": "tap", "arg": []float64{0.4, 0.5, 0.5, 0.55}},
			map[string]any{"tool_name": "tap", "arg": []float64{0.4, 0.5, 0.5, 0.55}}}})
		if want := "\n2 tap ok — Tapped at bbox [0.4, 0.5, 0.5, 0.55] " + hints[contract.ToolSequence]; !strings.HasSuffix(res.texts[0], want) {
			t.Fatalf("sequence = %q, want it to end %q", res.texts[0], want)
		}
	})
	t.Run("health flags false", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{"camera": false}}})
		if res := tr.call(t, "peek", nil); !res.isError || res.text() != "Error executing tool peek: "+string(errNotSetUp) {
			t.Fatalf("peek with no camera = %q", res.text())
		}
		var st map[string]any
		getJSON(t, tr.url+"/api/status", &st)
		// The refused call counts: its session is open, so bridge reads false.
		want := map[string]any{"arm": true, "camera": false, "bridge": false, "calibrated": false, "origin_pinned": true, "ready": false, "layout_learned": true}
		for k, v := range want {
			if got, ok := st[k]; !ok || got != v {
				t.Errorf("status.%s = %v (present %v), want %v", k, got, ok, v)
			}
		}
	})
	t.Run("disconnected", func(t *testing.T) {
		tr := startRig(t, Config{})
		postJSON(t, tr.url+"/api/sim/faults", `{"disconnected": true}`)
		if _, err := http.Get(tr.url + "/api/status"); err == nil {
			t.Fatal("the health route answered while disconnected")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := tr.cs.CallTool(ctx, &mcp.CallToolParams{Name: "peek"}); err == nil {
			t.Fatal("an MCP call succeeded while disconnected")
		}
		postJSON(t, tr.url+"/api/sim/faults", `{"disconnected": false}`)
		fresh := connect(t, tr.url+"/mcp")
		if res, err := fresh.CallTool(context.Background(), &mcp.CallToolParams{Name: "peek"}); err != nil || res.IsError {
			t.Fatalf("after reconnecting: %v", err)
		}
	})
}

// A restarted rig has forgotten its MCP sessions: the old one fails, a new one works.
func TestRestartDropsSessions(t *testing.T) {
	tr := startRig(t, Config{})
	tr.call(t, "peek", nil)
	postJSON(t, tr.url+"/api/sim/restart", "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := tr.cs.CallTool(ctx, &mcp.CallToolParams{Name: "peek"}); err == nil {
		t.Fatal("the old session still works after a restart")
	}
	fresh := connect(t, tr.url+"/mcp")
	if res, err := fresh.CallTool(context.Background(), &mcp.CallToolParams{Name: "peek"}); err != nil || res.IsError {
		t.Fatalf("a new session after the restart: %v", err)
	}
}

func countText(rows []row) int {
	n := 0
	for _, r := range rows {
		if r.kind == "text" {
			n++
		}
	}
	return n
}

func TestFaultControlEndpoint(t *testing.T) {
	tr := startRig(t, Config{})
	r := postJSON(t, tr.url+"/api/sim/faults", `{"glare": 0.2, "latency": {"peek": "1s"}}`)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("POST faults: %s", r.Status)
	}
	postJSON(t, tr.url+"/api/sim/faults", `{"missedTaps": 0.5}`)
	var f Faults
	getJSON(t, tr.url+"/api/sim/faults", &f)
	if f.Glare != 0.2 || f.MissedTaps != 0.5 || time.Duration(f.Latency["peek"]) != time.Second {
		t.Fatalf("faults = %+v, want the two posts merged", f)
	}
	if r := postJSON(t, tr.url+"/api/sim/faults", `{"health": {"mapping_b": false, "ready": false}}`); r.StatusCode != http.StatusOK {
		t.Fatalf("POST a step and a field fault: %s", r.Status)
	}
	for _, bad := range []string{`{"glare": 2}`, `{"noVerdict": -0.5}`, `{"latency": {"fly": "1s"}}`, `{"health": {"mood": false}}`, `{"health": {"focus": false}}`, `{"lasers": true}`, `not json`} {
		r := postJSON(t, tr.url+"/api/sim/faults", bad)
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != http.StatusBadRequest || len(b) == 0 {
			t.Errorf("POST %s: %s %q, want 400 with a reason", bad, r.Status, b)
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, tr.url+"/api/sim/faults", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cleared Faults
	getJSON(t, tr.url+"/api/sim/faults", &cleared)
	if !reflect.DeepEqual(cleared, Faults{}) {
		t.Fatalf("after DELETE: %+v", cleared)
	}
	if r := postJSON(t, tr.url+"/api/sim/advance", `{"seconds": -1}`); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("advance by -1: %s", r.Status)
	}
}

func TestConfigFile(t *testing.T) {
	cfg, err := LoadConfig("../../../test/scenarios/rigs/glare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Seed != 7 || cfg.Faults.Glare != 0.3 || !cfg.Phone.Locked || time.Duration(cfg.Phone.AutoLock) != 10*time.Minute || time.Duration(cfg.Faults.Latency["peek"]) != 6*time.Second {
		t.Fatalf("config = %+v", cfg)
	}
	at, err := ParseConfig([]byte("assistiveTouch: [0.05, 0.4, 0.15, 0.446]\nrigs: {rig-1: {assistiveTouch: [0.4, 0.9, 0.5, 0.946]}}"))
	if err != nil || *at.AssistiveTouch != [4]float64{0.05, 0.4, 0.15, 0.446} || *at.Rigs["rig-1"].AssistiveTouch != [4]float64{0.4, 0.9, 0.5, 0.946} {
		t.Fatalf("assistiveTouch config = %+v, %v", at, err)
	}
	if got := New("r", at).Status().AssistiveTouchAt(); got != "(0.100, 0.423)" {
		t.Errorf("a rig with assistiveTouch %v reports it at %q", *at.AssistiveTouch, got)
	}
	if got := NewFarm(2, at).Rig("rig-1").Status().AssistiveTouchAt(); got != "(0.450, 0.923)" {
		t.Errorf("rig-1 of the farm reports its button at %q, want its own", got)
	}
	if err := at.CheckFarm(2); err != nil {
		t.Fatalf("a farm of 2 has rig-1: %v", err)
	}
	if err := at.CheckFarm(1); err == nil || !strings.Contains(err.Error(), "rigs.rig-1: no such rig") {
		t.Fatalf("a farm of 1 has no rig-1, CheckFarm says %v", err)
	}
	for _, bad := range []string{"seed: x", "colour: red", "faults: {glare: 3}", "phone: {autoLock: soon}", "timeScale: -1",
		"assistiveTouch: [0.5, 0.5, 0.4, 0.6]", "assistiveTouch: [0.9, 0.9, 1.1, 1]", "assistiveTouch: [0.1, 0.2]",
		"rigs: {robot: {}}", "rigs: {rig-01: {}}", "rigs: {rig-0: {assistiveTouch: [1, 0, 0, 1]}}"} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%q) accepted it", bad)
		}
	}
}

// GET /api/status serves contract.RigStatus, and every one of its fields and
// every step rigsim reports can be faulted on its own: a field the status
// gains that rigsim does not fault, or a fault name wired to the wrong
// field, fails here. A field or step PhysiClaw's ready or calibrated rests
// on takes them down with it.
func TestHealthFaultsCoverRigStatus(t *testing.T) {
	r := New("r", Config{})
	read := func() (map[string]any, map[string]any) {
		t.Helper()
		b, err := json.Marshal(r.Status())
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		steps, _ := got["steps"].(map[string]any)
		delete(got, "steps")
		return got, steps
	}
	got, steps := read()
	wantSteps := map[string]any{"viewport_shift": "dpr=3, offset=(0, 0)", "rotation": "none", "mapping_a": "OK", "mapping_b": "OK",
		"validated": true, "alignment": "OK", "assistive_touch": "(0.930, 0.643)"}
	if !reflect.DeepEqual(steps, wantSteps) {
		t.Fatalf("steps = %v, want %v", steps, wantSteps)
	}
	if len(got) != len(healthFields) {
		t.Fatalf("RigStatus has %d fields besides steps %v; rigsim faults %d: %v", len(got), got, len(healthFields), healthFields)
	}
	implies := map[string][]string{ // a key faulted false → the fields that go false with it
		"arm": {"calibrated", "ready"}, "camera": {"calibrated", "ready"}, "calibrated": {"ready"},
		contract.StepMappingA: {"calibrated", "ready"}, contract.StepMappingB: {"calibrated", "ready"}, contract.StepValidated: {"calibrated", "ready"},
		contract.StepViewportShift: {"ready"}, contract.StepAssistiveTouch: {"ready"},
	}
	for _, name := range append(slices.Clone(healthFields), simSteps...) {
		if err := r.SetFaults(Faults{Health: map[string]bool{name: false}}); err != nil {
			t.Fatal(err)
		}
		got, steps := read()
		for k, v := range got {
			want := k != name && !slices.Contains(implies[name], k)
			if v != want {
				t.Errorf("fault health.%s=false: %s is %v, want %v", name, k, v, want)
			}
		}
		for _, k := range simSteps {
			if _, ok := steps[k]; ok != (k != name) {
				t.Errorf("fault health.%s=false: step %s present %v", name, k, ok)
			}
		}
	}
}

// Tools answer as on a rig that is not set up whenever /api/status says it is
// not calibrated — a missing mapping step too — after their arguments are
// checked; a step calibration does not need only takes ready down.
func TestNotSetUp(t *testing.T) {
	notSetUp := func(tool string) string {
		return "Error executing tool " + tool + ": Hardware not set up. Run /setup to connect and calibrate."
	}
	clock := map[string]any{"bbox": []float64{0.104, 0.167, 0.177, 0.180}}
	badSteps := map[string]any{"actions": []any{map[string]any{"tool_name": "bogus"}, map[string]any{"tool_name": "tap"}}}
	for _, key := range []string{"arm", "camera", "calibrated", contract.StepMappingA, contract.StepMappingB, contract.StepValidated} {
		t.Run(key, func(t *testing.T) {
			tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{key: false}}})
			for tool, args := range map[string]any{"peek": nil, "screenshot": nil, "tap": clock, "home_screen": nil,
				"send_to_clipboard": map[string]any{"text": "hi"}, "sequence": badSteps} {
				if res := tr.call(t, tool, args); !res.isError || res.text() != notSetUp(tool) {
					t.Errorf("%s = %q, want %q", tool, res.text(), notSetUp(tool))
				}
			}
			if res := tr.call(t, "tap", map[string]any{"bbox": []float64{0.6, 0.4, 0.4, 0.5}}); !strings.Contains(res.text(), "left < right") {
				t.Errorf("a bad bbox on a rig not set up = %q, want its argument checked first", res.text())
			}
			if res := tr.call(t, "sequence", map[string]any{"actions": []any{clock}}); !strings.Contains(res.text(), "2 to 5 steps") {
				t.Errorf("a sequence of one on a rig not set up = %q, want its argument checked first", res.text())
			}
			var st contract.RigStatus
			getJSON(t, tr.url+"/api/status", &st)
			if st.Calibrated || st.Ready || (key != "arm" && key != "camera" && key != "calibrated" && st.Done(key)) {
				t.Errorf("status = %+v, want not calibrated, not ready and step %s missing", st, key)
			}
		})
	}
	for _, key := range []string{contract.StepViewportShift, contract.StepAssistiveTouch, "ready"} {
		t.Run(key, func(t *testing.T) {
			tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{key: false}}})
			if res := tr.call(t, "tap", clock); res.isError {
				t.Errorf("tap with %s false = %q, want it served", key, res.text())
			}
			var st contract.RigStatus
			getJSON(t, tr.url+"/api/status", &st)
			if !st.Calibrated || st.Ready || st.Done(key) {
				t.Errorf("status = %+v, want calibrated, not ready, %s missing", st, key)
			}
		})
	}
	t.Run("origin not pinned", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{"origin_pinned": false}}})
		const want = "Arm work frame is not pinned to the calibration — restart the server (--hot-start with the arm at its park spot), or recalibrate."
		for tool, args := range map[string]any{"tap": clock, "go_back": nil, "peek": nil} {
			if res := tr.call(t, tool, args); !res.isError || res.text() != "Error executing tool "+tool+": "+want {
				t.Errorf("%s = %q", tool, res.text())
			}
		}
		if tr.state(t).Touches != 0 {
			t.Error("an unpinned arm touched the phone")
		}
	})
}

// bridge reads false while a session drives the rig, as PhysiClaw's does
// while its bridge page sleeps during a task; that alone fails nothing.
func TestBridgeIsDownWhileASessionIsActive(t *testing.T) {
	tr := startRig(t, Config{})
	bridge := func() bool {
		t.Helper()
		var st contract.RigStatus
		getJSON(t, tr.url+"/api/status", &st)
		return st.Bridge
	}
	if !bridge() {
		t.Fatal("bridge false before any session drove the rig")
	}
	tr.call(t, "peek", nil)
	if bridge() {
		t.Fatal("bridge true while a session is open")
	}
	if res := tr.call(t, "screenshot", nil); res.isError {
		t.Fatalf("screenshot during a session = %q", res.text())
	}
	if res := tr.call(t, "send_to_clipboard", map[string]any{"text": "hi"}); res.isError || tr.state(t).Clipboard != "hi" {
		t.Fatalf("clipboard during a session = %q", res.text())
	}
	tr.cs.Close()
	if !bridge() {
		t.Fatal("bridge false after the session closed")
	}
	var st contract.RigStatus
	if r := postJSON(t, tr.url+"/api/sim/restart", ""); json.NewDecoder(r.Body).Decode(&st) != nil || !st.Bridge || !st.Ready {
		t.Fatalf("POST /api/sim/restart answered %+v, want the status", st)
	}
}

// The clipboard answers one line and never echoes the text; when the phone
// never fetches it (its bridge page in the background) it is an error and
// the phone keeps its old clipboard, and a sequence stops there.
func TestClipboard(t *testing.T) {
	tr := startRig(t, Config{})
	const secret = "my card is 4242"
	res := tr.call(t, "send_to_clipboard", map[string]any{"text": secret})
	want := "Copied 15 chars to phone clipboard " + hints[contract.ToolSendToClipboard]
	if res.isError || res.images != 0 || len(res.texts) != 1 || res.texts[0] != want || strings.Contains(res.text(), "4242") {
		t.Fatalf("clipboard = %q with %d images, want %q alone", res.texts, res.images, want)
	}
	postJSON(t, tr.url+"/api/sim/faults", `{"health": {"bridge": false}}`)
	miss := "Error executing tool send_to_clipboard: clipboard sync FAILED — AssistiveTouch long-pressed but the phone never fetched the text; " +
		"its clipboard still holds the PREVIOUS content, so do NOT paste (the phone may be off Wi-Fi or on a different Wi-Fi network than this computer)"
	if res := tr.call(t, "send_to_clipboard", map[string]any{"text": "new"}); !res.isError || res.text() != miss {
		t.Fatalf("clipboard with the bridge down = %q, want %q", res.text(), miss)
	}
	if c := tr.state(t).Clipboard; c != secret {
		t.Fatalf("the phone's clipboard = %q, want the previous text", c)
	}
	res = tr.call(t, "sequence", map[string]any{"actions": []any{
		map[string]any{"tool_name": "tap", "arg": []float64{0.4, 0.5, 0.5, 0.55}},
		map[string]any{"tool_name": "send_to_clipboard", "arg": "new"},
		map[string]any{"tool_name": "tap", "arg": []float64{0.104, 0.167, 0.177, 0.180}}}})
	wantSeq := "1 tap ok — Tapped at bbox [0.4, 0.5, 0.5, 0.55]\n2 send_to_clipboard FAIL (" + strings.TrimPrefix(miss, "Error executing tool send_to_clipboard: ") +
		") | screen: no visible change " + hints[contract.ToolSequence]
	if res.isError || res.texts[0] != wantSeq {
		t.Fatalf("sequence = %q\nwant %q", res.texts[0], wantSeq)
	}
	if s := tr.state(t); s.Foreground != "" || s.Clipboard != secret {
		t.Fatalf("after the failed step: %+v, want step 3 not run and the clipboard unchanged", s)
	}
}
