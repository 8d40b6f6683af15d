package agentrun_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// stallSeconds in these tests: the least the API allows.
const stallSeconds = 10

// beat patches the run's progress the way the loop does (a JSON merge patch
// of the status), with the heartbeat at the controller's now.
func beat(t *testing.T, ns, name string, attemptN, turn int32, tool string) time.Time {
	t.Helper()
	now := clk.Now().UTC().Truncate(time.Second)
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"progress": contract.Progress{
		Attempt: int(attemptN), Turn: int(turn), LastTool: tool, Tokens: 100, UpdatedAt: now.Format(time.RFC3339)}}})
	run := &farmv1.AgentRun{}
	run.Namespace, run.Name = ns, name
	if err := k8s.Status().Patch(context.Background(), run, client.RawPatch(types.MergePatchType, b)); err != nil {
		t.Errorf("patch progress: %v", err)
	}
	return now
}

// A loop whose progress stops is stopped once stallSeconds pass without a
// heartbeat: the attempt is a counted STUCK (Stalled) that says what was
// last seen, a Warning Event says so, and a fresh attempt follows.
func TestStalledAttemptIsStoppedAndRetried(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "stall", byPod(map[string]fakekubelet.Ending{"stall-a1": {Hang: true}},
		ends(contract.Done, true, "done on 2", 50*time.Millisecond)))
	run := newRun(ns, "stall", "rig")
	run.Spec.Limits.StallSeconds = ptr.To[int32](stallSeconds)
	create(t, run)
	waitRun(t, ns, "stall", func(r *farmv1.AgentRun) bool { return r.Status.Phase == farmv1.RunRunning && r.Status.Attempt == 1 })
	eventually(t, "pod stall-a1 running", func() bool {
		p, err := getPod(ns, "stall-a1")
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	last := beat(t, ns, "stall", 1, 4, "tap") // then nothing more

	got := waitPhase(t, ns, "stall", farmv1.RunSucceeded)
	if n := len(got.Status.Attempts); n != 2 {
		t.Fatalf("%d attempts, want 2: %+v", n, got.Status.Attempts)
	}
	a1 := got.Status.Attempts[0]
	if a1.Outcome != farmv1.OutcomeStalled || !a1.Counted || a1.Sentinel != "STUCK" || a1.ExitReason != attempt.ExitReasonStalled {
		t.Fatalf("attempt 1 %+v, want a counted STUCK, outcome Stalled, exit reason stalled", a1)
	}
	for _, want := range []string{"no progress for 10s", "last heartbeat " + last.Format(time.RFC3339), "turn 4", "last tool tap"} {
		if !strings.Contains(a1.Message, want) {
			t.Errorf("attempt 1's message %q does not say %q", a1.Message, want)
		}
	}
	// Not before stallSeconds, and well within 30 s after.
	stopped := a1.FinishTime.Time
	if stopped.Before(last.Add(stallSeconds*time.Second)) || stopped.After(last.Add((stallSeconds+30)*time.Second)) {
		t.Errorf("stalled attempt recorded at %s; last heartbeat %s, stallSeconds %d", stopped, last, stallSeconds)
	}
	if a2 := got.Status.Attempts[1]; a2.Pod != "stall-a2" || a2.Outcome != farmv1.OutcomeDone {
		t.Errorf("attempt 2 %+v, want stall-a2 Done", a2)
	}
	eventually(t, "a Warning Stalled event", func() bool {
		for _, e := range runEventsOf(t, ns, "stall") {
			if e.Reason == farmv1.ReasonStalled && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "stall-a1") {
				return true
			}
		}
		return false
	})
}

// A slow turn whose tool results keep coming back renews the heartbeat
// without a new turn: the watchdog lets it run past stallSeconds. With
// stallSeconds 0 there is no watchdog at all.
func TestStallWatchdogSparesLiveAndDisabledAttempts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		stall int32
		beats bool
	}{
		{"slow", stallSeconds, true},
		{"unwatched", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t)
			makeRig(t, ns, "rig", nil)
			scripts.set(ns, c.name, byPod(nil, ends(contract.Done, true, "ok", (stallSeconds+5)*time.Second)))
			r := newRun(ns, c.name, "rig")
			r.Spec.Limits.StallSeconds = ptr.To(c.stall)
			create(t, r)
			waitRun(t, ns, c.name, func(r *farmv1.AgentRun) bool { return r.Status.Phase == farmv1.RunRunning && r.Status.Attempt == 1 })
			if c.beats {
				// Turn 3 never ends, but its tool results come back every 2 s.
				stop := make(chan struct{})
				var wg sync.WaitGroup
				defer func() { close(stop); wg.Wait() }()
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						beat(t, ns, c.name, 1, 3, "wait_for")
						select {
						case <-stop:
							return
						case <-time.After(2 * time.Second):
						}
					}
				}()
			}
			got := waitRun(t, ns, c.name, func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
			if got.Status.Phase != farmv1.RunSucceeded || len(got.Status.Attempts) != 1 || got.Status.Attempts[0].Outcome != farmv1.OutcomeDone {
				t.Fatalf("phase %s, attempts %+v; want one attempt that ran to DONE", got.Status.Phase, got.Status.Attempts)
			}
			for _, e := range runEventsOf(t, ns, c.name) {
				if e.Reason == farmv1.ReasonStalled {
					t.Errorf("event %s: %s", e.Reason, e.Note)
				}
			}
		})
	}
}
