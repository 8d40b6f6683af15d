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
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// A run whose attempt found its rig not set up makes the rig be probed at
// once, whatever its probe interval, and the probe's time recorded: the run
// waits for that probe before it starts its next attempt.
func TestNotSetUpAttemptProbesTheRigAtOnce(t *testing.T) {
	t.Parallel()
	var probes atomic.Int64
	var unset atomic.Bool
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probes.Add(1)
		if unset.Load() {
			_, _ = w.Write([]byte(bare))
			return
		}
		_, _ = w.Write([]byte(setUp))
	}))
	defer health.Close()

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = farmv1.AddToScheme(scheme)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-1", Generation: 1},
		Spec: farmv1.DeviceRigSpec{NodeName: "n1", Endpoint: farmv1.RigEndpoint{URL: health.URL + "/mcp"}}}
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "task", UID: "uid-1"},
		Status: farmv1.AgentRunStatus{Rig: "rig-1"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(node, rig, run).WithStatusSubresource(rig, run).Build()
	if res, err := lease.Acquire(context.Background(), c, "rig-1", lease.HolderOf(run)); err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk, HTTP: health.Client(),
		Config: Config{ProbeInterval: time.Hour, ProbeTimeout: time.Second}}
	key := types.NamespacedName{Namespace: "farm", Name: "rig-1"}
	reconcile := func() farmv1.DeviceRig {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var got farmv1.DeviceRig
		if err := c.Get(context.Background(), key, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := reconcile(); got.Status.Phase != farmv1.RigInUse || probes.Load() != 1 {
		t.Fatalf("first reconcile: %s after %d probes, want InUse after 1", got.Status.Phase, probes.Load())
	}

	// The phone's set-up is lost (a camera unplugged); no probe is due for an hour.
	unset.Store(true)
	clk.SetTime(clk.Now().Add(time.Minute))
	if got := reconcile(); got.Status.Phase != farmv1.RigInUse || probes.Load() != 1 {
		t.Fatalf("before the report: %s after %d probes, want still InUse and no probe", got.Status.Phase, probes.Load())
	}
	// The run's attempt ends rig_not_ready: the rig is probed now.
	ended := metav1.NewTime(clk.Now())
	run.Status.Attempts = []farmv1.AttemptRecord{{Attempt: 1, Pod: "task-a1", FinishTime: &ended,
		Sentinel: string(contract.Stuck), ExitReason: string(contract.ReasonRigNotReady), Outcome: farmv1.OutcomeInfrastructure}}
	if err := c.Status().Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	// Status times are whole seconds: a probe in the second the attempt
	// finished could not tell the run it came after, so it comes from the
	// next second on, and the rig is looked at again then.
	clk.SetTime(clk.Now().Add(200 * time.Millisecond))
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	if err != nil {
		t.Fatal(err)
	}
	if probes.Load() != 1 || res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Fatalf("in the attempt's second: %d probes, requeue after %s; want no probe yet and a look within a second", probes.Load(), res.RequeueAfter)
	}
	clk.SetTime(ended.Add(time.Second))
	got := reconcile()
	if got.Status.Phase != farmv1.RigNotReady || probes.Load() != 2 || got.Status.LastProbeTime == nil || !got.Status.LastProbeTime.After(ended.Time) {
		t.Fatalf("after the report: %s after %d probes, last probe %v; want NotReady after 2, probed after %v",
			got.Status.Phase, probes.Load(), got.Status.LastProbeTime, ended)
	}
	// Asked once: the next reconcile waits for the interval again.
	clk.SetTime(clk.Now().Add(time.Second))
	reconcile()
	if probes.Load() != 2 {
		t.Errorf("%d probes, want 2: one report asks for one probe", probes.Load())
	}
}
