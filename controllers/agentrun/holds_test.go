package agentrun

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The rigs, runs and Leases of the tests of this file: a pool "ios" of
// rigs, runs that wait for it by selector (ref "") or for one rig by name.
var holdsBase = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func poolRig(name string) *farmv1.DeviceRig {
	return &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, Labels: map[string]string{"pool": "ios"}},
		Status: farmv1.DeviceRigStatus{Phase: farmv1.RigReady}}
}

func poolRun(name string, age int, ref string) *farmv1.AgentRun {
	r := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(holdsBase.Add(time.Duration(age) * time.Second))},
		Status: farmv1.AgentRunStatus{Phase: farmv1.RunQueued}}
	if ref != "" {
		r.Spec.RigRef = &farmv1.RigReference{Name: ref}
	} else {
		r.Spec.RigSelector = &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "ios"}}
	}
	return r
}

func leaseFor(rig string, run *farmv1.AgentRun) *coordinationv1.Lease {
	holder := string(run.UID)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: rig,
		Labels: map[string]string{farmv1.LabelRig: rig, farmv1.LabelRun: run.Name, farmv1.LabelRunUID: holder}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
}

// A hold is one rig per run: a second rig is refused while the first is
// noted, the same rig is not, and a note older than ownWriteWait gives way.
// A run done with rigs takes none.
func TestHoldIsOneRigPerRun(t *testing.T) {
	t.Parallel()
	var n notes
	run := poolRun("s0", 0, "")
	if !n.hold(run, "a", holdsBase) || !n.hold(run, "a", holdsBase.Add(time.Second)) {
		t.Fatal("the first hold, or the same rig again, was refused")
	}
	if n.hold(run, "b", holdsBase.Add(time.Second)) {
		t.Fatal("a second rig was noted while the first is")
	}
	if rig, ok := n.heldNote(run, holdsBase.Add(time.Second)); !ok || rig != "a" {
		t.Fatalf("heldNote = %q, %v; want a", rig, ok)
	}
	if !n.hold(run, "b", holdsBase.Add(ownWriteWait+time.Second)) {
		t.Fatal("a stale hold kept the run from another rig")
	}
	n.unhold(run, "a") // not the noted rig: nothing happens
	if rig, _ := n.heldNote(run, holdsBase.Add(ownWriteWait+time.Second)); rig != "b" {
		t.Fatalf("unhold of another rig dropped the note of b: %q", rig)
	}
	n.unhold(run, "b")
	if _, ok := n.heldNote(run, holdsBase.Add(ownWriteWait+time.Second)); ok {
		t.Fatal("the note outlived its unhold")
	}
	n.doneWithRigs(run, holdsBase)
	if rig, ok := n.heldNote(run, holdsBase); !ok || rig != "" {
		t.Fatalf("a run done with rigs: heldNote = %q, %v; want no rig, noted", rig, ok)
	}
	if n.hold(run, "a", holdsBase) {
		t.Fatal("a run done with rigs was noted a rig")
	}
	// Another run of the same name (deleted and made again) is not held back.
	again := poolRun("s0", 0, "")
	again.UID = "uid-s0-again"
	if !n.hold(again, "a", holdsBase) {
		t.Fatal("a new run of a reused name inherited the old one's note")
	}
}

// The queue hands nothing more to a run that a rig was just noted for
// (the cache shows neither its Lease nor its new status yet), and counts
// that rig as taken; nor to a run done with rigs. Two holders giving up
// their rigs at once hand them to two runs, not both to the oldest.
func TestQueuePassesOverNotedRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s0, s1, s2 := poolRun("s0", 0, ""), poolRun("s1", 1, ""), poolRun("s2", 2, "")
	r := newQueueReconciler(t, poolRig("a"), poolRig("b"), s0, s1, s2)
	r.notes.hold(s0, "a", r.now())
	q, err := r.readQueue(ctx, "farm", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(q.given) != 1 || q.given["s1"] != "b" {
		t.Fatalf("given %v, want only s1 → b: s0 holds a, which the cache does not show", q.given)
	}

	// Hand-overs: h1 and h2 give up a and b at once.
	h1, h2 := poolRun("h1", -2, ""), poolRun("h2", -1, "")
	h1.Status.Phase, h2.Status.Phase = farmv1.RunSucceeded, farmv1.RunSucceeded
	r = newQueueReconciler(t, poolRig("a"), poolRig("b"), leaseFor("a", h1), leaseFor("b", h2), h1, h2, s0, s1, s2)
	now := r.now()
	first, err := r.handTo(ctx, h1, world{now: now, held: "a"})
	if err != nil || first == nil || first.Name != "s0" {
		t.Fatalf("a goes to %v (%v), want s0", first, err)
	}
	second, err := r.handTo(ctx, h2, world{now: now, held: "b"})
	if err != nil || second == nil || second.Name != "s1" {
		t.Fatalf("b goes to %v (%v), want s1: s0 was just handed a", second, err)
	}
	// A run that finished and gave its rig back, which the cache shows
	// queued still, is passed over too.
	r = newQueueReconciler(t, poolRig("a"), leaseFor("a", h1), h1, s0, s1)
	r.notes.doneWithRigs(s0, r.now())
	if next, err := r.handTo(ctx, h1, world{now: r.now(), held: "a"}); err != nil || next == nil || next.Name != "s1" {
		t.Fatalf("a goes to %v (%v), want s1: s0 is done with rigs", next, err)
	}

	// One rig's queue: a rigRef run that just took its rig leaves it to
	// nobody else, though the cache shows it free.
	x1, x2 := poolRun("x1", 1, "a"), poolRun("x2", 2, "a")
	r = newQueueReconciler(t, poolRig("a"), x1, x2)
	r.notes.hold(x1, "a", r.now())
	if q, err := r.readQueue(ctx, "farm", "a", "", ""); err != nil || len(q.given) != 0 {
		t.Fatalf("rig a, just taken by x1, was given %v (%v)", q.given, err)
	}
}

