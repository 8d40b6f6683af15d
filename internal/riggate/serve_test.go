package riggate

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

func TestParseRigs(t *testing.T) {
	rigs, err := ParseRigs([]string{"farm/rig-0=http://127.0.0.1:8048", "farm/rig-1=http://127.0.0.1:8049/x/, lab/rig-0=https://[::1]:8048"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rigs) != 3 || rigs["farm/rig-1"].String() != "http://127.0.0.1:8049/x/" || rigs["lab/rig-0"].Host != "[::1]:8048" {
		t.Errorf("rigs %v", rigs)
	}
	for in, want := range map[string]string{
		"rig-0=http://127.0.0.1:8048":          "want namespace/rig=URL",
		"farm/rig-0":                           "want namespace/rig=URL",
		"farm/a/b=http://127.0.0.1:1":          "want namespace/rig=URL",
		"farm/rig-0=127.0.0.1:8048":            "is not an http(s) URL",
		"farm/rig-0=http://u:p@127.0.0.1:8048": "carries no credentials",
		"farm/r=http://h:1,farm/r=http://h:2":  "named twice",
		" , ":                                  "no rig to front",
	} {
		if _, err := ParseRigs([]string{in}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRigs(%q): %v, want %q", in, err, want)
		}
	}
}

// The health route is open to a GET, as the manager probes it without a
// pod's token; nothing else of the rig is, whatever the path says.
func TestOnlyTheHealthRouteIsPublic(t *testing.T) {
	f := newFarm(t)
	f.gw.Public = DefaultPublicPaths
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/api/status", http.StatusOK},
		{http.MethodHead, "/api/status", http.StatusOK},
		{http.MethodPost, "/api/status", http.StatusUnauthorized},
		{http.MethodGet, "/api/status/../../mcp", http.StatusUnauthorized},
		{http.MethodGet, "/api/status/", http.StatusUnauthorized},
		{http.MethodGet, "/mcp", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(c.method, f.http.URL+"/rigs/"+f.ns+"/rig-a"+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.code)
		}
	}
	f.rig.mu.Lock()
	defer f.rig.mu.Unlock()
	for _, call := range f.rig.calls {
		if !strings.HasPrefix(call, "GET /api/status ") && !strings.HasPrefix(call, "HEAD /api/status ") {
			t.Errorf("the rig saw %q without a token", call)
		}
	}
}

// Serve is the gateway as `rignode gateway` runs it: a session is cut by
// the Lease's watch alone, within a second of the Lease moving.
func TestServeCutsASessionWhenTheLeaseMoves(t *testing.T) {
	f := newFarm(t)
	holder, _ := f.attemptToken(t, "r1", "rig-a", contract.DefaultRigAudience)
	rigs, err := ParseRigs([]string{f.ns + "/rig-a=" + f.rigURL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Options{Listen: "127.0.0.1:0", Rigs: rigs, Config: env.Config, Logf: t.Logf,
			Serving: func(a string) { addr <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	base := "http://" + <-addr + "/rigs/" + f.ns + "/rig-a"

	resp, err := http.Get(base + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(b) != `{"ready":true}` {
		t.Errorf("health through the gateway: %d %s", resp.StatusCode, b)
	}
	resp.Body.Close()

	req, _ := http.NewRequest(http.MethodGet, base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+holder)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("the holder's stream: %d %s", resp.StatusCode, b)
	}
	events := bufio.NewReader(resp.Body)
	if _, err := events.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ended := make(chan time.Time, 1)
	go func() {
		for {
			if _, err := events.ReadString('\n'); err != nil {
				ended <- time.Now()
				return
			}
		}
	}()
	moved := time.Now()
	f.lease(t, "rig-a", "r2")
	select {
	case at := <-ended:
		if d := at.Sub(moved); d > time.Second {
			t.Errorf("the stream was cut %s after the Lease moved, want within a second", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the old holder's stream still runs 5 s after the Lease moved")
	}

	// And the Lease deleted (the run's rig released): the next holder's
	// stream is cut as well.
	next, nextPod := f.attemptToken(t, "r2", "rig-a", contract.DefaultRigAudience)
	req, _ = http.NewRequest(http.MethodGet, base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+next)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp2.Body)
		t.Fatalf("the new holder's stream: %d %s", resp2.StatusCode, b)
	}
	l := f.lease(t, "rig-a", "r2")
	if err := env.Client.Delete(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	waitCut(t, resp2, "its rig's Lease was deleted")

	// And a pod being deleted loses its stream although its run still
	// holds the Lease (it does until the pod has ended).
	f.lease(t, "rig-a", "r2")
	// (The gateway's watch sees the new Lease a moment after it is made.)
	var resp3 *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp3, err = http.DefaultClient.Do(req.Clone(context.Background()))
		if err != nil {
			t.Fatal(err)
		}
		if resp3.StatusCode == http.StatusOK {
			break
		}
		b, _ := io.ReadAll(resp3.Body)
		resp3.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the holder's stream: %d %s", resp3.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer resp3.Body.Close()
	if err := env.Client.Delete(context.Background(), nextPod); err != nil {
		t.Fatal(err)
	}
	waitCut(t, resp3, "its pod was deleted")
}

// waitCut wants the stream resp cut within a second.
func waitCut(t *testing.T, resp *http.Response, after string) {
	t.Helper()
	start := time.Now()
	cut := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		close(cut)
	}()
	select {
	case <-cut:
		if d := time.Since(start); d > time.Second {
			t.Errorf("a stream was cut %s after %s, want within a second", d, after)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a stream still runs 5 s after %s", after)
	}
}
