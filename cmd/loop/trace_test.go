package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/trace"
)

// loopPod lets any token write ns/run-1 attempt 1: the trace server's
// authority is tested against a real API server in internal/trace.
type loopPod struct{}

func (loopPod) Writer(context.Context, string) (*trace.Writer, error) {
	return &trace.Writer{Namespace: "ns", Run: "run-1", RunUID: "uid-1", Attempt: 1, Pod: "run-1-a1"}, nil
}
func (loopPod) Reader(context.Context, string) (*trace.Reader, error) {
	return nil, trace.ErrUnauthenticated
}
func (loopPod) Can(context.Context, *trace.Reader, string, string) (bool, error) { return false, nil }

func tokenFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("projected"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// With a trace server, the attempt's whole trace reaches it: the same event
// stream as the state directory's copy, and every screen.
func TestTraceReachesTheTraceServer(t *testing.T) {
	model, sim := simulated(t, "")
	store, err := trace.NewFSStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(&trace.Server{Store: store, Auth: loopPod{}, Logf: t.Logf})
	defer ts.Close()
	dir := t.TempDir()
	env := loopEnv(t, model.URL, sim.URL+"/mcp", "CLAWFARM_MODEL=sim/message", "CLAWFARM_STATE_DIR="+dir,
		"CLAWFARM_TRIGGER=Ask Ana what time dinner is tomorrow.", "CLAWFARM_MODEL_TIMEOUT_SECONDS=30",
		"CLAWFARM_TRACE_URL="+ts.URL, "CLAWFARM_TRACE_TOKEN_FILE="+tokenFile(t))
	res := runChild(t, env, nil, nil)
	check(t, res, contract.ExitWait, contract.Wait, contract.ReasonEndTurn)

	local, err := os.ReadFile(filepath.Join(dir, "traces", "ns_run-1-a1", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(context.Background(), "runs/ns/run-1/uid-1/a1/")
	if err != nil {
		t.Fatal(err)
	}
	var events strings.Builder
	screens := 0
	for _, o := range objs {
		if strings.Contains(o.Key, "/screens/") {
			screens++
			continue
		}
		rc, err := store.Get(context.Background(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		events.Write(b)
	}
	localScreens, _ := filepath.Glob(filepath.Join(dir, "traces", "ns_run-1-a1", "screen-*"))
	if events.String() != string(local) || screens != len(localScreens) || screens == 0 {
		t.Errorf("the server has %d bytes of events (the state directory %d, equal %v) and %d screens (the state directory %d)",
			events.Len(), len(local), events.String() == string(local), screens, len(localScreens))
	}
}

// A trace server that cannot be reached changes nothing of the session but
// one event that says so, and where the trace is.
func TestTraceServerDownDoesNotFailTheSession(t *testing.T) {
	model, sim := simulated(t, "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	dir := t.TempDir()
	env := loopEnv(t, model.URL, sim.URL+"/mcp", "CLAWFARM_MODEL=sim/message", "CLAWFARM_STATE_DIR="+dir,
		"CLAWFARM_TRIGGER=Ask Ana what time dinner is tomorrow.", "CLAWFARM_MODEL_TIMEOUT_SECONDS=30",
		"CLAWFARM_TRACE_URL="+down, "CLAWFARM_TRACE_TOKEN_FILE="+tokenFile(t))
	begin := time.Now()
	res := runChild(t, env, nil, nil)
	check(t, res, contract.ExitWait, contract.Wait, contract.ReasonEndTurn)
	if took := time.Since(begin); took > time.Minute {
		t.Errorf("the session took %s", took)
	}
	if n := strings.Count(res.stdout, `"class":"trace_upload"`); n != 1 ||
		!strings.Contains(res.stdout, "cannot be reached") || !strings.Contains(res.stdout, filepath.Join(dir, "traces", "ns_run-1-a1")) {
		t.Errorf("%d trace_upload events; want one saying the server cannot be reached and where the trace is:\n%s", n, res.stdout)
	}
	if _, err := http.Get(down); err == nil {
		t.Fatal("something listens on the address that should be down")
	}
}
