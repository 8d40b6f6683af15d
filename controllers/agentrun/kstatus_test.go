package agentrun_test

import (
	"testing"

	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// kstatusOf is what kstatus says of the AgentRun (testenv.Kstatus).
func kstatusOf(t *testing.T, ns, name string) *status.Result {
	t.Helper()
	return testenv.Kstatus(t, k8s, "AgentRun", ns, name)
}

// A run is InProgress to kstatus while it runs, Current once it
// succeeded, Failed once it failed: without the Reconciling and Stalled
// conditions kstatus would call it Current as soon as it had a status.
func TestKstatusReadsARunsProgress(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig-ok", nil)
	makeRig(t, ns, "rig-bad", nil)
	ok := gated(ns, "ok", ends(contract.Done, true, "done", 0))
	create(t, newRun(ns, "ok", "rig-ok"))
	waitPhase(t, ns, "ok", farmv1.RunRunning)
	if res := kstatusOf(t, ns, "ok"); res.Status != status.InProgressStatus {
		t.Errorf("a running run: kstatus %s (%s), want InProgress", res.Status, res.Message)
	}
	ok.Store(true)
	waitPhase(t, ns, "ok", farmv1.RunSucceeded)
	if res := kstatusOf(t, ns, "ok"); res.Status != status.CurrentStatus {
		t.Errorf("a run that succeeded: kstatus %s (%s), want Current", res.Status, res.Message)
	}

	scripts.set(ns, "bad", byPod(nil, fakekubelet.Ending{After: 0, ExitCode: int32(contract.ExitInvalidConfig), Message: "loop: bad configuration: no trigger"}))
	create(t, newRun(ns, "bad", "rig-bad"))
	waitPhase(t, ns, "bad", farmv1.RunFailed)
	if res := kstatusOf(t, ns, "bad"); res.Status != status.FailedStatus {
		t.Errorf("a run that failed: kstatus %s (%s), want Failed", res.Status, res.Message)
	}
}
