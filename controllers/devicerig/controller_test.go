package devicerig_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/lease"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

func rigCondition(r *farmv1.DeviceRig, typ string) *metav1.Condition {
	return conditions.Get(r.Status.Conditions, typ)
}

// The DeviceRig controller's status follows the node, the health route and the Lease.
func TestDeviceRigStatusFollowsTheWorld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	rig := env.MakeRig(t, ns, "rig", nil)
	for _, typ := range []string{farmv1.ConditionReady, farmv1.ConditionNodeReady, farmv1.ConditionEndpointReachable, farmv1.ConditionCalibrated} {
		c := rigCondition(rig, typ)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rig.Generation {
			t.Fatalf("%s = %+v", typ, c)
		}
	}
	if rig.Status.Health == nil || !rig.Status.Health.Calibrated || rig.Status.LastProbeTime == nil {
		t.Fatalf("health %+v", rig.Status)
	}

	// In use: the Lease of a run that exists makes the rig InUse.
	run := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "busy"},
		Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "hold the rig",
			Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/timer", BaseURL: "http://127.0.0.1:1/v1"}},
	}
	if err := env.Client.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	// The controller's cache may not show the brand-new run yet: it asks the
	// API server before it calls the Lease stale.
	if res, err := lease.Acquire(ctx, env.Client, "rig", lease.HolderOf(run)); err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		return r.Status.Phase == farmv1.RigInUse
	})
	// The run goes without releasing its Lease: the stale Lease is released,
	// with a warning Event, and the rig is Ready again.
	if err := env.Client.Delete(ctx, run); err != nil {
		t.Fatal(err)
	}
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
	if l, err := lease.Get(ctx, env.Client, ns, "rig"); err != nil || l != nil {
		t.Fatalf("stale Lease still there: %v %v", l, err)
	}
	testenv.Eventually(t, "a StaleLeaseReleased event", func() bool {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == farmv1.EventStaleLeaseReleased && e.Regarding.Name == "rig" && strings.Contains(e.Note, "busy") {
				return true
			}
		}
		return false
	})

	// Health false → NotReady, with the flags in the message.
	env.Health.Set(ns+"-rig", false)
	r := env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	if c := rigCondition(r, farmv1.ConditionCalibrated); c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonNotCalibrated {
		t.Fatalf("Calibrated %+v", c)
	}
	env.Health.Set(ns+"-rig", true)
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })

	// Node not ready → Offline.
	env.SetNodeReady(t, rig.Spec.NodeName, false)
	r = env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigOffline })
	if c := rigCondition(r, farmv1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonNodeNotReady {
		t.Fatalf("Ready %+v", c)
	}
	env.SetNodeReady(t, rig.Spec.NodeName, true)
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })

	// An endpoint that does not answer → NotReady, EndpointReachable False with the error.
	var cur farmv1.DeviceRig
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rig"}, &cur); err != nil {
		t.Fatal(err)
	}
	failures := testenv.MetricValue(t, metrics.Registry, "clawfarm_rig_probe_failures_total", "namespace", ns, "rig", "rig")
	patch := client.MergeFrom(cur.DeepCopy()) // the rig controller writes status meanwhile
	cur.Spec.Endpoint.HealthURL = "http://127.0.0.1:1/api/status"
	if err := env.Client.Patch(ctx, &cur, patch); err != nil {
		t.Fatal(err)
	}
	r = env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		c := rigCondition(r, farmv1.ConditionEndpointReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	if got := testenv.MetricValue(t, metrics.Registry, "clawfarm_rig_probe_failures_total", "namespace", ns, "rig", "rig"); got < failures+1 {
		t.Errorf("clawfarm_rig_probe_failures_total went %v → %v, want at least +1", failures, got)
	}
	if c := rigCondition(r, farmv1.ConditionEndpointReachable); c.Reason != farmv1.ReasonProbeFailed || !strings.Contains(c.Message, "127.0.0.1:1") {
		t.Fatalf("EndpointReachable %+v", c)
	}
	if r.Status.Phase != farmv1.RigNotReady {
		t.Fatalf("phase %s", r.Status.Phase)
	}
}

