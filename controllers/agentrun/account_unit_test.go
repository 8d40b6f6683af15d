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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

func newAccountReconciler(t *testing.T, objs ...client.Object) *Reconciler {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{farmv1.AddToScheme, coordinationv1.AddToScheme, corev1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{}
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&farmv1.AgentRun{}, queueIndex, r.indexQueue).
		WithIndex(&farmv1.AgentRun{}, accountIndex, indexAccount).
		WithIndex(&farmv1.DeviceRig{}, rigLabelIndex, rigLabelKeys).
		Build()
	r.APIReader = r.Client
	return r
}

// An account's turn is FIFO among the runs that wait for it: a run waiting
// for its account, or not looked at yet, keeps its place; a run that had
// its turn and now waits for a rig keeps none; a run holding a slot passes.
// A run waiting for its account is handed no rig, unless it is the run
// being reconciled.
func TestAccountTurnAndTheRigQueue(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	run := func(name string, age int, reason string) *farmv1.AgentRun {
		r := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(age) * time.Second))},
			Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig-" + name},
				Model: farmv1.ModelSpec{APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "key"}}}},
			Status: farmv1.AgentRunStatus{Phase: farmv1.RunQueued}}
		if reason != "" {
			r.Status.Conditions = []metav1.Condition{{Type: farmv1.ConditionRigLeased, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return r
	}
	a := run("a", 0, farmv1.ReasonRigBusy) // had its turn; waits for its rig
	b := run("b", 1, farmv1.ReasonModelAccountBusy)
	c := run("c", 2, "") // new
	d := run("d", 3, farmv1.ReasonModelAccountBusy)
	h := run("h", 4, farmv1.ReasonModelAccountBusy) // its status lags the slot it holds
	x := run("x", 5, "")                            // another account's, for b's rig
	x.Spec.RigRef.Name, x.Spec.Model.APIKeySecretRef = "rig-b", nil
	holder := lease.Holder{Namespace: "farm", Name: "h", UID: h.UID}
	r := newAccountReconciler(t, a, b, c, d, h, x,
		&farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-b"}, Status: farmv1.DeviceRigStatus{Phase: farmv1.RigReady}})
	ctx := context.Background()
	if _, _, err := lease.TakeSlot(ctx, r.Client, r.Client, "key", 2, holder); err != nil {
		t.Fatal(err)
	}
	acct := modelAccount{secret: "key", cap: 2}
	for _, tc := range []struct {
		run         *farmv1.AgentRun
		place       int
		pass, holds bool
	}{
		{a, 1, true, false},
		{b, 1, true, false},
		{c, 2, false, false},
		{d, 3, false, false},
		{h, 0, true, true},
	} {
		got, err := r.turnOf(ctx, tc.run, acct, "")
		if err != nil {
			t.Fatal(err)
		}
		if got.pass != tc.pass || got.place != tc.place || (got.slot != "") != tc.holds || (!tc.holds && got.inUse != 1) {
			t.Errorf("%s: %+v, want place %d, pass %v, holds a slot %v, 1 in use", tc.run.Name, got, tc.place, tc.pass, tc.holds)
		}
	}
	if got, _ := r.turnOf(ctx, b, modelAccount{secret: "key", invalid: "bad"}, ""); got.pass {
		t.Error("a run of an account whose cap is invalid passed")
	}

	// b waits for its account: rig-b goes to the younger x, unless b is
	// the run being reconciled (its turn has come, its status says so next).
	q, err := r.readQueue(ctx, "farm", "rig-b", "", "")
	if err != nil || q.given["x"] != "rig-b" || q.given["b"] != "" {
		t.Fatalf("rig-b handed out %v (%v), want to x", q.given, err)
	}
	if q, err = r.readQueue(ctx, "farm", "rig-b", "", b.UID); err != nil || q.given["b"] != "rig-b" {
		t.Fatalf("b's own read: %v (%v), want rig-b for b", q.given, err)
	}
}

// A key Secret's cap, once read, is kept for capFresh, and no longer.
func TestCapBookKeepsACapForCapFresh(t *testing.T) {
	t.Parallel()
	var b capBook
	key := types.NamespacedName{Namespace: "farm", Name: "key"}
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	b.put(key, modelAccount{secret: "key", cap: 2}, at)
	if a, ok := b.get(key, at.Add(capFresh-time.Millisecond)); !ok || a.cap != 2 {
		t.Errorf("within capFresh: %+v, %v", a, ok)
	}
	if _, ok := b.get(key, at.Add(capFresh)); ok {
		t.Error("a cap kept past capFresh")
	}
	if _, ok := b.get(key, at.Add(-time.Second)); ok {
		t.Error("a cap read after now (the clock went back) kept")
	}
	b.put(types.NamespacedName{Namespace: "farm", Name: "other"}, modelAccount{secret: "other"}, at.Add(capFresh))
	if len(b.m) != 1 {
		t.Errorf("stale entries kept: %v", b.m)
	}
}

// A session's end passes its rig and its slot together to the rig's next
// run when that run is of the same capped account and its turn has come
// with the slot counted free; when an older run waits for the account, both
// go back, and the account's turn is that older run's.
func TestPassSlotHandsTheSlotWithTheRig(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	key := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "key"}}
	run := func(name string, age int, rig, reason string) *farmv1.AgentRun {
		r := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(age) * time.Second))},
			Spec:   farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: rig}, Model: farmv1.ModelSpec{APIKeySecretRef: key}},
			Status: farmv1.AgentRunStatus{Phase: farmv1.RunQueued}}
		if reason != "" {
			r.Status.Conditions = []metav1.Condition{{Type: farmv1.ConditionRigLeased, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return r
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "key",
		Labels: map[string]string{"farm.clawfarm.dev/model-key": "true"}, Annotations: map[string]string{farmv1.AnnotationMaxSessions: "2"}}}
	rigA := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-a"}, Status: farmv1.DeviceRigStatus{Phase: farmv1.RigInUse}}
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		olderWait bool // a run older than b waits for the account
		want      string
	}{
		{"b's turn", false, "uid-b"},
		{"an older run's turn", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := run("a", 0, "rig-a", "")
			a.Status.Phase = farmv1.RunSucceeded
			b := run("b", 3, "rig-a", farmv1.ReasonRigBusy) // had its turn; waits for rig-a
			c := run("c", 4, "rig-c", "")
			c.Status.Phase = farmv1.RunRunning
			objs := []client.Object{secret, rigA, a, b, c, run("d", 5, "rig-d", farmv1.ReasonModelAccountBusy)}
			if tc.olderWait {
				objs = append(objs, run("x", 1, "rig-x", farmv1.ReasonModelAccountBusy))
			}
			r := newAccountReconciler(t, objs...)
			r.Recorder = events.NewFakeRecorder(10)
			for _, h := range []*farmv1.AgentRun{a, c} {
				if slot, _, err := lease.TakeSlot(ctx, r.Client, r.Client, "key", 2, lease.HolderOf(h)); err != nil || slot == "" {
					t.Fatalf("slot for %s: %q, %v", h.Name, slot, err)
				}
			}
			if res, err := lease.Acquire(ctx, r.Client, "rig-a", lease.HolderOf(a)); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			released, err := r.releaseRig(ctx, a, world{held: "rig-a", rig: rigA})
			if err != nil || !released {
				t.Fatalf("releaseRig: %v, %v", released, err)
			}
			rig, err := lease.Get(ctx, r.Client, "farm", "rig-a")
			if err != nil {
				t.Fatal(err)
			}
			slot, err := lease.Get(ctx, r.Client, "farm", lease.SlotName("key", 0))
			if err != nil {
				t.Fatal(err)
			}
			rigHolder, slotHolder := "", ""
			if rig != nil {
				rigHolder = *rig.Spec.HolderIdentity
			}
			if slot != nil {
				slotHolder = lease.SlotHolder(slot)
			}
			if rigHolder != tc.want || slotHolder != tc.want {
				t.Errorf("rig-a held by %q, a's slot by %q; want both %q", rigHolder, slotHolder, tc.want)
			}
		})
	}
}
