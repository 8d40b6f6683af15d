package devicerig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// An idle rig costs the API server nothing: a probe that finds what the
// status already says writes nothing, and the probe's time is recorded with
// the next change, or on its own once ProbeRecordInterval has passed. A
// change the probe finds is written at once.
func TestIdleRigWritesNothing(t *testing.T) {
	t.Parallel()
	var probes atomic.Int64
	var calibrated atomic.Bool
	calibrated.Store(true)
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probes.Add(1)
		if calibrated.Load() {
			_, _ = w.Write([]byte(`{"arm":true,"camera":true,"bridge":true,"calibrated":true,"origin_pinned":true,"ready":true}`))
			return
		}
		_, _ = w.Write([]byte(`{"arm":true,"camera":true,"bridge":true,"calibrated":false,"origin_pinned":true,"ready":true}`))
	}))
	defer health.Close()

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = farmv1.AddToScheme(scheme)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Message: "kubelet is posting ready status"}}}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-1", Generation: 1},
		Spec: farmv1.DeviceRigSpec{NodeName: "n1", Endpoint: farmv1.RigEndpoint{URL: health.URL + "/mcp"}}}
	var statusWrites atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(node, rig).WithStatusSubresource(rig).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			statusWrites.Add(1)
			return c.SubResource(sub).Update(ctx, o, opts...)
		}}).Build()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk, HTTP: health.Client(),
		Config: Config{ProbeInterval: 15 * time.Second, ProbeTimeout: time.Second, ProbeRecordInterval: 5 * time.Minute}}
	key := types.NamespacedName{Namespace: "farm", Name: "rig-1"}
	reconcile := func() (farmv1.DeviceRig, ctrl.Result) {
		t.Helper()
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		var got farmv1.DeviceRig
		if err := c.Get(context.Background(), key, &got); err != nil {
			t.Fatal(err)
		}
		return got, res
	}

	first, res := reconcile()
	if first.Status.Phase != farmv1.RigReady || first.Status.LastProbeTime == nil || statusWrites.Load() != 1 {
		t.Fatalf("first reconcile: phase %s, lastProbeTime %v, %d writes; want Ready, set, 1", first.Status.Phase, first.Status.LastProbeTime, statusWrites.Load())
	}
	if res.RequeueAfter != 15*time.Second {
		t.Errorf("requeue after %v, want the probe interval", res.RequeueAfter)
	}

	// Nineteen more probes over 4¾ minutes: nothing changed, nothing written.
	for i := 0; i < 19; i++ {
		clk.SetTime(clk.Now().Add(15 * time.Second))
		got, res := reconcile()
		if res.RequeueAfter != 15*time.Second {
			t.Fatalf("probe %d: requeue after %v, want 15s", i+2, res.RequeueAfter)
		}
		if !got.Status.LastProbeTime.Equal(first.Status.LastProbeTime) {
			t.Fatalf("probe %d rewrote lastProbeTime (%v → %v) though nothing changed", i+2, first.Status.LastProbeTime, got.Status.LastProbeTime)
		}
	}
	if n := probes.Load(); n != 20 {
		t.Errorf("%d probes, want 20 (one per interval)", n)
	}
	if n := statusWrites.Load(); n != 1 {
		t.Fatalf("%d status writes for an idle rig over 4¾ minutes, want 1 (the first)", n)
	}

	// A reconcile between probes (a Lease or node event) neither probes nor writes.
	clk.SetTime(clk.Now().Add(5 * time.Second))
	if _, res := reconcile(); res.RequeueAfter != 10*time.Second || probes.Load() != 20 {
		t.Errorf("a reconcile between probes: requeue %v, %d probes; want 10s and no probe", res.RequeueAfter, probes.Load())
	}

	// Past the record interval the probe's time is written, on its own.
	clk.SetTime(clk.Now().Add(10 * time.Second))
	got, _ := reconcile()
	if statusWrites.Load() != 2 || !got.Status.LastProbeTime.Time.Equal(clk.Now().Truncate(time.Second)) {
		t.Fatalf("after 5 minutes: %d writes, lastProbeTime %v; want 2 and %v", statusWrites.Load(), got.Status.LastProbeTime, clk.Now())
	}

	// A change is written at the probe that finds it, with the probe's time.
	calibrated.Store(false)
	clk.SetTime(clk.Now().Add(15 * time.Second))
	got, _ = reconcile()
	if statusWrites.Load() != 3 || got.Status.Phase != farmv1.RigNotReady || !got.Status.LastProbeTime.Time.Equal(clk.Now().Truncate(time.Second)) {
		t.Fatalf("after the rig lost its calibration: %d writes, phase %s, lastProbeTime %v; want 3, NotReady, now",
			statusWrites.Load(), got.Status.Phase, got.Status.LastProbeTime)
	}

	// A new manager (no memory of its probes) starts from the status.
	r2 := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk, HTTP: health.Client(), Config: r.Config}
	clk.SetTime(clk.Now().Add(5 * time.Second))
	if res, err := r2.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil || res.RequeueAfter != 10*time.Second || probes.Load() != 22 {
		t.Errorf("a new manager: requeue %v, err %v, %d probes; want 10s and no probe yet", res.RequeueAfter, err, probes.Load())
	}
}
