package main

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePorts finds a base port such that base, base+1 … base+n-1 are all free
// (--port-per-rig serves rig i on the listen port + 1 + i), so the test does
// not collide with servers other packages' tests start in parallel.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		held := []net.Listener{ln}
		ok := true
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports found")
	return 0
}

func waitFor(t *testing.T, url string) *http.Response {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			return resp
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never answered", url)
	return nil
}

// rigsim serves a farm with a port per rig and stops cleanly on SIGTERM.
func TestServesAndStopsOnSIGTERM(t *testing.T) {
	port := freePorts(t, 3)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--listen", "127.0.0.1:" + strconv.Itoa(port), "--rigs", "2", "--port-per-rig", "--glare", "0.1", "--tap-offset", "0.01,0"})
	}()
	resp := waitFor(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/rigs")
	var rigs []map[string]string
	json.NewDecoder(resp.Body).Decode(&rigs)
	resp.Body.Close()
	if len(rigs) != 2 {
		t.Fatalf("GET /rigs = %v", rigs)
	}
	resp = waitFor(t, "http://127.0.0.1:"+strconv.Itoa(port+2)+"/api/sim/faults")
	var faults map[string]any
	json.NewDecoder(resp.Body).Decode(&faults)
	resp.Body.Close()
	if faults["glare"] != 0.1 {
		t.Fatalf("rig-1 on its own port has faults %v, want the flags'", faults)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rigsim did not stop on SIGTERM")
	}
}

func TestRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rigs", "0"},
		{"--tap-offset", "left"},
		{"--glare", "1.5"},
		{"--config", "/nonexistent.yaml"},
		{"--no-such-flag"},
		{"--session-idle", "0s"},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) accepted it", strings.Join(args, " "))
		}
	}
}

// One rig is served at the root beside the farm's routes: its own ledger in
// /api/sim/state, the farm's at /api/sim/ledger, with the idle window of the flag.
func TestOneRigServesTheLedgers(t *testing.T) {
	port := freePorts(t, 1)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	done := make(chan error, 1)
	go func() { done <- run([]string{"--listen", "127.0.0.1:" + strconv.Itoa(port), "--session-idle", "45s"}) }()
	defer func() {
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("rigsim did not stop on SIGTERM")
		}
	}()
	resp := waitFor(t, base+"/api/sim/state")
	var st struct {
		Page               string
		SessionIdleSeconds float64
		Sessions           []any
		Overlaps           []any
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.Page == "" || st.SessionIdleSeconds != 45 || st.Sessions == nil || st.Overlaps == nil {
		t.Fatalf("GET /api/sim/state = %+v, want the phone and an empty ledger with a 45 s idle window", st)
	}
	resp = waitFor(t, base+"/api/sim/ledger")
	var fl struct {
		Overlaps int
		Rigs     []struct{ Name string }
	}
	json.NewDecoder(resp.Body).Decode(&fl)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || fl.Overlaps != 0 || len(fl.Rigs) != 1 || fl.Rigs[0].Name != "rig-0" {
		t.Fatalf("GET /api/sim/ledger = %s %+v", resp.Status, fl)
	}
}
