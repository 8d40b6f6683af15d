package agentrun_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// With the chart's default security contexts a loop pod meets Pod Security
// "restricted" when its rig keeps its state on a PVC: in a namespace that
// enforces restricted, it starts. A rig on the default hostPath does not
// (hostPath volumes are beyond even "baseline"), and the API server's
// refusal fails the run InvalidConfig with its own words.
func TestLoopPodsMeetRestrictedOnAPVC(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	var n corev1.Namespace
	if err := k8s.Get(ctx, types.NamespacedName{Name: ns}, &n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if err := k8s.Patch(ctx, &n, patch); err != nil {
		t.Fatal(err)
	}

	makeRig(t, ns, "pvc", nil)
	var rig farmv1.DeviceRig
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "pvc"}, &rig); err != nil {
		t.Fatal(err)
	}
	rp := client.MergeFrom(rig.DeepCopy())
	rig.Spec.StateVolume = farmv1.StateVolume{PersistentVolumeClaim: "rig-state"}
	if err := k8s.Patch(ctx, &rig, rp); err != nil {
		t.Fatal(err)
	}
	scripts.set(ns, "on-pvc", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, newRun(ns, "on-pvc", "pvc"))
	waitPhase(t, ns, "on-pvc", farmv1.RunRunning)

	makeRig(t, ns, "host", nil)
	create(t, newRun(ns, "on-host", "host"))
	got := waitPhase(t, ns, "on-host", farmv1.RunFailed)
	c := conditions.Get(got.Status.Conditions, farmv1.ConditionSucceeded)
	if c == nil || c.Reason != farmv1.ReasonInvalidConfig || !strings.Contains(c.Message, "PodSecurity") || !strings.Contains(c.Message, "hostPath") {
		t.Fatalf("Succeeded %+v, want InvalidConfig with the PodSecurity refusal of the hostPath volume", c)
	}
}
