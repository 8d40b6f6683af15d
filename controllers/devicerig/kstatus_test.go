package devicerig_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// kstatusOf is what kstatus says of the DeviceRig (testenv.Kstatus).
func kstatusOf(t *testing.T, ns, name string) *status.Result {
	t.Helper()
	return testenv.Kstatus(t, env.Client, "DeviceRig", ns, name)
}

// A rig that serves is Current to kstatus, one that cannot (NotReady,
// Offline) Failed with the Ready condition's message, and one in
// maintenance InProgress, from its Ready False: it waits for its
// administrator to put it back, as Argo CD's check calls it Suspended.
func TestKstatusFollowsTheRig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	rig := env.MakeRig(t, ns, "rig", nil)
	if s := kstatusOf(t, ns, "rig"); s.Status != status.CurrentStatus {
		t.Errorf("a Ready rig: kstatus %s (%s), want Current", s.Status, s.Message)
	}

	env.Health.Set(ns+"-rig", false)
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	if s := kstatusOf(t, ns, "rig"); s.Status != status.FailedStatus || !strings.Contains(s.Message, "arm=false") {
		t.Errorf("a NotReady rig: kstatus %s (%s), want Failed saying what is missing", s.Status, s.Message)
	}
	env.Health.Set(ns+"-rig", true)
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
	if s := kstatusOf(t, ns, "rig"); s.Status != status.CurrentStatus {
		t.Errorf("Ready again: kstatus %s (%s), want Current", s.Status, s.Message)
	}
	// Stalled is abnormal-true: True above, gone once the rig serves again.
	var ready farmv1.DeviceRig
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rig), &ready); err != nil {
		t.Fatal(err)
	}
	if c := conditions.Get(ready.Status.Conditions, farmv1.ConditionStalled); c != nil {
		t.Errorf("a Ready rig carries Stalled %s (%s), want it absent", c.Status, c.Message)
	}

	env.SetNodeReady(t, rig.Spec.NodeName, false)
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigOffline })
	if s := kstatusOf(t, ns, "rig"); s.Status != status.FailedStatus {
		t.Errorf("an Offline rig: kstatus %s (%s), want Failed", s.Status, s.Message)
	}
	env.SetNodeReady(t, rig.Spec.NodeName, true)
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })

	var cur farmv1.DeviceRig
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rig), &cur); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Unschedulable = true
	if err := env.Client.Patch(ctx, &cur, patch); err != nil {
		t.Fatal(err)
	}
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		return r.Status.Phase == farmv1.RigMaintenance && r.Status.ObservedGeneration == r.Generation
	})
	if s := kstatusOf(t, ns, "rig"); s.Status != status.InProgressStatus || !strings.Contains(s.Message, "maintenance") {
		t.Errorf("a rig in maintenance: kstatus %s (%s), want InProgress", s.Status, s.Message)
	}
}
