//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/trace"
)

// browser starts a headless Chromium (Debian's, hack/install-chromium.sh)
// that sends the cluster user's token with every request, as `kubectl claw
// ui`'s proxy does.
func browser(t *testing.T) context.Context {
	t.Helper()
	out, err := exec.Command(filepath.Join(cluster.Root, "hack", "install-chromium.sh"), "--print").Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		t.Fatalf("no Chromium (%v): run hack/install-chromium.sh, as make e2e does", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.WindowSize(1280, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel2)
	tok, err := cluster.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + tok}}); err != nil {
		t.Fatalf("set the token header: %v", err)
	}
	return ctx
}

// screenshot saves the page (the whole page, or the window's view when
// full is false) as a PNG under .e2e/screenshots/ for a reviewer.
func screenshot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100) // 100: PNG
	}
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := filepath.Join(cluster.Dir, "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// attemptEvents reads an attempt's events from the trace server's API.
func attemptEvents(t *testing.T, run string, n int) []events.Event {
	t.Helper()
	_, _, body := traceGet(t, fmt.Sprintf("/api/v1/runs/default/%s/attempts/%d/events", run, n))
	var out []events.Event
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, trace.MaxLine)
	for sc.Scan() {
		var ev events.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// The trace viewer as a person uses it, in Chromium: a live run's page gains
// turns without a reload; the STUCK-then-DONE run shows both attempts and
// every turn, every screen loads, and the tap is drawn where the event says.
func TestTraceViewerInChromium(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	base := cluster.TraceServerURL()

	// A live run: slow touches make a session of about 25 s.
	setFaults(t, rigLiveTrace, slowTaps)
	create(t, newRun("e2e-live-trace", rigLiveTrace, "timer", "Set a 5 minute timer in the Clock app and start it."))
	waitRun(t, "e2e-live-trace", runTimeout, "its first turn", func(r *farmv1.AgentRun) bool {
		return r.Status.Progress != nil && r.Status.Progress.Turn >= 1
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/runs/default/e2e-live-trace"),
		chromedp.WaitVisible(chromedp.CSS("#attempt-1"))); err != nil {
		t.Fatalf("open the live run: %v", err)
	}
	eval[any](t, ctx, `window.__sameDocument = true`)
	before := eval[int](t, ctx, `document.querySelectorAll('#attempt-1 .turn').length`)
	deadline := time.Now().Add(90 * time.Second)
	after := before
	for after <= before && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		after = eval[int](t, ctx, `document.querySelectorAll('#attempt-1 .turn').length`)
	}
	if after <= before || !eval[bool](t, ctx, `window.__sameDocument === true`) {
		t.Fatalf("the live page went from %d to %d turns (same document: %v); want more turns without a reload",
			before, after, eval[bool](t, ctx, `window.__sameDocument === true`))
	}
	t.Logf("live: the page went from %d to %d turns without a reload", before, after)
	screenshot(t, ctx, "run-live.png", false)

	// The finished STUCK-then-DONE run (made here if TestStuckThenDone has not started yet).
	waitFinished(t, stuckOnceRun(t), farmv1.RunSucceeded)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/runs/default/e2e-stuck-once"),
		chromedp.WaitVisible(chromedp.CSS("#attempt-2"))); err != nil {
		t.Fatalf("open the run: %v", err)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('.attempt').length`); n != 2 {
		t.Fatalf("%d attempts shown, want 2", n)
	}
	var tapTurn, tapAttempt int
	var tapBBox []float64
	for _, n := range []int{1, 2} {
		turns := map[int]bool{}
		for _, ev := range attemptEvents(t, "e2e-stuck-once", n) {
			if ev.Turn > 0 {
				turns[ev.Turn] = true
			}
			if ev.Type == events.TypeToolStart && ev.Tool == "tap" && tapBBox == nil {
				var a struct{ BBox []float64 }
				if json.Unmarshal(ev.Args, &a) == nil && len(a.BBox) == 4 {
					tapTurn, tapAttempt, tapBBox = ev.Turn, n, a.BBox
				}
			}
		}
		shown := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('#attempt-%d .turn').length`, n))
		if len(turns) == 0 || shown != len(turns) {
			t.Errorf("attempt %d: %d turns shown, the events have %d", n, shown, len(turns))
		}
	}
	// Every screen has loaded.
	var imgs struct{ Total, Loaded int }
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		imgs = eval[struct{ Total, Loaded int }](t, ctx, `(() => { const i = [...document.images];
			return {Total: i.length, Loaded: i.filter(x => x.complete && x.naturalWidth > 0).length}; })()`)
		if imgs.Total > 0 && imgs.Loaded == imgs.Total {
			break
		}
	}
	if imgs.Total == 0 || imgs.Loaded != imgs.Total {
		t.Errorf("%d of %d screens loaded", imgs.Loaded, imgs.Total)
	}
	// The tap is drawn over its screen at the bbox the event recorded.
	if tapBBox == nil {
		t.Fatal("the run's events have no tap")
	}
	rect := eval[[]float64](t, ctx, fmt.Sprintf(`(() => {
		const turn = document.getElementById('a%d-t%d');
		const img = turn.querySelector('.screen img'), g = turn.querySelector('.gesture.tap');
		if (!img || !g) return [];
		const a = img.getBoundingClientRect(), b = g.getBoundingClientRect();
		return [(b.left - a.left) / a.width, (b.top - a.top) / a.height, (b.right - a.left) / a.width, (b.bottom - a.top) / a.height];
	})()`, tapAttempt, tapTurn))
	if len(rect) != 4 {
		t.Fatalf("turn %d of attempt %d shows no screen with a tap drawn on it", tapTurn, tapAttempt)
	}
	for i := range 4 {
		// The overlay's 2 px border is drawn inside its box: allow 2 % of the screen.
		if math.Abs(rect[i]-tapBBox[i]) > 0.02 {
			t.Errorf("the tap of a%d-t%d is drawn at %.3f, the event's bbox is %v", tapAttempt, tapTurn, rect, tapBBox)
			break
		}
	}
	screenshot(t, ctx, "run.png", true)
	screenshot(t, ctx, "run-top.png", false)

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#runs"))); err != nil {
		t.Fatalf("open the runs list: %v", err)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#runs tr.run').length`); n < 2 {
		t.Errorf("the runs list shows %d runs", n)
	}
	screenshot(t, ctx, "runs.png", false)
}
