package agentrun_test

import (
	"fmt"
	"testing"
	"time"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// Rig exclusivity under races: 50 runs, 5 rigs, two manager instances (no
// leader election), every run a selector run competing for every rig. From
// the pod history the fake kubelet keeps: never two live pods on one rig.
func TestExclusivityUnderRaces(t *testing.T) {
	ns := namespace(t)
	for i := 0; i < 5; i++ {
		makeRig(t, ns, fmt.Sprintf("rig-%d", i), map[string]string{"pool": "race"})
	}
	stopSecond, secondDone := startManager()
	defer func() { stopSecond(); <-secondDone }()
	const runs = 50
	for i := 0; i < runs; i++ {
		name := fmt.Sprintf("r%02d", i)
		scripts.set(ns, name, byPod(nil, ends(contract.Done, true, "ok", 100*time.Millisecond)))
		run := newRun(ns, name, "")
		run.Spec.RigRef, run.Spec.RigSelector = nil, &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "race"}}
		create(t, run)
	}
	perRig := map[string]int{}
	for i := 0; i < runs; i++ {
		run := waitRun(t, ns, fmt.Sprintf("r%02d", i), func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
		if run.Status.Phase != farmv1.RunSucceeded || len(run.Status.Attempts) != 1 {
			t.Fatalf("run %s: phase %s, attempts %+v", run.Name, run.Status.Phase, run.Status.Attempts)
		}
		perRig[run.Status.Rig]++
	}
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("two live pods on one rig: %v", v)
	}
	if len(perRig) != 5 {
		t.Fatalf("runs spread over %d rigs, want all 5: %v", len(perRig), perRig)
	}
}
