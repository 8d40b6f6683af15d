package agentrun_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	t.Parallel()
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

	// A rig whose state is a PVC from the start: a rig patched to one could
	// still be read from the cache with its hostPath.
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pvc"},
		Spec: farmv1.DeviceRigSpec{NodeName: env.MakeNode(t, ns+"-pvc"), StateVolume: farmv1.StateVolume{PersistentVolumeClaim: "rig-state"},
			Endpoint: farmv1.RigEndpoint{URL: env.Health.URL + "/rigs/" + ns + "-pvc/mcp", HealthURL: env.Health.URL + "/rigs/" + ns + "-pvc/api/status"}}}
	create(t, rig)
	waitRig(t, ns, "pvc", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
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
