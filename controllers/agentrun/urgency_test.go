package agentrun

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The work queue serves a new run, a pod that ended and a Lease handed on
// before the bookkeeping queued ahead of them (a pod's Running status, a
// status write's own event), and the initial list and resyncs after both.
func TestUrgentWorkGoesFirst(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	_ = farmv1.AddToScheme(scheme)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(farmv1.GroupVersion.WithKind("AgentRun"), meta.RESTScopeNamespace)
	pods := urgentWhen(handler.EnqueueRequestForOwner(scheme, mapper, &farmv1.AgentRun{}, handler.OnlyControllerOwner()), podEnded)
	runs := urgentWhen(&handler.EnqueueRequestForObject{}, created)
	leases := urgentWhen(handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{req(o.GetLabels()["next"])}
	}), leaseMoved)

	pod := func(run, rv string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: run + "-a1-r0", ResourceVersion: rv,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: run, UID: "u-" + types.UID(run), Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	runObj := func(name, rv string) *farmv1.AgentRun {
		return &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name, ResourceVersion: rv}}
	}
	lease := func(holder, next, rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-1", ResourceVersion: rv, Labels: map[string]string{"next": next}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}

	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	// Bookkeeping first, in the order it arrives.
	pods.Create(ctx, event.CreateEvent{Object: pod("started", "1", corev1.PodPending)}, q)
	runs.Update(ctx, event.UpdateEvent{ObjectOld: runObj("written", "1"), ObjectNew: runObj("written", "2")}, q)
	pods.Update(ctx, event.UpdateEvent{ObjectOld: pod("unfinalized", "1", corev1.PodSucceeded), ObjectNew: pod("unfinalized", "2", corev1.PodSucceeded)}, q)
	leases.Update(ctx, event.UpdateEvent{ObjectOld: lease("a", "renewed", "1"), ObjectNew: lease("a", "renewed", "2")}, q)
	// Unchanged objects: a resync, the initial list.
	pods.Update(ctx, event.UpdateEvent{ObjectOld: pod("resynced", "3", corev1.PodRunning), ObjectNew: pod("resynced", "3", corev1.PodRunning)}, q)
	runs.Create(ctx, event.CreateEvent{Object: runObj("listed", "1"), IsInInitialList: true}, q)
	// The urgent work, last to arrive.
	pods.Update(ctx, event.UpdateEvent{ObjectOld: pod("ended", "1", corev1.PodRunning), ObjectNew: pod("ended", "2", corev1.PodSucceeded)}, q)
	runs.Create(ctx, event.CreateEvent{Object: runObj("new", "1")}, q)
	leases.Update(ctx, event.UpdateEvent{ObjectOld: lease("a", "handed", "2"), ObjectNew: lease("b", "handed", "3")}, q)
	pods.Delete(ctx, event.DeleteEvent{Object: pod("deleted", "4", corev1.PodRunning)}, q)
	leases.Delete(ctx, event.DeleteEvent{Object: lease("b", "released", "4")}, q)

	want := []struct {
		name     string
		priority int
	}{
		{"ended", urgentPriority}, {"new", urgentPriority}, {"handed", urgentPriority}, {"deleted", urgentPriority}, {"released", urgentPriority},
		{"started", 0}, {"written", 0}, {"unfinalized", 0}, {"renewed", 0},
		{"resynced", handler.LowPriority}, {"listed", handler.LowPriority},
	}
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < len(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the queue takes adds through a buffer
	}
	for i, w := range want {
		item, priority, _ := q.GetWithPriority()
		if item.Name != w.name || priority != w.priority {
			t.Fatalf("item %d served is %s at priority %d, want %s at %d", i, item.Name, priority, w.name, w.priority)
		}
		q.Done(item)
	}
}

func req(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "farm", Name: name}}
}

