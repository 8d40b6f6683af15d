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

// modelsim serves the built-in scenarios as models and stops cleanly on SIGTERM.
func TestServesAndStopsOnSIGTERM(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--listen", "127.0.0.1:" + strconv.Itoa(port), "--scenarios", "../../test/scenarios"})
	}()
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err = http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/v1/models"); err == nil {
			break
		}
	}
	if resp == nil {
		t.Fatal("modelsim never answered")
	}
	var models struct{ Data []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	if all := strings.Join(ids, " "); !strings.Contains(all, "sim/timer") || !strings.Contains(all, "sim/misbehave") {
		t.Fatalf("models = %v, want the built-ins and the folder's", ids)
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("modelsim did not stop on SIGTERM")
	}
}

func TestRejectsABadScenarioFolder(t *testing.T) {
	if err := run([]string{"--scenarios", "/nonexistent"}); err == nil {
		t.Fatal("run accepted a missing scenario folder")
	}
}
