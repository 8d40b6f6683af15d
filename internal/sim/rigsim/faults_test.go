package rigsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
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
			if !strings.Contains(r.text(), "busy, retry") {
				t.Fatalf("refused with %q, want busy, retry", r.text())
			}
		}
	}
	if refused != 1 {
		t.Fatalf("results %q and %q: want exactly one refused busy, retry", results[0].text(), results[1].text())
	}
	if res := tr.call(t, "peek", nil); res.isError {
		t.Fatalf("after the first finished: %s", res.text())
	}
}

func TestFaults(t *testing.T) {
	clock := map[string]any{"bbox": []float64{0.104, 0.167, 0.177, 0.180}}
	t.Run("busy contention", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{Busy: 1}})
		if res := tr.call(t, "peek", nil); !res.isError || !strings.Contains(res.text(), "Error executing tool peek: busy, retry") {
			t.Fatalf("peek = %q", res.text())
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
		if res := tr.call(t, "screenshot", nil); !res.isError || !strings.Contains(res.text(), "screenshot upload timed out") {
			t.Fatalf("screenshot = %q", res.text())
		}
		if res := tr.call(t, "send_to_clipboard", map[string]any{"text": "x"}); res.isError || !strings.HasPrefix(res.texts[0], clipboardTimeout) || tr.state(t).Clipboard != "" {
			t.Fatalf("clipboard = %q", res.text())
		}
		if res := tr.call(t, "peek", nil); res.isError {
			t.Fatal("peek needs no bridge")
		}
		var st farmv1.RigHealth
		getJSON(t, tr.url+"/api/status", &st)
		if st.Bridge || !st.Arm {
			t.Fatalf("status = %+v", st)
		}
	})
	t.Run("camera hiccups leave gestures text-only", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{CameraHiccups: 1}})
		res := tr.call(t, "tap", clock)
		if res.isError || res.images != 0 || len(res.texts) != 1 || !strings.Contains(res.texts[0], "camera hiccup") {
			t.Fatalf("tap = %q with %d images", res.texts, res.images)
		}
		if tr.state(t).Foreground != "Clock" {
			t.Fatal("the tap itself should still have happened")
		}
	})
	t.Run("health flags false", func(t *testing.T) {
		tr := startRig(t, Config{Faults: Faults{Health: map[string]bool{"camera": false, "ready": false}}})
		if res := tr.call(t, "peek", nil); !res.isError || !strings.Contains(res.text(), "hardware not set up") {
			t.Fatalf("peek with no camera = %q", res.text())
		}
		var st map[string]bool
		getJSON(t, tr.url+"/api/status", &st)
		want := map[string]bool{"arm": true, "camera": false, "bridge": true, "calibrated": true, "origin_pinned": true, "ready": false, "layout_learned": true}
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
	for _, bad := range []string{`{"glare": 2}`, `{"latency": {"fly": "1s"}}`, `{"health": {"mood": false}}`, `{"lasers": true}`, `not json`} {
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
	for _, bad := range []string{"seed: x", "colour: red", "faults: {glare: 3}", "phone: {autoLock: soon}", "timeScale: -1"} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%q) accepted it", bad)
		}
	}
}

// GET /api/status serves farmv1.RigHealth, and every one of its fields can be
// faulted on its own: a field the API gains that rigsim does not fault, or a
// fault name wired to the wrong field, fails here.
func TestHealthFaultsCoverRigHealth(t *testing.T) {
	r := New("r", Config{})
	for _, name := range healthFields {
		if err := r.SetFaults(Faults{Health: map[string]bool{name: false}}); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r.Health())
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]bool
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(healthFields) {
			t.Fatalf("RigHealth has %d fields %v; rigsim faults %d: %v", len(got), got, len(healthFields), healthFields)
		}
		for k, v := range got {
			if v != (k != name) {
				t.Errorf("fault health.%s=false: %s is %v", name, k, v)
			}
		}
	}
}
