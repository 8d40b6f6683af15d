package devicerig_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// wakingRig is a rig gateway's routes for one rig: its status says ready,
// and its watch route answers the wake it keeps (as the gateway keeps one
// until a session takes the rig).
type wakingRig struct {
	mu    sync.Mutex
	wake  contract.RigWake
	reads int
}

func (s *wakingRig) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.HasSuffix(r.URL.Path, contract.RigStatusPath):
		_ = json.NewEncoder(w).Encode(contract.RigStatus{Arm: true, Camera: true, Calibrated: true, OriginPinned: true, Ready: true})
	case strings.HasSuffix(r.URL.Path, contract.RigWatchPath):
		s.reads++
		_ = json.NewEncoder(w).Encode(s.wake)
	default:
		http.NotFound(w, r)
	}
}

func (s *wakingRig) set(w contract.RigWake) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake = w
}

func wakeRuns(t *testing.T, ns string) []farmv1.AgentRun {
	t.Helper()
	var runs farmv1.AgentRunList
	if err := env.Client.List(context.Background(), &runs, client.InNamespace(ns),
		client.MatchingLabels{farmv1.LabelKind: farmv1.KindWakeUp, farmv1.LabelRig: "rig"}); err != nil {
		t.Fatal(err)
	}
	return runs.Items
}

// A phone that wakes while its rig is free starts one run from the rig's
// template, the reason in its trigger; never a second while the first is
// unfinished, and the next no sooner than minInterval after the last.
func TestWakeUpStartsOneRunAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	gw := &wakingRig{}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rig", Labels: map[string]string{farmv1.LabelPool: "checkout"}},
		Spec: farmv1.DeviceRigSpec{NodeName: env.MakeNode(t, ns+"-rig"),
			Endpoint: farmv1.RigEndpoint{URL: srv.URL + "/rigs/" + ns + "/rig/mcp", HealthURL: srv.URL + "/rigs/" + ns + "/rig/api/status"},
			WakeUp: &farmv1.WakeUp{MinIntervalSeconds: ptr.To[int32](3), Template: farmv1.WakeUpTemplate{
				Metadata: farmv1.WakeUpMetadata{Labels: map[string]string{"team": "support"}},
				Spec: farmv1.WakeUpRunSpec{Trigger: "Answer whoever wrote.",
					Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/wake", BaseURL: "http://127.0.0.1:1/v1"}},
			}}},
	}
	if err := env.Client.Create(ctx, rig); err != nil {
		t.Fatal(err)
	}
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
	testenv.Eventually(t, "the watch route read", func() bool { gw.mu.Lock(); defer gw.mu.Unlock(); return gw.reads >= 2 })
	if runs := wakeRuns(t, ns); len(runs) != 0 {
		t.Fatalf("%d wake-up runs before the phone woke", len(runs))
	}

	at := time.Now().UTC()
	gw.set(contract.RigWake{Wake: true, Reason: "notification banner appeared at top of screen", At: &at})
	testenv.Eventually(t, "a wake-up run", func() bool { return len(wakeRuns(t, ns)) == 1 })
	first := wakeRuns(t, ns)[0]
	if first.Spec.RigRef == nil || first.Spec.RigRef.Name != "rig" || first.Spec.Trigger !=
		"Answer whoever wrote.\n\nThe phone woke: notification banner appeared at top of screen." {
		t.Fatalf("wake-up run %s: rig %+v, trigger %q", first.Name, first.Spec.RigRef, first.Spec.Trigger)
	}
	if first.Labels["team"] != "support" || first.Labels[farmv1.LabelPool] != "checkout" || !strings.HasPrefix(first.Name, "rig-wake-") ||
		len(first.OwnerReferences) != 1 || first.OwnerReferences[0].Name != "rig" {
		t.Fatalf("wake-up run %s: labels %v, owners %+v; want the template's labels, the rig's pool, and the rig as owner",
			first.Name, first.Labels, first.OwnerReferences)
	}
	got := env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.WakeUp != nil })
	if w := got.Status.WakeUp; w.Run != first.Name || w.Count != 1 || w.Reason != "notification banner appeared at top of screen" {
		t.Fatalf("status.wakeUp %+v, want run %s, count 1 and the reason", w, first.Name)
	}
	testenv.Eventually(t, "a WokeUp event", func() bool {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == farmv1.EventWokeUp && e.Regarding.Name == "rig" && strings.Contains(e.Note, first.Name) {
				return true
			}
		}
		return false
	})

	// Finished at once: the kept wake (no session took the rig: no run
	// controller runs here) starts the next run, but not before minInterval.
	first.Status.Phase = farmv1.RunSucceeded
	if err := env.Client.Status().Update(ctx, &first); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a second wake-up run", func() bool { return len(wakeRuns(t, ns)) == 2 })
	got = env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.WakeUp != nil && r.Status.WakeUp.Count == 2 })
	if d := got.Status.WakeUp.Time.Sub(first.CreationTimestamp.Time); d < 2*time.Second {
		t.Fatalf("the second wake-up run came %s after the first, want at least minInterval (3 s, recorded in whole seconds)", d)
	}

	// The second has not finished: probes past minInterval start nothing more.
	time.Sleep(4 * time.Second) // 20 probes
	if runs := wakeRuns(t, ns); len(runs) != 2 {
		t.Fatalf("%d wake-up runs while the second is unfinished, want 2", len(runs))
	}
}