// A reconcile waits for the cache to show this manager's own writes: its
// last status write (by resource version), the attempt pod it created, the
// finalizer it removed — and stops waiting once the cache shows them, or
// after ownWriteWait.
func TestNotesWaitForTheCacheToShowOwnWrites(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var n notes
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "r", UID: "u1", ResourceVersion: "120"}}
	at := func(rv string) *farmv1.AgentRun { c := run.DeepCopy(); c.ResourceVersion = rv; return c }

	n.wrote(run, now)
	if !n.behindOwnWrite(at("99"), now.Add(time.Second)) || !n.behindOwnWrite(at("119"), now.Add(time.Second)) {
		t.Fatal("a cache older than the own status write (rv 99, 119 < 120) is not seen as behind")
	}
	if n.behindOwnWrite(at("121"), now.Add(time.Second)) {
		t.Fatal("a cache newer than the own write (a progress patch since) is seen as behind")
	}
	if n.behindOwnWrite(at("99"), now.Add(time.Second)) {
		t.Fatal("the note is kept after the cache showed the write")
	}
	n.wrote(run, now)
	if n.behindOwnWrite(at("99"), now.Add(ownWriteWait+time.Second)) {
		t.Fatal("a reconcile waits for a stuck cache past ownWriteWait")
	}
	other := at("99")
	other.UID = "u2"
	n.wrote(run, now)
	if n.behindOwnWrite(other, now) {
		t.Fatal("a new run of the same name waits for the old run's write")
	}

	key := types.NamespacedName{Namespace: "farm", Name: "r"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "r-a1-r0", UID: "p1", ResourceVersion: "300"}}
	n.created(key, pod, now)
	if got := n.podToShow(key, now.Add(time.Second)); got != pod.Name {
		t.Fatalf("podToShow = %q, want the created pod %s", got, pod.Name)
	}
	if got := n.podToShow(key, now.Add(ownWriteWait+time.Second)); got != "" {
		t.Fatalf("podToShow = %q past ownWriteWait, want none", got)
	}
	n.created(key, pod, now)
	n.podShown(key)
	if got := n.podToShow(key, now); got != "" {
		t.Fatalf("podToShow = %q once shown, want none", got)
	}

	n.letGo(key, pod)
	stale := pod.DeepCopy()
	stale.ResourceVersion = "299"
	if !n.stillLettingGo(key, stale) {
		t.Fatal("a cached pod older than the finalizer's removal is patched again")
	}
	if n.stillLettingGo(key, pod) || n.stillLettingGo(key, stale) {
		t.Fatal("the let-go note outlives the cache showing the removal")
	}
	n.letGo(key, pod)
	n.forget(key)
	if n.stillLettingGo(key, stale) || n.podToShow(key, now) != "" {
		t.Fatal("notes outlive the run")
	}
}

// A new run is urgent when it may start now: not when its rig's Lease is
// held, or an older run waits for the same rig; a selector run always is.
func TestANewRunIsUrgentWhenItMayStart(t *testing.T) {
	t.Parallel()
	holder := poolRun("holder", -10, "a")
	older := poolRun("older", -5, "b")
	r := newQueueReconciler(t, poolRig("a"), poolRig("b"), poolRig("c"), leaseFor("a", holder), holder, older)
	for _, tc := range []struct {
		run  *farmv1.AgentRun
		want bool
	}{
		{poolRun("behind-a-lease", 0, "a"), false},
		{poolRun("behind-an-older-run", 0, "b"), false},
		{poolRun("free-rig", 0, "c"), true},
		{poolRun("selector", 0, ""), true},
		{older, true}, // the oldest of its rig's queue, as its own creation showed it
	} {
		if got := r.createdToStart(nil, tc.run); got != tc.want {
			t.Errorf("%s: urgent %v, want %v", tc.run.Name, got, tc.want)
		}
	}
	if r.createdToStart(older, older) {
		t.Error("an update was taken for a creation")
	}
}

// A new run that may start is queued at once and urgent; one behind a busy
// rig is queued for when its Queued status is due (or its queue timeout,
// if sooner), at a low priority: its rig's Lease wakes it before that if its
// turn comes.
func TestANewRunThatMustWaitIsReconciledWhenItsStatusIsDue(t *testing.T) {
	t.Parallel()
	holder := poolRun("holder", -10, "a")
	r := newQueueReconciler(t, poolRig("a"), poolRig("c"), leaseFor("a", holder), holder)
	h := r.newRunEvents()
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	impatient := poolRun("impatient", 0, "a")
	impatient.Spec.Limits.QueueTimeoutSeconds = ptr.To[int32](1)
	h.Create(ctx, event.CreateEvent{Object: poolRun("waits", 0, "a")}, q)
	h.Create(ctx, event.CreateEvent{Object: impatient}, q)
	h.Create(ctx, event.CreateEvent{Object: poolRun("starts", 0, "c")}, q)
	time.Sleep(200 * time.Millisecond)
	if n := q.Len(); n != 1 {
		t.Fatalf("%d runs ready at once, want 1 (the one whose rig is free)", n)
	}
	item, prio, _ := q.GetWithPriority()
	if item.Name != "starts" || prio != urgentPriority {
		t.Fatalf("first: %s at priority %d, want starts at %d", item.Name, prio, urgentPriority)
	}
	q.Done(item)
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	item, prio, _ = q.GetWithPriority()
	if item.Name != "impatient" || prio != handler.LowPriority {
		t.Fatalf("next: %s at priority %d, want impatient (queue timeout 1 s) at %d", item.Name, prio, handler.LowPriority)
	}
	q.Done(item)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d more runs ready a few seconds in; the one behind the busy rig waits %s", n, queuedRecordDelay)
	}
}
