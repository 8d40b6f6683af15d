package agentrun_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// kstatusOf is what kstatus — the library Flux and kubectl's wait tooling
// use to call a resource healthy — says of the run as the API serves it.
func kstatusOf(t *testing.T, ns, name string) *status.Result {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(farmv1.GroupVersion.WithKind("AgentRun"))
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res
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
