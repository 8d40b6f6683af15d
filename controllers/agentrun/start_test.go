package agentrun

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// The reconcile that creates a run's pod leaves the Running status to the
// next one (the pod's own event brings it). A pod that ends before that
// status is written still gives the run its start time, from this manager's
// note or, after a restart, from the pod; the queue wait and time to pod are
// observed once, when the status that records the start is written, however
// many status writes follow.
func TestStartIsRecordedOnceWhateverReconcileWritesIt(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		restart, running bool
	}{
		{name: "the pod ends before a status says Running"},
		{name: "the manager restarts, then the pod ends", restart: true},
		{name: "Running is written, then the pod ends", running: true},
	} {
		restart := tc.restart
		clk := clocktesting.NewFakeClock(created.Add(2 * time.Second))
		c := startTestClient(t, readyRigAndRun(created)...)
		type observation struct{ wait, toPod time.Duration }
		var seen []observation
		newReconciler := func() *Reconciler {
			return &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk,
				Config:       Config{Loop: attempt.Defaults{Image: "loop"}, StartupTimeout: time.Minute, NodeLostGrace: time.Minute},
				observeStart: func(wait, toPod time.Duration) { seen = append(seen, observation{wait, toPod}) }}
		}
		r := newReconciler()
		reconcileRun := func() *farmv1.AgentRun {
			t.Helper()
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "farm", Name: "run"}}); err != nil {
				t.Fatal(err)
			}
			var run farmv1.AgentRun
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "farm", Name: "run"}, &run); err != nil {
				t.Fatal(err)
			}
			return &run
		}

		// 1. The rig is taken and the pod created; no status write yet.
		if run := reconcileRun(); run.Status.Phase != "" || run.Status.StartTime != nil {
			t.Fatalf("the reconcile that created the pod wrote status %+v", run.Status)
		}
		var pod corev1.Pod
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "farm", Name: attempt.PodName("run", 1, 0)}, &pod); err != nil {
			t.Fatalf("no attempt pod: %v", err)
		}
		if len(seen) != 0 {
			t.Fatalf("observed %v before any status recorded the start", seen)
		}

		if tc.running {
			// The pod's event brings a reconcile within startRecordDelay of the
			// pod's creation: it writes nothing, and comes back when the delay
			// is up, behind the urgent work.
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
			if err := c.Status().Update(context.Background(), &pod); err != nil {
				t.Fatal(err)
			}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "farm", Name: "run"}})
			if err != nil {
				t.Fatal(err)
			}
			var early farmv1.AgentRun
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "farm", Name: "run"}, &early); err != nil {
				t.Fatal(err)
			}
			if early.Status.Phase != "" || len(seen) != 0 {
				t.Fatalf("the start was written %s after the pod's creation: phase %q, observed %v; want it held for %s",
					clk.Since(created.Add(2*time.Second)), early.Status.Phase, seen, startRecordDelay)
			}
			if res.RequeueAfter <= 0 || res.RequeueAfter > startRecordDelay || res.Priority == nil || *res.Priority >= 0 {
				t.Fatalf("the held start asks for %+v; want to come back within %s at a low priority", res, startRecordDelay)
			}
			// Once the delay is up, the reconcile writes Running and the start.
			clk.Step(startRecordDelay)
			if run := reconcileRun(); run.Status.Phase != farmv1.RunRunning || run.Status.StartTime == nil || len(seen) != 1 {
				t.Fatalf("%s: after the pod's event: phase %q, start %v, observed %v; want Running, a start, observed once",
					tc.name, run.Status.Phase, run.Status.StartTime, seen)
			}
		}

		// 2. The pod ends with DONE (before any reconcile wrote Running, unless tc.running).
		podCreated := created.Add(5 * time.Second) // what the API server says, to the second
		pod.CreationTimestamp = metav1.NewTime(podCreated)
		if err := c.Update(context.Background(), &pod); err != nil {
			t.Fatal(err)
		}
		msg, _ := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "ok", ExitReason: contract.ReasonEndTurn}.Encode()
		pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
			Name: attempt.ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", Message: string(msg)}}}}}
		if err := c.Status().Update(context.Background(), &pod); err != nil {
			t.Fatal(err)
		}
		if restart {
			r = newReconciler() // a new manager: no note of when it took the rig or made the pod
		}
		clk.Step(10 * time.Second)
		run := reconcileRun()
		if run.Status.Phase != farmv1.RunSucceeded {
			t.Fatalf("%s: phase %q, want Succeeded", tc.name, run.Status.Phase)
		}
		if run.Status.Rig != "rig" || run.Status.Attempt != 1 {
			// (the rig is in the start's write, which a short session folds
			// into its outcome: the outcome names it from the pod)
			t.Fatalf("%s: rig %q, attempt %d; want rig, 1", tc.name, run.Status.Rig, run.Status.Attempt)
		}
		wantStart := created.Add(2 * time.Second) // the note: the moment the pod was created
		if restart {
			wantStart = podCreated
		}
		if run.Status.StartTime == nil || !run.Status.StartTime.Time.Equal(wantStart) {
			t.Fatalf("%s: startTime %v, want %v", tc.name, run.Status.StartTime, wantStart)
		}
		want := observation{2 * time.Second, 2 * time.Second}
		if restart {
			want = observation{5 * time.Second, 5 * time.Second}
		}
		if len(seen) != 1 || seen[0] != want {
			t.Fatalf("%s: observed %v, want once %v", tc.name, seen, want)
		}

		// 3. Later reconciles observe nothing again.
		reconcileRun()
		if len(seen) != 1 {
			t.Fatalf("%s: observed again: %v", tc.name, seen)
		}
	}
}

