package agentrun_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

func rigCondition(r *farmv1.DeviceRig, typ string) *metav1.Condition {
	for i := range r.Status.Conditions {
		if r.Status.Conditions[i].Type == typ {
			return &r.Status.Conditions[i]
		}
	}
	return nil
}

// The DeviceRig controller's status follows the node, the health route and the Lease.
func TestDeviceRigStatusFollowsTheWorld(t *testing.T) {
	ns := namespace(t)
	rig := makeRig(t, ns, "rig", nil)
	for _, typ := range []string{farmv1.ConditionReady, farmv1.ConditionNodeReady, farmv1.ConditionEndpointReachable, farmv1.ConditionCalibrated} {
		c := rigCondition(rig, typ)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rig.Generation {
			t.Fatalf("%s = %+v", typ, c)
		}
	}
	if rig.Status.Health == nil || !rig.Status.Health.Calibrated || rig.Status.LastProbeTime == nil {
		t.Fatalf("health %+v", rig.Status)
	}

	// In use: the Lease shows through as the current run.
	scripts.set(ns, "busy", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, newRun(ns, "busy", "rig"))
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		return r.Status.Phase == farmv1.RigInUse && r.Status.CurrentRun == "busy"
	})
	cancel(t, ns, "busy")
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady && r.Status.CurrentRun == "" })

	// Health false → NotReady, with the flags in the message.
	health.set(ns+"-rig", false)
	r := waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	if c := rigCondition(r, farmv1.ConditionCalibrated); c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonNotCalibrated {
		t.Fatalf("Calibrated %+v", c)
	}
	health.set(ns+"-rig", true)
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })

	// Node not ready → Offline.
	setNodeReady(t, rig.Spec.NodeName, false)
	r = waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigOffline })
	if c := rigCondition(r, farmv1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonNodeNotReady {
		t.Fatalf("Ready %+v", c)
	}
	setNodeReady(t, rig.Spec.NodeName, true)
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })

	// An endpoint that does not answer → NotReady, EndpointReachable False with the error.
	var cur farmv1.DeviceRig
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rig"}, &cur); err != nil {
		t.Fatal(err)
	}
	failures := metricValue(t, metrics.Registry, "clawfarm_rig_probe_failures_total")
	patch := client.MergeFrom(cur.DeepCopy()) // the rig controller writes status meanwhile
	cur.Spec.Endpoint.HealthURL = "http://127.0.0.1:1/api/status"
	if err := k8s.Patch(context.Background(), &cur, patch); err != nil {
		t.Fatal(err)
	}
	r = waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		c := rigCondition(r, farmv1.ConditionEndpointReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	if got := metricValue(t, metrics.Registry, "clawfarm_rig_probe_failures_total"); got < failures+1 {
		t.Errorf("clawfarm_rig_probe_failures_total went %v → %v, want at least +1", failures, got)
	}
	if c := rigCondition(r, farmv1.ConditionEndpointReachable); c.Reason != farmv1.ReasonProbeFailed || !strings.Contains(c.Message, "127.0.0.1:1") {
		t.Fatalf("EndpointReachable %+v", c)
	}
	if r.Status.Phase != farmv1.RigNotReady {
		t.Fatalf("phase %s", r.Status.Phase)
	}
}

// A node that does not exist → Offline with NodeNotFound.
func TestRigOnMissingNodeIsOffline(t *testing.T) {
	ns := namespace(t)
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"},
		Spec:       farmv1.DeviceRigSpec{NodeName: "no-such-node", Endpoint: farmv1.RigEndpoint{URL: health.url + "/rigs/ghost/mcp"}},
	}
	create(t, rig)
	r := waitRig(t, ns, "ghost", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigOffline })
	if c := rigCondition(r, farmv1.ConditionNodeReady); c.Reason != farmv1.ReasonNodeNotFound {
		t.Fatalf("NodeReady %+v", c)
	}
	// The rigs-by-phase gauge counts it (other tests' rigs too: at least this
	// one; the exact bookkeeping is unit-tested in controllers/devicerig).
	if n := metricValue(t, metrics.Registry, "clawfarm_rigs", "phase", string(farmv1.RigOffline)); n < 1 {
		t.Errorf("clawfarm_rigs{phase=Offline} = %v with an Offline rig", n)
	}
}
