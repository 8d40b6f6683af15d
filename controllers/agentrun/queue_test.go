package agentrun

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The queue hands free rigs to waiting runs oldest first, each taking the
// first free rig (by name) it may use: FIFO per rig, and N free rigs to the N
// oldest runs at once.
func TestReadQueueHandsFreeRigsOldestFirst(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rig := func(name string, phase farmv1.RigPhase, unschedulable bool) *farmv1.DeviceRig {
		return &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, Labels: map[string]string{"pool": "ios"}},
			Spec: farmv1.DeviceRigSpec{Unschedulable: unschedulable}, Status: farmv1.DeviceRigStatus{Phase: phase}}
	}
	run := func(name string, age int, ref string, phase farmv1.RunPhase) *farmv1.AgentRun {
		r := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(age) * time.Second))}, Status: farmv1.AgentRunStatus{Phase: phase}}
		if ref != "" {
			r.Spec.RigRef = &farmv1.RigReference{Name: ref}
		} else {
			r.Spec.RigSelector = &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "ios"}}
		}
		return r
	}
	holder := "uid-r0"
	leaseOfC := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "c",
		Labels: map[string]string{farmv1.LabelRig: "c", farmv1.LabelRun: "r0", farmv1.LabelRunUID: holder}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	cancelled := run("r9", 0, "", farmv1.RunQueued)
	cancelled.Spec.Cancel = true

	objs := []client.Object{
		rig("a", farmv1.RigReady, false), rig("b", farmv1.RigInUse, false), rig("c", farmv1.RigReady, false),
		rig("d", farmv1.RigNotReady, false), rig("e", farmv1.RigReady, true),
		leaseOfC,
		run("r0", 0, "", farmv1.RunQueued), // holds c already: the cache still says Queued
		cancelled,                          // cancelled runs take nothing
		run("r1", 1, "", farmv1.RunQueued), // selector: first free rig, a
		run("r2", 2, "b", farmv1.RunPending),
		run("r3", 3, "", farmv1.RunQueued),  // nothing left: c is leased, d not ready, e in maintenance
		run("r4", 4, "a", farmv1.RunQueued), // a went to the older r1
		run("r5", 5, "b", farmv1.RunSucceeded),
	}
	r := newQueueReconciler(t, objs...)
	q, err := r.readQueue(context.Background(), "farm", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"r1": "a", "r2": "b"}
	if len(q.given) != len(want) || q.given["r1"] != "a" || q.given["r2"] != "b" {
		t.Fatalf("given %v, want %v", q.given, want)
	}
	var order []string
	for _, w := range q.waiting {
		order = append(order, w.Name)
	}
	if got := strings.Join(order, " "); got != "r1 r2 r3 r4" {
		t.Fatalf("waiting %q, want oldest first without the holder, the cancelled and the finished", got)
	}

	// Only rigRef runs: one rig's queue is read alone, and its oldest run gets it.
	r = newQueueReconciler(t, rig("a", farmv1.RigReady, false), rig("b", farmv1.RigReady, false),
		run("x2", 2, "a", farmv1.RunQueued), run("x1", 1, "a", farmv1.RunQueued), run("y1", 0, "b", farmv1.RunQueued))
	q, err = r.readQueue(context.Background(), "farm", "a", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(q.given) != 1 || q.given["x1"] != "a" {
		t.Fatalf("rig a's queue gave %v, want x1 (the oldest) only", q.given)
	}
	// A leased rig goes to nobody, even if its holder still looks queued in the cache.
	holderX1 := "uid-x1"
	r = newQueueReconciler(t, rig("a", farmv1.RigInUse, false), run("x2", 2, "a", farmv1.RunQueued), run("x1", 1, "a", farmv1.RunQueued),
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "a",
			Labels: map[string]string{farmv1.LabelRig: "a", farmv1.LabelRun: "x1", farmv1.LabelRunUID: holderX1}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holderX1}})
	if q, err = r.readQueue(context.Background(), "farm", "a", "", ""); err != nil || len(q.given) != 0 {
		t.Fatalf("a leased rig was given: %v, %v", q.given, err)
	}

	// The holder giving a rig up hands it to the run the queue gives it to:
	// the oldest of its own runs, or an older selector run that matches.
	holderH := "uid-h"
	leaseOfA := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "a",
		Labels: map[string]string{farmv1.LabelRig: "a", farmv1.LabelRun: "h", farmv1.LabelRunUID: holderH}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holderH}}
	next := func(objs ...client.Object) string {
		t.Helper()
		n, err := newQueueReconciler(t, objs...).nextHolder(context.Background(), "farm", "a")
		if err != nil {
			t.Fatal(err)
		}
		if n == nil {
			return ""
		}
		return n.Name
	}
	if got := next(rig("a", farmv1.RigInUse, false), leaseOfA, run("h", 0, "a", farmv1.RunSucceeded),
		run("x2", 2, "a", farmv1.RunQueued), run("x1", 1, "a", farmv1.RunPending)); got != "x1" {
		t.Fatalf("next holder %q, want x1, the oldest waiting for the rig", got)
	}
	if got := next(rig("a", farmv1.RigInUse, false), leaseOfA, run("h", 0, "a", farmv1.RunPending),
		run("x1", 1, "a", farmv1.RunQueued)); got != "x1" {
		t.Fatalf("next holder %q, want x1: the holder itself may still look Pending (its status lags its Lease)", got)
	}
	if got := next(rig("a", farmv1.RigInUse, false), leaseOfA, run("x1", 1, "a", farmv1.RunQueued),
		run("s0", 0, "", farmv1.RunQueued)); got != "s0" {
		t.Fatalf("next holder %q, want s0, the older selector run", got)
	}
	if got := next(rig("a", farmv1.RigInUse, true), leaseOfA, run("x1", 1, "a", farmv1.RunQueued)); got != "" {
		t.Fatalf("a rig going into maintenance was handed to %q", got)
	}
	if got := next(rig("a", farmv1.RigInUse, false), leaseOfA, run("x1", 1, "b", farmv1.RunQueued)); got != "" {
		t.Fatalf("a rig nobody waits for was handed to %q", got)
	}
}

