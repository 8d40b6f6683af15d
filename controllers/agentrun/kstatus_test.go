package agentrun_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
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
// Each is present only while True (abnormal-true), which kstatus reads the
// same as False and costs every later write of the run nothing.
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
	wantKstatusConditions(t, getRun(t, ns, "ok"), farmv1.ConditionReconciling)
	ok.Store(true)
	waitPhase(t, ns, "ok", farmv1.RunSucceeded)
	if res := kstatusOf(t, ns, "ok"); res.Status != status.CurrentStatus {
		t.Errorf("a run that succeeded: kstatus %s (%s), want Current", res.Status, res.Message)
	}
	wantKstatusConditions(t, getRun(t, ns, "ok"))

	scripts.set(ns, "bad", byPod(nil, fakekubelet.Ending{After: 0, ExitCode: int32(contract.ExitInvalidConfig), Message: "loop: bad configuration: no trigger"}))
	create(t, newRun(ns, "bad", "rig-bad"))
	waitPhase(t, ns, "bad", farmv1.RunFailed)
	if res := kstatusOf(t, ns, "bad"); res.Status != status.FailedStatus {
		t.Errorf("a run that failed: kstatus %s (%s), want Failed", res.Status, res.Message)
	}
	wantKstatusConditions(t, getRun(t, ns, "bad"), farmv1.ConditionStalled)
}

// wantKstatusConditions checks that of Reconciling and Stalled, the run
// carries exactly the ones named, each True.
func wantKstatusConditions(t *testing.T, run *farmv1.AgentRun, want ...string) {
	t.Helper()
	for _, typ := range []string{farmv1.ConditionReconciling, farmv1.ConditionStalled} {
		c := conditions.Get(run.Status.Conditions, typ)
		switch {
		case slices.Contains(want, typ) && (c == nil || c.Status != metav1.ConditionTrue):
			t.Errorf("run %s (%s): %s is %v, want True", run.Name, run.Status.Phase, typ, c)
		case !slices.Contains(want, typ) && c != nil:
			t.Errorf("run %s (%s): %s is %s, want it absent (abnormal-true, present only while True)", run.Name, run.Status.Phase, typ, c.Status)
		}
	}
}
