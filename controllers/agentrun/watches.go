package agentrun

import (
	"context"
	"fmt"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
	"github.com/clawfarm/clawfarm/internal/nodestate"
)

// podRunIndex indexes pods by the run they belong to (the run label), so a
// reconcile reads its run's pods without a scan of every pod in the namespace.
const podRunIndex = "farm.clawfarm.dev/run"

// watch registers the cache indexes and the watches: the run's own pods and
// CronJobs, the Leases and rigs that wake queued runs, follow-up runs that
// wake their parent, and the nodes that attempt pods run on.
func (r *Reconciler) watch(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &farmv1.AgentRun{}, queueIndex, r.indexQueue); err != nil {
		return fmt.Errorf("index runs by queue: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podRunIndex, func(o client.Object) []string {
		if run := o.GetLabels()[farmv1.LabelRun]; run != "" {
			return []string{run}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index pods by run: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeIndex, func(o client.Object) []string {
		if p := o.(*corev1.Pod); p.Spec.NodeName != "" && p.Labels[farmv1.LabelKind] == "attempt" && !terminal(p) {
			return []string{p.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &farmv1.DeviceRig{}, rigLabelIndex, rigLabelKeys); err != nil {
		return fmt.Errorf("index rigs by label: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &farmv1.AgentRun{}, accountIndex, indexAccount); err != nil {
		return fmt.Errorf("index runs by model account: %w", err)
	}
	wakeQueue := handler.EnqueueRequestsFromMapFunc(r.queuedRunsForRigOf)
	return ctrl.NewControllerManagedBy(mgr).
		// A new run that may start now, a pod that ended and a Lease handed
		// on are the urgent work (urgency.go): they decide when a phone
		// starts its next session.
		For(&farmv1.AgentRun{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: r.runUpdateNews,
		})).
		Watches(&farmv1.AgentRun{}, r.newRunEvents(), builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false }, DeleteFunc: func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Watches(&corev1.Pod{}, urgentWhen(handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &farmv1.AgentRun{}, handler.OnlyControllerOwner()), podEnded)).
		Owns(&batchv1.CronJob{}).
		Watches(&coordinationv1.Lease{}, urgentWhen(wakeQueue, leaseMoved), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := o.GetLabels()[farmv1.LabelRunUID]
			return ok
		}))).
		Watches(&farmv1.DeviceRig{}, wakeQueue, builder.WithPredicates(predicate.Funcs{UpdateFunc: rigUpdateNews})).
		// A model account's queue moves with its slots and its runs (account.go).
		Watches(&coordinationv1.Lease{}, r.slotEvents(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[farmv1.LabelKind] == farmv1.KindModelAccountSlot
		}))).
		Watches(&farmv1.AgentRun{}, r.accountTurnEvents()).
		Watches(&farmv1.AgentRun{}, handler.EnqueueRequestsFromMapFunc(parentOf), builder.WithPredicates(notHeartbeat)).
		Watches(&farmv1.AgentRun{}, handler.EnqueueRequestsFromMapFunc(r.joinedOf), builder.WithPredicates(notHeartbeat)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.runsOnNode), builder.WithPredicates(nodestate.Changed)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Config.MaxConcurrentReconciles)}).
		Named("agentrun").
		Complete(r)
}

// runUpdateNews picks the updates of a run that its reconcile must see.
// Two kinds bring it nothing: the echo of this manager's own status write
// (notes.ownEcho), and a loop's heartbeat — a progress patch that moves
// only the turn, the tokens, the last note and tool and updatedAt. The
// stall watchdog judges heartbeats at the wake-up it asked for; an
// approval request and a steer delivered still wake the run. Without
// them, a run is reconciled for what changed its world, not once per
// write of its own status, and a session's heartbeats every 2 s cost the
// manager nothing.
func (r *Reconciler) runUpdateNews(e event.UpdateEvent) bool {
	run, ok := e.ObjectNew.(*farmv1.AgentRun)
	return !isHeartbeat(e) && !(ok && r.notes.ownEcho(run))
}

// rigUpdateNews picks the updates of a rig that its queue and the run
// holding it must see: its spec (unschedulable, node, endpoint), its labels
// (selectors), its deletion, and a phase that says whether it can serve. A
// rig going from Ready to InUse and back follows its Lease, whose own event
// wakes the queue; a probe's time or a condition's message decides nothing.
func rigUpdateNews(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*farmv1.DeviceRig)
	rig, okNew := e.ObjectNew.(*farmv1.DeviceRig)
	if !okOld || !okNew {
		return true
	}
	if old.Generation != rig.Generation || rig.DeletionTimestamp != nil || !maps.Equal(old.Labels, rig.Labels) {
		return true
	}
	return old.Status.Phase != rig.Status.Phase && !(old.Status.Phase.Serving() && rig.Status.Phase.Serving())
}

// notHeartbeat passes every event of a run but a loop's heartbeat
// (heartbeatOnly): a follow-up's parent and the runs joined to a session
// follow what the run decides, not its turns.
var notHeartbeat = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !isHeartbeat(e) }}

// isHeartbeat reports whether the event is a run's update by a loop's
// heartbeat alone (heartbeatOnly).
func isHeartbeat(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*farmv1.AgentRun)
	run, okNew := e.ObjectNew.(*farmv1.AgentRun)
	return okOld && okNew && heartbeatOnly(old, run)
}

