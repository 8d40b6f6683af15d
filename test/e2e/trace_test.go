//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/trace"
)

// traceGet reads the trace server as the cluster's user.
func traceGet(t *testing.T, path string) (int, string, string) {
	t.Helper()
	tok, err := cluster.AdminToken()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctxFor(t, 30*time.Second), "GET", cluster.TraceServerURL()+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// checkTrace checks a finished run's trace reached the trace server from its
// loop pods on the rig host: every attempt's events, from session start to
// done with the sentinel the run recorded, and the screens, served as images
// and drawn on in the run page.
func checkTrace(t *testing.T, name string, sentinels ...string) {
	t.Helper()
	code, _, body := traceGet(t, "/api/v1/runs/default/"+name)
	var detail trace.RunDetail
	if code != http.StatusOK || json.Unmarshal([]byte(body), &detail) != nil || len(detail.Attempts) != len(sentinels) {
		t.Fatalf("the trace server's run %s: %d %s; want %d attempts", name, code, body, len(sentinels))
	}
	for i, want := range sentinels {
		n := detail.Attempts[i]
		code, _, stream := traceGet(t, fmt.Sprintf("/api/v1/runs/default/%s/attempts/%d/events", name, n))
		if code != http.StatusOK {
			t.Fatalf("attempt %d events: %d %s", n, code, stream)
		}
		var first, last events.Event
		lines := 0
		sc := bufio.NewScanner(strings.NewReader(stream))
		sc.Buffer(nil, trace.MaxLine)
		for sc.Scan() {
			var ev events.Event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if lines == 0 {
				first = ev
			}
			last = ev
			lines++
		}
		if first.Type != events.TypeSessionStart || first.Attempt != n || last.Type != events.TypeDone || string(last.Sentinel) != want {
			t.Errorf("attempt %d: %d events from %q to %q %q; want session_start … done %s", n, lines, first.Type, last.Type, last.Sentinel, want)
		}
	}
	code, _, page := traceGet(t, "/runs/default/"+name)
	if code != http.StatusOK || strings.Count(page, `class="turn"`) == 0 || !strings.Contains(page, `class="gesture tap"`) {
		t.Fatalf("run page: %d, %d turns, tap drawn: %v", code, strings.Count(page, `class="turn"`), strings.Contains(page, `class="gesture tap"`))
	}
	i := strings.Index(page, `<img src="`)
	if i < 0 {
		t.Fatal("the run page shows no screen")
	}
	src := page[i+len(`<img src="`):]
	src = src[:strings.IndexByte(src, '"')]
	if code, ct, img := traceGet(t, src); code != http.StatusOK || ct != "image/jpeg" || len(img) < 1000 {
		t.Errorf("screen %s: %d %s, %d bytes", src, code, ct, len(img))
	}
}
