package main

import (
	"net/http/httptest"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

// The loop names its run, attempt and pod to the rig: rigsim's session
// ledger records the session under them, and closed when the loop ends.
func TestLoopNamesItselfToTheRig(t *testing.T) {
	model := pt.OpenAI(uniq(step(note, peek), closing("DONE")))
	defer model.Close()
	r := rigsim.New("rig-0", rigsim.Config{})
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	code, b, m, stderr, err := runInProcess(loopEnv(t, model.URL, srv.URL+"/mcp", "HOSTNAME=run-1-a1"))
	if code != 0 || err != nil || m.Sentinel != contract.Done {
		t.Fatalf("exit %d message %s (%v) stderr %s", code, b, err, stderr)
	}
	l := r.Ledger()
	if len(l.Sessions) != 1 || len(l.Overlaps) != 0 {
		t.Fatalf("ledger %+v, want one session", l)
	}
	s := l.Sessions[0]
	if s.Run != "ns/run-1" || s.Attempt != "1" || s.Pod != "run-1-a1" || s.Calls != 1 || s.Open {
		t.Fatalf("session %+v, want ns/run-1 attempt 1 in pod run-1-a1, one call, closed", s)
	}
}