// heartbeatOnly reports whether run differs from old only in its
// progress's heartbeat fields (attempt, turn, tokens, last note and tool,
// updatedAt): same spec, metadata and status otherwise.
func heartbeatOnly(old, run *farmv1.AgentRun) bool {
	if old.Generation != run.Generation || run.DeletionTimestamp != nil || old.Status.Progress == nil || run.Status.Progress == nil ||
		!maps.Equal(old.Labels, run.Labels) || !maps.Equal(old.Annotations, run.Annotations) || !slices.Equal(old.Finalizers, run.Finalizers) {
		return false
	}
	was, is := old.Status, run.Status // shallow copies: only their Progress pointers are replaced
	p, q := *was.Progress, *is.Progress
	p.Attempt, p.Turn, p.Tokens, p.LastNote, p.LastTool, p.UpdatedAt = q.Attempt, q.Turn, q.Tokens, q.LastNote, q.LastTool, q.UpdatedAt
	was.Progress, is.Progress = &p, &q
	return equality.Semantic.DeepEqual(was, is)
}

// queuedRunsForRigOf maps a Lease or a rig to the run holding the rig and to
// the queued runs that may take a free rig now.
func (r *Reconciler) queuedRunsForRigOf(ctx context.Context, o client.Object) []reconcile.Request {
	var rig farmv1.DeviceRig
	var reqs []reconcile.Request
	switch obj := o.(type) {
	case *farmv1.DeviceRig:
		rig = *obj
		if l, err := lease.Get(ctx, r.Client, obj.Namespace, obj.Name); err == nil && l != nil && lease.IsRigLease(l) {
			if name, _ := lease.HolderRun(l); name != "" {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.Namespace, Name: name}})
			}
		}
	case *coordinationv1.Lease:
		if name, _ := lease.HolderRun(obj); name != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.Namespace, Name: name}})
		}
		if err := r.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, &rig); err != nil {
			return reqs
		}
	default:
		return nil
	}
	q, err := r.readQueue(ctx, rig.Namespace, rig.Name, "", "")
	if err != nil {
		return reqs
	}
	for name := range q.given {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rig.Namespace, Name: name}})
	}
	return reqs
}

// slotEvents wakes a model-account slot's holder whenever its slot
// changes (a finished run gives back one it still holds), and, when a slot
// is given back, the account's first waiting runs: as many as the cap.
func (r *Reconciler) slotEvents() handler.EventHandler {
	holder := func(o client.Object) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[farmv1.LabelRun]}}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(holder(e.Object))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(holder(e.ObjectNew))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(holder(e.Object))
			a := e.Object.GetAnnotations()
			for _, req := range r.accountHeads(ctx, e.Object.GetNamespace(), a[farmv1.AnnotationModelAccount], capOf(a)) {
				q.Add(req)
			}
		},
	}
}

// accountTurnEvents wakes, when a run begins waiting for its model
// account, the runs its rigs' queue now hands those rigs to; and when it
// stops waiting for it without a slot (it waits for a rig now), the
// account's first waiting runs, which may take the turn it leaves.
func (r *Reconciler) accountTurnEvents() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*farmv1.AgentRun)
			run, okNew := e.ObjectNew.(*farmv1.AgentRun)
			if !okOld || !okNew || accountBlocked(old) == accountBlocked(run) {
				return
			}
			var reqs []reconcile.Request
			if accountBlocked(run) {
				reqs = r.rigQueueOf(ctx, run)
			} else if ref := run.Spec.Model.APIKeySecretRef; ref != nil && run.WaitsForRig() {
				reqs = r.accountHeads(ctx, run.Namespace, ref.Name, 1)
			}
			for _, req := range reqs {
				q.Add(req)
			}
		},
	}
}

// parentOf maps a follow-up run to its parent, which is waiting for it to exist.
func parentOf(_ context.Context, o client.Object) []reconcile.Request {
	if p := o.GetLabels()[farmv1.LabelParent]; p != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: p}}}
	}
	return nil
}

// joinedOf maps a session's run to the runs that joined it (status.joined),
// which follow it, and a session's run that is Running to the steer runs
// queued for its rig, which may join it now (steer.go).
func (r *Reconciler) joinedOf(ctx context.Context, o client.Object) []reconcile.Request {
	run, ok := o.(*farmv1.AgentRun)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, j := range run.Status.Joined {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: j.Name}})
	}
	if st := run.Status; st.Phase == farmv1.RunRunning && st.Rig != "" && st.CollectedInto == "" && st.SteeredInto == "" {
		waiting, err := r.listWaiting(ctx, run.Namespace, "rig/"+st.Rig)
		if err != nil {
			return reqs
		}
		for _, w := range waiting {
			if w.Spec.Mode() == farmv1.QueueModeSteer {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
			}
		}
	}
	return reqs
}

// podNodeIndex indexes the live attempt pods by their node, so a node's
// event finds its runs without a scan of every pod of the farm.
const podNodeIndex = "farm.clawfarm.dev/attempt-node"

// runsOnNode maps a Node to the runs with live attempt pods on it.
func (r *Reconciler) runsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{podNodeIndex: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Labels[farmv1.LabelRun]}})
	}
	return reqs
}