// A run never queued before has waited since its creation, even when its
// first Queued status was held back; a re-queued run keeps its first mark.
func TestMarkQueued(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := created.Add(40 * time.Second)
	for _, tc := range []struct {
		phase farmv1.RunPhase
		had   *metav1.Time
		want  time.Time
	}{
		{farmv1.RunPending, nil, created},
		{farmv1.RunQueued, nil, now},
		{farmv1.RunQueued, &metav1.Time{Time: created.Add(5 * time.Second)}, created.Add(5 * time.Second)},
	} {
		run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Status: farmv1.AgentRunStatus{Phase: tc.phase, QueuedAt: tc.had}}
		markQueued(run, now)
		if got := run.Status.QueuedAt; got == nil || !got.Time.Equal(tc.want) {
			t.Errorf("phase %s, queuedAt %v: marked %v, want %v", tc.phase, tc.had, got, tc.want)
		}
	}
}

func newQueueReconciler(t *testing.T, objs ...client.Object) *Reconciler {
	t.Helper()
	s := runtime.NewScheme()
	if err := farmv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(s); err != nil { // a release reads the run's pods
		t.Fatal(err)
	}
	r := &Reconciler{}
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&farmv1.AgentRun{}, queueIndex, r.indexQueue).
		WithIndex(&farmv1.DeviceRig{}, rigLabelIndex, rigLabelKeys).
		Build()
	// The manager's cache indexes each run as it arrives; the fake client
	// only when it lists.
	for _, o := range objs {
		if run, ok := o.(*farmv1.AgentRun); ok {
			r.indexQueue(run)
		}
	}
	return r
}