// readyRigAndRun is a Ready rig and a new run for it, created at created.
func readyRigAndRun(created time.Time) []client.Object {
	return []client.Object{
		&farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig"},
			Spec:   farmv1.DeviceRigSpec{NodeName: "node", Endpoint: farmv1.RigEndpoint{URL: "http://rig/mcp"}},
			Status: farmv1.DeviceRigStatus{Phase: farmv1.RigReady}},
		&farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "run", UID: "uid-run", Generation: 1,
			CreationTimestamp: metav1.NewTime(created)},
			Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "t",
				Model: farmv1.ModelSpec{Provider: "openai", Name: "m"}}},
	}
}

func startTestClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{farmv1.AddToScheme, coordinationv1.AddToScheme, corev1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&farmv1.AgentRun{}, &farmv1.DeviceRig{}).
		WithIndex(&farmv1.AgentRun{}, queueIndex, func(o client.Object) []string { return queueKey(o.(*farmv1.AgentRun)) }).
		WithIndex(&farmv1.DeviceRig{}, rigLabelIndex, rigLabelKeys).
		WithIndex(&corev1.Pod{}, podRunIndex, func(o client.Object) []string {
			if run := o.GetLabels()[farmv1.LabelRun]; run != "" {
				return []string{run}
			}
			return nil
		}).
		Build()
}

// staleView is a manager cache that lags: it shows an older copy of the run
// and none of the pods in hide.
type staleView struct {
	client.Client
	run  *farmv1.AgentRun
	hide map[string]bool
}

func (v staleView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if r, ok := obj.(*farmv1.AgentRun); ok && v.run != nil && key.Name == v.run.Name {
		v.run.DeepCopyInto(r)
		return nil
	}
	return v.Client.Get(ctx, key, obj, opts...)
}

func (v staleView) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := v.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if pods, ok := list.(*corev1.PodList); ok {
		kept := pods.Items[:0]
		for _, p := range pods.Items {
			if !v.hide[p.Name] {
				kept = append(kept, p)
			}
		}
		pods.Items = kept
	}
	return nil
}

