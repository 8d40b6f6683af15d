package agentrun_test

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// A loop that found its rig not set up ends rig_not_ready: a free retry,
// which starts only once the rig is probed Ready again — even for a run
// allowed one attempt.
func TestRigNotSetUpWaitsForTheRig(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	run := newRun(ns, "task", "rig")
	run.Spec.Limits.MaxAttempts = 1
	var unplug sync.Once
	scripts.set(ns, "task", func(p *corev1.Pod) fakekubelet.Ending {
		if p.Name == "task-a1" {
			unplug.Do(func() { env.Health.Set(ns+"-rig", false) }) // the camera came unplugged as the session started
			return stuckFor(contract.ReasonRigNotReady, "stopped: the rig's hardware is not set up: Hardware not set up. Run /setup to connect and calibrate.")
		}
		return ends(contract.Done, true, "timer set", 50*time.Millisecond)
	})
	create(t, run)

	waiting := waitRun(t, ns, "task", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionSucceeded)
		return len(r.Status.Attempts) == 1 && r.Status.Phase == farmv1.RunRetrying && c != nil && c.Reason == farmv1.ReasonRigNotReady
	})
	if rec := waiting.Status.Attempts[0]; rec.Counted || rec.Outcome != farmv1.OutcomeInfrastructure || rec.ExitReason != string(contract.ReasonRigNotReady) {
		t.Fatalf("attempt record %+v: want an uncounted infrastructure failure, exit reason rig_not_ready", rec)
	}
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	// The rig stays NotReady: no pod is made for it, and the run keeps it.
	time.Sleep(time.Second) // a span of probes (the suite probes every 200 ms) that must start nothing
	if pods := podsOf(t, ns, "task"); len(pods) != 1 {
		t.Fatalf("%d pods while the rig is not set up, want only the first", len(pods))
	}
	if holder := leaseHolder(t, ns, "rig"); holder != "task" {
		t.Errorf("the rig's Lease is held by %q while the run waits for it, want task", holder)
	}

	env.Health.Set(ns+"-rig", true) // set up again
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
	done := waitPhase(t, ns, "task", farmv1.RunSucceeded)
	if done.Status.Attempt != 1 || done.Status.InfraRetries != 1 || len(done.Status.Attempts) != 2 || done.Status.Sentinel != string(contract.Done) {
		t.Errorf("attempt %d, infra retries %d, %d records, sentinel %s; want attempt 1 retried once for free, then DONE",
			done.Status.Attempt, done.Status.InfraRetries, len(done.Status.Attempts), done.Status.Sentinel)
	}
}