// A read for one rig reads only the part of the queue connected to it, and
// hands that rig out as a read of the whole namespace would. Selectors may
// chain parts together: a rig matched by two selectors joins their pools.
func TestQueuePartDecidesAsTheWholeQueue(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rnd := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 40; trial++ {
		var objs []client.Object
		pools := []string{"a", "b", "c", "d"}
		nRigs := 4 + rnd.IntN(12)
		for i := 0; i < nRigs; i++ {
			lbl := map[string]string{"pool": pools[rnd.IntN(len(pools))]}
			if rnd.IntN(4) == 0 {
				lbl["gpu"] = "yes"
			}
			phase := farmv1.RigReady
			if rnd.IntN(5) == 0 {
				phase = farmv1.RigNotReady
			}
			name := fmt.Sprintf("rig-%02d", i)
			objs = append(objs, &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, Labels: lbl},
				Status: farmv1.DeviceRigStatus{Phase: phase}})
			if rnd.IntN(3) == 0 {
				holder := "uid-holder-" + name
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name,
					Labels: map[string]string{farmv1.LabelRig: name, farmv1.LabelRun: "holder-" + name, farmv1.LabelRunUID: holder}},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}})
			}
		}
		for i := 0; i < 30; i++ {
			run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: fmt.Sprintf("run-%02d", i),
				UID: types.UID(fmt.Sprintf("uid-%d", i)), CreationTimestamp: metav1.NewTime(base.Add(time.Duration(rnd.IntN(20)) * time.Second))},
				Status: farmv1.AgentRunStatus{Phase: farmv1.RunQueued}}
			switch rnd.IntN(3) {
			case 0:
				run.Spec.RigRef = &farmv1.RigReference{Name: fmt.Sprintf("rig-%02d", rnd.IntN(nRigs))}
			case 1:
				run.Spec.RigSelector = &farmv1.RigSelector{MatchLabels: map[string]string{"pool": pools[rnd.IntN(len(pools))]}}
			default:
				run.Spec.RigSelector = &farmv1.RigSelector{MatchLabels: map[string]string{"gpu": "yes"}}
			}
			objs = append(objs, run)
		}
		r := newQueueReconciler(t, objs...)
		whole, err := r.readQueue(context.Background(), "farm", "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < nRigs; i++ {
			rig := fmt.Sprintf("rig-%02d", i)
			part, err := r.readQueue(context.Background(), "farm", rig, "", "")
			if err != nil {
				t.Fatal(err)
			}
			want, got := "", ""
			for run, to := range whole.given {
				if to == rig {
					want = run
				}
			}
			for run, to := range part.given {
				if to == rig {
					got = run
				}
			}
			if got != want {
				t.Fatalf("trial %d: %s goes to %q reading its part, to %q reading the whole namespace", trial, rig, got, want)
			}
		}
	}

	// Two pools, no selector joining them: a read for pool a's rig sees none of pool b's runs.
	r := newQueueReconciler(t,
		&farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "a1", Labels: map[string]string{"pool": "a"}}, Status: farmv1.DeviceRigStatus{Phase: farmv1.RigReady}},
		&farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "b1", Labels: map[string]string{"pool": "b"}}, Status: farmv1.DeviceRigStatus{Phase: farmv1.RigReady}},
		&farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "ra", UID: "ua"}, Spec: farmv1.AgentRunSpec{RigSelector: &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "a"}}}},
		&farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rb", UID: "ub"}, Spec: farmv1.AgentRunSpec{RigSelector: &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "b"}}}},
		&farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rb1", UID: "ub1"}, Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "b1"}}})
	q, err := r.readQueue(context.Background(), "farm", "a1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(q.waiting) != 1 || q.waiting[0].Name != "ra" || q.given["ra"] != "a1" {
		t.Fatalf("pool a's part: waiting %v, given %v; want ra alone, given a1", names(q.waiting), q.given)
	}
}

func names(runs []*farmv1.AgentRun) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Name
	}
	return out
}