// A reconcile whose cache has not yet shown the manager's own last status
// write does nothing: with the run as it was before an attempt was recorded
// and that attempt's pod deleted (it never started), it would create the pod
// again next to the retry that now runs on the same phone.
func TestNothingIsDoneOnACacheOlderThanTheManagersOwnWrite(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(created.Add(time.Minute))
	c := startTestClient(t, readyRigAndRun(created)...)
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk,
		Config:       Config{Loop: attempt.Defaults{Image: "loop"}, StartupTimeout: 10 * time.Second, NodeLostGrace: time.Minute},
		observeStart: func(time.Duration, time.Duration) {}}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "farm", Name: "run"}}
	podExists := func(name string) bool {
		var p corev1.Pod
		return c.Get(context.Background(), types.NamespacedName{Namespace: "farm", Name: name}, &p) == nil
	}
	first, retry := attempt.PodName("run", 1, 0), attempt.PodName("run", 1, 1)

	// 1. The first pod is created.
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var before farmv1.AgentRun
	if err := c.Get(context.Background(), req.NamespacedName, &before); err != nil || !podExists(first) {
		t.Fatalf("no first pod: %v", err)
	}
	// 2. It never starts (its creation time is long past the startup
	// timeout): the attempt is recorded, the pod deleted, the retry created.
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if podExists(first) || !podExists(retry) {
		t.Fatalf("after the startup timeout: first pod exists %v, retry exists %v; want the retry only", podExists(first), podExists(retry))
	}
	// 3. A cache that still shows the run as before step 2, and no pods.
	r.Client = staleView{Client: c, run: &before, hide: map[string]bool{retry: true}}
	res, err := r.Reconcile(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if podExists(first) {
		t.Fatal("the first attempt's pod was created again from a stale cache, next to its retry")
	}
	if res.RequeueAfter == 0 {
		t.Fatal("a reconcile behind its own write did not ask to come back")
	}
	// 4. Once the cache shows the write, the run goes on as usual (the retry
	// has just been created: it is not past its startup timeout).
	var p corev1.Pod
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "farm", Name: retry}, &p); err != nil {
		t.Fatal(err)
	}
	p.CreationTimestamp = metav1.NewTime(clk.Now())
	if err := c.Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	r.Client = c
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if podExists(first) || !podExists(retry) {
		t.Fatalf("after the cache caught up: first pod exists %v, retry exists %v", podExists(first), podExists(retry))
	}
}

// A new run behind a busy rig reads Pending, with no status written, for
// its first queuedRecordDelay: it comes back when that is up, at a low
// priority, and is written Queued then if it still waits.
func TestAShortWaitWritesNoQueuedStatus(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(created.Add(time.Second))
	holder := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "holder", UID: "uid-holder", Generation: 1,
		CreationTimestamp: metav1.NewTime(created.Add(-time.Minute))},
		Spec:   farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "t", Model: farmv1.ModelSpec{Provider: "openai", Name: "m"}},
		Status: farmv1.AgentRunStatus{Phase: farmv1.RunRunning, Rig: "rig"}}
	holderID := string(holder.UID)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig",
		Labels: map[string]string{farmv1.LabelRig: "rig", farmv1.LabelRun: holder.Name, farmv1.LabelRunUID: holderID}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holderID}}
	c := startTestClient(t, append(readyRigAndRun(created), holder, lease)...)
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clk,
		Config:       Config{Loop: attempt.Defaults{Image: "loop"}, StartupTimeout: time.Minute, NodeLostGrace: time.Minute},
		observeStart: func(time.Duration, time.Duration) {}}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "farm", Name: "run"}}
	reconcileRun := func() (ctrl.Result, *farmv1.AgentRun) {
		t.Helper()
		res, err := r.Reconcile(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var run farmv1.AgentRun
		if err := c.Get(context.Background(), req.NamespacedName, &run); err != nil {
			t.Fatal(err)
		}
		return res, &run
	}

	res, run := reconcileRun()
	if run.Status.Phase != "" {
		t.Fatalf("a run 1s into its wait was written %q; want no status until %s", run.Status.Phase, queuedRecordDelay)
	}
	if d := queuedRecordDelay - time.Second; res.RequeueAfter != d || res.Priority == nil || *res.Priority >= 0 {
		t.Fatalf("the run asks for %+v; want to come back in %s at a low priority", res, d)
	}
	clk.SetTime(created.Add(queuedRecordDelay))
	_, run = reconcileRun()
	if c := conditions.Get(run.Status.Conditions, farmv1.ConditionRigLeased); run.Status.Phase != farmv1.RunQueued ||
		c == nil || c.Reason != farmv1.ReasonRigBusy {
		t.Fatalf("after %s of waiting: phase %q, RigLeased %+v; want Queued, RigBusy", queuedRecordDelay, run.Status.Phase, c)
	}
}
