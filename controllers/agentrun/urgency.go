package agentrun

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// urgentPriority is the work-queue priority of the reconciles that move a
// phone from one session to the next: recording the pod that ended (and
// handing its rig on), and starting the run the rig was handed to. They go
// before the bookkeeping queued ahead of them — the Running status of pods
// already created, the first Queued status of runs that wait, the no-op
// reconciles a status write brings back — so a busy manager keeps its
// phones working and writes the bookkeeping later, when a pod that has
// ended since lets two status writes fold into one. Unchanged objects (the
// initial list, a resync) stay at the queue's low priority.
const urgentPriority = 10

// urgentWhen returns h with the events that pick says are urgent queued at
// urgentPriority; other events keep the priority h gives them.
func urgentWhen(h handler.EventHandler, pick func(old, new client.Object) bool) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, urgentIf(q, pick(nil, e.Object)))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, urgentIf(q, pick(e.ObjectOld, e.ObjectNew)))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, urgentIf(q, pick(e.Object, nil)))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, q)
		},
	}
}

// urgentIf is q, raising to urgentPriority every add that names no
// priority of its own, when urgent says so and q is a priority queue.
func urgentIf(q workqueue.TypedRateLimitingInterface[reconcile.Request], urgent bool) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !urgent || !ok {
		return q
	}
	return urgentQueue{pq}
}

type urgentQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
}

func (u urgentQueue) Add(item reconcile.Request) {
	u.AddWithOpts(priorityqueue.AddOpts{}, item)
}

func (u urgentQueue) AddAfter(item reconcile.Request, after time.Duration) {
	u.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (u urgentQueue) AddRateLimited(item reconcile.Request) {
	u.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (u urgentQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.Priority == nil {
		p := urgentPriority
		o.Priority = &p
	}
	u.PriorityQueue.AddWithOpts(o, items...)
}

// created picks an object's creation (a new run).
func created(old, new client.Object) bool { return old == nil && new != nil }

// newRunEvents queues a new run's first reconcile. A run that may start now
// (createdToStart) goes at urgentPriority. One that cannot only waits: its
// first reconcile would find it queued behind a busy rig and write nothing
// for queuedRecordDelay (acquire), and the Lease that frees its rig wakes it
// when its turn comes. So that reconcile is queued for when the delay is up
// (or its queue timeout, if sooner), at a low priority, and a burst of new
// runs costs the manager only the reconciles of those that start. The
// initial list keeps the low priority the handler gives it.
func (r *Reconciler) newRunEvents() handler.EventHandler {
	first := urgentWhen(&handler.EnqueueRequestForObject{}, created)
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.IsInInitialList || r.createdToStart(nil, e.Object) {
				first.Create(ctx, e, q)
				return
			}
			after := queuedRecordDelay
			if run, ok := e.Object.(*farmv1.AgentRun); ok {
				if t := time.Duration(run.Spec.Limits.QueueTimeout()) * time.Second; t > 0 && t < after {
					after = t
				}
			}
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				low := handler.LowPriority
				pq.AddWithOpts(priorityqueue.AddOpts{After: after, Priority: &low}, req)
				return
			}
			q.AddAfter(req, after)
		},
	}
}

// createdToStart picks a new run that may start now: not one that names a
// rig whose Lease another run holds, or that an older run waits for. That
// run waits its turn whatever its first reconcile does (it finds it waiting),
// so in a burst of new runs the ones that can start a phone go first. The
// cache decides, so a lagging one only costs the order, never a run.
func (r *Reconciler) createdToStart(old, new client.Object) bool {
	if !created(old, new) {
		return false
	}
	run, ok := new.(*farmv1.AgentRun)
	if !ok || run.Spec.RigRef == nil {
		return true
	}
	ctx := context.Background()
	if l, err := lease.Get(ctx, r.Client, run.Namespace, run.Spec.RigRef.Name); err == nil && l != nil && lease.IsRigLease(l) {
		return false
	}
	waiting, err := r.listWaiting(ctx, run.Namespace, "rig/"+run.Spec.RigRef.Name)
	if err != nil {
		return true
	}
	for _, o := range waiting {
		if o.UID != run.UID && queuedBefore(o, run) {
			return false
		}
	}
	return true
}

// podEnded picks a pod's events that its run must act on at once: the pod
// ended, began terminating, or is gone.
func podEnded(old, new client.Object) bool {
	if new == nil {
		return old != nil // deleted
	}
	p, ok := new.(*corev1.Pod)
	if !ok || old == nil {
		return false
	}
	was, _ := old.(*corev1.Pod)
	if was == nil {
		return false
	}
	return (terminal(p) && !terminal(was)) || (p.DeletionTimestamp != nil && was.DeletionTimestamp == nil)
}

// leaseMoved picks a rig Lease's changes of holder: a hand-over, a release.
func leaseMoved(old, new client.Object) bool {
	if old == nil || new == nil {
		return old != nil // released (deleted); a new Lease is its taker's own
	}
	o, ok1 := old.(*coordinationv1.Lease)
	n, ok2 := new.(*coordinationv1.Lease)
	if !ok1 || !ok2 {
		return false
	}
	return holder(o) != holder(n)
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