// A Lease passing straight from one run to the next writes nothing on the
// rig: it stays InUse, and its status is left as it was (the Lease names
// the run). The rig is Ready again once the Lease goes.
func TestHandOverWritesNothingOnTheRig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	env.MakeRig(t, ns, "rig", nil)
	var runs []*farmv1.AgentRun
	for _, name := range []string{"first", "second"} {
		run := &farmv1.AgentRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "hold the rig",
				Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/timer", BaseURL: "http://127.0.0.1:1/v1"}},
		}
		if err := env.Client.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	ready := env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool {
		return r.Status.Phase == farmv1.RigReady && r.Status.LastProbeTime != nil
	})
	time.Sleep(2 * time.Second) // probes that find nothing new, and write nothing
	if res, err := lease.Acquire(ctx, env.Client, "rig", lease.HolderOf(runs[0])); err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	inUse := env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigInUse })
	// The write the Lease brought records the last probe, not the one of
	// the Ready write: rigs taken together do not come due together.
	if lpt := inUse.Status.LastProbeTime; lpt == nil || lpt.Sub(ready.Status.LastProbeTime.Time) < time.Second {
		t.Fatalf("lastProbeTime %v after the InUse write, want the last probe's, past the Ready write's %v", lpt, ready.Status.LastProbeTime)
	}
	if ok, err := lease.HandOver(ctx, env.Client, "rig", lease.HolderOf(runs[0]), lease.HolderOf(runs[1])); err != nil || !ok {
		t.Fatalf("hand over: %v %v", ok, err)
	}
	// The controller reconciles the rig on the Lease's event and on every
	// probe (200 ms in this suite): ten of them find nothing to write.
	time.Sleep(2 * time.Second)
	var after farmv1.DeviceRig
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(inUse), &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != inUse.ResourceVersion || after.Status.Phase != farmv1.RigInUse {
		t.Fatalf("the hand-over wrote the rig: resourceVersion %s → %s, phase %s", inUse.ResourceVersion, after.ResourceVersion, after.Status.Phase)
	}
	if err := lease.Release(ctx, env.Client, "rig", lease.HolderOf(runs[1])); err != nil {
		t.Fatal(err)
	}
	env.WaitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
}

// A node that does not exist → Offline with NodeNotFound.
func TestRigOnMissingNodeIsOffline(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost"},
		Spec:       farmv1.DeviceRigSpec{NodeName: "no-such-node", Endpoint: farmv1.RigEndpoint{URL: env.Health.URL + "/rigs/ghost/mcp"}},
	}
	if err := env.Client.Create(context.Background(), rig); err != nil {
		t.Fatal(err)
	}
	r := env.WaitRig(t, ns, "ghost", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigOffline })
	if c := rigCondition(r, farmv1.ConditionNodeReady); c.Reason != farmv1.ReasonNodeNotFound {
		t.Fatalf("NodeReady %+v", c)
	}
	// The rigs-by-phase gauge counts it (other tests' rigs too: at least this
	// one; the exact bookkeeping is unit-tested in metrics_test.go).
	if n := testenv.MetricValue(t, metrics.Registry, "clawfarm_rigs", "phase", string(farmv1.RigOffline)); n < 1 {
		t.Errorf("clawfarm_rigs{phase=Offline} = %v with an Offline rig", n)
	}
}

// A drain starts with a cordon: a rig on a cordoned node, or one tainted
// NoExecute, takes no new session — NotReady with reason NodeCordoned, not
// Offline (the node and the sessions on it still run) — and is Ready again
// once the node is uncordoned. The rig taint itself changes nothing.
func TestCordonedNodeMakesTheRigNotReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := env.Namespace(t)
	rig := env.MakeRig(t, ns, "rig", nil)
	setNode := func(change func(*corev1.Node)) {
		t.Helper()
		var n corev1.Node
		if err := env.Client.Get(ctx, types.NamespacedName{Name: rig.Spec.NodeName}, &n); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(n.DeepCopy())
		change(&n)
		if err := env.Client.Patch(ctx, &n, patch); err != nil {
			t.Fatal(err)
		}
	}
	notReadyBy := func(r *farmv1.DeviceRig) bool {
		c := rigCondition(r, farmv1.ConditionReady)
		return r.Status.Phase == farmv1.RigNotReady && c != nil && c.Reason == farmv1.ReasonNodeCordoned
	}
	ready := func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady }

	setNode(func(n *corev1.Node) { n.Spec.Unschedulable = true })
	r := env.WaitRig(t, ns, "rig", notReadyBy)
	if c := rigCondition(r, farmv1.ConditionNodeReady); !strings.Contains(c.Message, "cordoned") {
		t.Errorf("NodeReady %+v: the message should say the node is cordoned", c)
	}
	setNode(func(n *corev1.Node) { n.Spec.Unschedulable = false })
	env.WaitRig(t, ns, "rig", ready)

	setNode(func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: farmv1.TaintRig, Effect: corev1.TaintEffectNoExecute}}
	})
	// The loop pods tolerate the rig taint: give the controller a few probes to (wrongly) react.
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		if r := getRig(t, ns, "rig"); r.Status.Phase != farmv1.RigReady {
			t.Fatalf("the rig taint made the rig %s", r.Status.Phase)
		}
	}
	setNode(func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute})
	})
	r = env.WaitRig(t, ns, "rig", notReadyBy)
	if c := rigCondition(r, farmv1.ConditionNodeReady); !strings.Contains(c.Message, "example.com/drain") {
		t.Errorf("NodeReady %+v: the message should name the taint", c)
	}
	setNode(func(n *corev1.Node) { n.Spec.Taints = n.Spec.Taints[:1] })
	env.WaitRig(t, ns, "rig", ready)
}

func getRig(t *testing.T, ns, name string) *farmv1.DeviceRig {
	t.Helper()
	var r farmv1.DeviceRig
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}
