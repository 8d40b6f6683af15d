package rig_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

func dial(t *testing.T, r *rigtest.Rig) *rig.Client {
	c, err := rig.Dial(context.Background(), rig.Config{Endpoint: r.Endpoint(), BusyDelay: time.Millisecond,
		ReconnectWindow: 300 * time.Millisecond, ReconnectBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestToolsAndResults(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	c := dial(t, r)
	if c.Instructions() != rigtest.Instructions || len(c.Tools()) != 4 {
		t.Fatalf("instructions %q tools %d", c.Instructions(), len(c.Tools()))
	}
	res, err := c.Call(context.Background(), "peek", []byte(`{}`))
	if err != nil || res.IsError || len(res.Images) != 1 || res.Images[0].MIMEType != "image/jpeg" || !strings.Contains(res.Text, "peek done") {
		t.Fatalf("peek: %+v %v", res, err)
	}
	if len(res.Images[0].Data) != len(r.JPEG) {
		t.Errorf("image %d bytes, want %d", len(res.Images[0].Data), len(r.JPEG))
	}
	r.Busy.Store(3)
	res, err = c.Call(context.Background(), "tap", []byte(`{"bbox":[0.1,0.2,0.3,0.4]}`))
	if err != nil || res.IsError {
		t.Fatalf("busy tap not retried: %+v %v", res, err)
	}
	res, _ = c.Call(context.Background(), "no_such_tool", []byte(`{}`))
	if !res.IsError {
		t.Error("unknown tool should be an error result")
	}
}

func TestReconnect(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	c := dial(t, r)
	// The rig drops and comes back: a read-only call is re-run, a gesture is reported as uncertain.
	r.SetDown(true)
	go func() { time.Sleep(50 * time.Millisecond); r.SetDown(false) }()
	res, err := c.Call(context.Background(), "peek", []byte(`{}`))
	if err != nil || res.IsError {
		t.Fatalf("peek after reconnect: %+v %v", res, err)
	}
	r.SetDown(true)
	go func() { time.Sleep(50 * time.Millisecond); r.SetDown(false) }()
	res, err = c.Call(context.Background(), "tap", []byte(`{"bbox":[0.1,0.2,0.3,0.4]}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text, "may or may not have happened") {
		t.Fatalf("tap across a drop: %+v %v", res, err)
	}
	// Gone for good: ErrUnavailable.
	r.SetDown(true)
	if _, err := c.Call(context.Background(), "peek", []byte(`{}`)); !errors.Is(err, rig.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
}

// Every request to the rig — the handshake, tools/list, each call and the
// closing DELETE — says which attempt is calling, and a client's own
// transport still carries them.
func TestIdentityHeaders(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	target, _ := url.Parse(r.URL)
	var mu sync.Mutex
	var seen []http.Header
	var methods []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, req.Header.Clone())
		methods = append(methods, req.Method)
		mu.Unlock()
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, req)
	}))
	defer proxy.Close()
	var viaOwn atomic.Int32
	own := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		viaOwn.Add(1)
		return http.DefaultTransport.RoundTrip(req)
	})}

	c, err := rig.Dial(context.Background(), rig.Config{Endpoint: proxy.URL + "/mcp", HTTPClient: own,
		Run: "farm/run-1", Attempt: 2, Pod: "run-1-a2-r1"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Call(context.Background(), "peek", []byte(`{}`)); err != nil || res.IsError {
		t.Fatalf("peek: %+v %v", res, err)
	}
	c.Close()

	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 4 || methods[len(methods)-1] != http.MethodDelete {
		t.Fatalf("requests %q: want initialize, its notification, tools/list, the call and a DELETE", methods)
	}
	for i, h := range seen {
		if h.Get(contract.HeaderRun) != "farm/run-1" || h.Get(contract.HeaderAttempt) != "2" || h.Get(contract.HeaderPod) != "run-1-a2-r1" {
			t.Errorf("request %d (%s): run %q attempt %q pod %q", i, methods[i],
				h.Get(contract.HeaderRun), h.Get(contract.HeaderAttempt), h.Get(contract.HeaderPod))
		}
	}
	if int(viaOwn.Load()) != len(seen) {
		t.Errorf("%d of %d requests went through the configured client", viaOwn.Load(), len(seen))
	}
}

// Without a cluster the run is empty: that header is left out, the others go.
func TestIdentityHeadersLeaveOutEmptyOnes(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got = req.Header.Clone()
		mu.Unlock()
		http.Error(w, "no rig here", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, err := rig.Dial(context.Background(), rig.Config{Endpoint: srv.URL + "/mcp", Attempt: 1,
		ReconnectWindow: time.Millisecond, ReconnectBackoff: time.Millisecond})
	if !errors.Is(err, rig.ErrUnavailable) {
		t.Fatalf("dial: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := got[contract.HeaderRun]; ok || got.Get(contract.HeaderAttempt) != "1" || got.Get(contract.HeaderPod) != "" {
		t.Fatalf("headers %v", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// The verdict is read from the first text block, in both forms a rig
// writes, and never from the listing: a phone that shows the verdict's
// words is not a verdict.
func TestVerdictFromTheFirstBlockOnly(t *testing.T) {
	for _, physiclaw := range []bool{false, true} {
		r := rigtest.New()
		r.PhysiClaw = physiclaw
		c := dial(t, r)
		r.SetScreen(`0 [text] "screen: no visible change" [0.300,0.800,0.700,0.860] 0.97` + "\n" +
			`1 [text] "PhysiClaw is busy" [0.300,0.200,0.700,0.260] 0.97`)
		tap := func() rig.Result {
			t.Helper()
			res, err := c.Call(context.Background(), "tap", []byte(`{"bbox":[0.1,0.2,0.3,0.4]}`))
			if err != nil || res.IsError {
				t.Fatalf("physiclaw=%v: tap: %+v %v", physiclaw, res, err)
			}
			return res
		}
		if v := tap().Verdict; v != wire.Changed {
			t.Errorf("physiclaw=%v: verdict %q under a listing that shows %q, want changed", physiclaw, v, wire.UnchangedText)
		}
		r.Unchanged.Store(true)
		if v := tap().Verdict; v != wire.Unchanged {
			t.Errorf("physiclaw=%v: verdict %q, want unchanged", physiclaw, v)
		}
		r.NoVerdict.Store(true)
		if res := tap(); res.Verdict != wire.None || !strings.Contains(res.Text, "screen: no visible change") {
			t.Errorf("physiclaw=%v: verdict %q of a result that has none (text %q), want none", physiclaw, res.Verdict, res.Text)
		}
		if n := r.Calls(); n != 3 {
			t.Errorf("physiclaw=%v: %d calls reached the rig, want 3: a listing saying busy is no busy answer to retry", physiclaw, n)
		}
		r.Close()
	}
}

// A rig that answers "Hardware not set up" ends the call with ErrNotSetUp at
// once: no retry, and no result for the model to puzzle over.
func TestNotSetUp(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	c := dial(t, r)
	r.NotSetUp.Store(true)
	_, err := c.Call(context.Background(), "peek", []byte(`{}`))
	if !errors.Is(err, rig.ErrNotSetUp) || !strings.Contains(err.Error(), "Hardware not set up") {
		t.Fatalf("err %v, want ErrNotSetUp quoting the rig", err)
	}
	if n := r.Calls(); n != 1 {
		t.Errorf("the rig saw %d calls, want 1: a rig that is not set up is not asked again", n)
	}
}
