//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// wakeRuns are the runs the rig's wake-ups started.
func wakeRuns(ctx context.Context, t *testing.T, rigIndex int) []farmv1.AgentRun {
	t.Helper()
	var runs farmv1.AgentRunList
	if err := cluster.Client.List(ctx, &runs, client.InNamespace(devcluster.RunNamespace),
		client.MatchingLabels{farmv1.LabelKind: farmv1.KindWakeUp, farmv1.LabelRig: rig(rigIndex)}); err != nil {
		t.Fatalf("list wake-up runs: %v", err)
	}
	return runs.Items
}

func postSim(t *testing.T, rigIndex int, path, body string) {
	t.Helper()
	resp, err := http.Post(cluster.RigURL(rigIndex)+path, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
}

// waitWakeRun waits for the rig's n-th wake-up run to finish.
func waitWakeRun(t *testing.T, rigIndex, n int) farmv1.AgentRun {
	t.Helper()
	ctx := ctxFor(t, runTimeout)
	for {
		runs := wakeRuns(ctx, t, rigIndex)
		if len(runs) > n {
			t.Fatalf("%d wake-up runs, want %d", len(runs), n)
		}
		if len(runs) == n {
			var newest *farmv1.AgentRun
			for i := range runs {
				if newest == nil || runs[i].CreationTimestamp.After(newest.CreationTimestamp.Time) {
					newest = &runs[i]
				}
			}
			if newest.Status.Phase.Finished() {
				return *newest
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("wake-up run %d of rig %s did not finish: %d runs", n, rig(rigIndex), len(runs))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// A message arriving on a free rig's phone wakes a run that reads it and
// ends DONE; an idle check-in with nothing new ends IDLE; never two
// wake-up runs at once on the rig. The wake goes rigsim → the rig gateway
// (which polls the phone's watch route while the rig is free) → the
// manager (which reads the gateway's route at each probe).
func TestWakeUp(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, 2*runTimeout)
	var dr farmv1.DeviceRig
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: devcluster.RunNamespace, Name: rig(rigWake)}, &dr); err != nil {
		t.Fatal(err)
	}
	template := newRun("", rigWake, "wake", "").Spec
	dr.Spec.WakeUp = &farmv1.WakeUp{MinIntervalSeconds: ptr.To[int32](0), Template: farmv1.WakeUpTemplate{
		Spec: farmv1.WakeUpRunSpec{Model: template.Model, Limits: template.Limits}}}
	if err := cluster.Client.Update(ctx, &dr); err != nil {
		t.Fatalf("give rig %s a wake-up template: %v", dr.Name, err)
	}

	// Watch for two wake-up runs unfinished at once, all along.
	var mu sync.Mutex
	most := 0
	watching, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for watching.Err() == nil {
			var runs farmv1.AgentRunList
			if err := cluster.Client.List(watching, &runs, client.InNamespace(devcluster.RunNamespace),
				client.MatchingLabels{farmv1.LabelKind: farmv1.KindWakeUp, farmv1.LabelRig: rig(rigWake)}); err == nil {
				open := 0
				for _, r := range runs.Items {
					if !r.Status.Phase.Finished() {
						open++
					}
				}
				mu.Lock()
				most = max(most, open)
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	// Ana writes: the banner wakes a run, which opens her thread and reads it.
	postSim(t, rigWake, "/api/sim/message", `{"from": "Ana", "text": "Are you free on Saturday?"}`)
	read := waitWakeRun(t, rigWake, 1)
	if read.Status.Phase != farmv1.RunSucceeded || read.Status.Sentinel != "DONE" || !strings.Contains(read.Spec.Trigger, "notification banner") {
		t.Fatalf("wake-up run %s: %s %s, trigger %q; want DONE on a banner's wake (%s)", read.Name, read.Status.Phase, read.Status.Sentinel,
			read.Spec.Trigger, attemptsSummary(&read))
	}
	if !strings.Contains(read.Status.Recap, "Are you free on Saturday?") {
		t.Fatalf("recap %q: want Ana's message", read.Status.Recap)
	}
	if st := rigState(t, rigWake); st.Foreground != "Messages" || !strings.Contains(st.Page, "Ana") {
		t.Fatalf("ground truth: foreground %q page %q; want Ana's thread open", st.Foreground, st.Page)
	}

	// An idle check-in: nothing new, so the run it wakes ends IDLE.
	postSim(t, rigWake, "/api/sim/wake", `{}`)
	idle := waitWakeRun(t, rigWake, 2)
	if idle.Status.Phase != farmv1.RunSucceeded || idle.Status.Sentinel != "IDLE" || succeededReason(&idle) != farmv1.ReasonIdle {
		t.Fatalf("wake-up run %s: %s %s (%s); want IDLE on an idle check-in", idle.Name, idle.Status.Phase, idle.Status.Sentinel, attemptsSummary(&idle))
	}
	if len(rigState(t, rigWake).Messages.Sent) != 0 {
		t.Fatal("ground truth: a wake-up run sent a message")
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("at most %d wake-up runs unfinished at once, want 1", most)
	}
	got := &farmv1.DeviceRig{}
	if err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(&dr), got); err != nil {
		t.Fatal(err)
	}
	if w := got.Status.WakeUp; w == nil || w.Count != 2 || w.Run != idle.Name {
		t.Fatalf("rig status.wakeUp %+v, want 2 wake-ups, the last %s", w, idle.Name)
	}
}