// A run's own reconcile takes a noted rig as held while the cache does not
// show the Lease, once the API server says the run holds it; a note the
// API server does not bear out is dropped.
func TestHeldRigsReadsTheNotedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s0 := poolRun("s0", 0, "")
	r := newQueueReconciler(t, s0)
	r.APIReader = newQueueReconciler(t, leaseFor("a", s0)).Client
	r.notes.hold(s0, "a", r.now())
	held, err := r.heldRigs(ctx, s0, r.now())
	if err != nil || len(held) != 1 || held[0] != "a" {
		t.Fatalf("held %v (%v), want a from the API server", held, err)
	}
	other := poolRun("other", 0, "")
	r.APIReader = newQueueReconciler(t, leaseFor("a", other)).Client
	if held, err = r.heldRigs(ctx, s0, r.now()); err != nil || len(held) != 0 {
		t.Fatalf("held %v (%v), want none: another run holds a", held, err)
	}
	if _, ok := r.notes.heldNote(s0, r.now()); ok {
		t.Fatal("a note the API server does not bear out was kept")
	}
	// Once the cache shows the Lease, the note goes: the queue reads the Lease.
	r = newQueueReconciler(t, s0, leaseFor("a", s0))
	r.APIReader = client.Reader(nil)
	r.notes.hold(s0, "a", r.now())
	if held, err = r.heldRigs(ctx, s0, r.now()); err != nil || len(held) != 1 || held[0] != "a" {
		t.Fatalf("held %v (%v), want a from the cache", held, err)
	}
	if _, ok := r.notes.heldNote(s0, r.now()); ok {
		t.Fatal("the note outlived the cache showing the Lease")
	}
}

// A finished run is noted done with rigs before its Lease passes on: a
// worker whose cache shows the Lease's new holder, and the run still
// waiting, hands it nothing more (bench-scale saw such runs handed a
// second rig, held idle until their next reconcile gave it back).
func TestReleaseNotesDoneWithRigsBeforeTheLeaseMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h1, s0 := poolRun("h1", -1, ""), poolRun("s0", 0, "")
	h1.Status.Phase = farmv1.RunSucceeded
	r := newQueueReconciler(t, poolRig("a"), leaseFor("a", h1), h1, s0)
	var atWrite []string
	r.Client = interceptor.NewClient(r.Client.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				rig, noted := r.notes.heldNote(h1, r.now())
				atWrite = append(atWrite, fmt.Sprintf("%s noted=%v rig=%q", obj.GetName(), noted, rig))
			}
			return c.Update(ctx, obj, opts...)
		}})
	r.APIReader = r.Client
	released, err := r.releaseRig(ctx, h1, world{now: r.now(), held: "a"})
	if err != nil || !released {
		t.Fatalf("releaseRig = %v, %v; want released", released, err)
	}
	if want := []string{`a noted=true rig=""`}; !slices.Equal(atWrite, want) {
		t.Fatalf("at the Lease's write: %v, want %v (h1 noted done with rigs before the hand-over)", atWrite, want)
	}
	var l coordinationv1.Lease
	if err := r.Get(ctx, client.ObjectKey{Namespace: "farm", Name: "a"}, &l); err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != string(s0.UID) {
		t.Fatalf("rig a's Lease after the release: %+v (%v), want it handed to s0", l.Spec, err)
	}
}
