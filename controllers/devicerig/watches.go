package devicerig

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/nodestate"
)

// SetupWithManager registers the controller: rigs, the nodes and Leases they
// depend on, and a run that found its rig not set up (notsetup.go).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.HTTP = r.probeClient()
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &farmv1.DeviceRig{}, rigNodeIndex, func(o client.Object) []string {
		return []string{o.(*farmv1.DeviceRig).Spec.NodeName}
	}); err != nil {
		return fmt.Errorf("index rigs by node: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&farmv1.DeviceRig{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.rigsOnNode), builder.WithPredicates(nodestate.Changed)).
		Watches(&coordinationv1.Lease{}, r.leaseEvents()).
		Watches(&farmv1.AgentRun{}, notSetUpEvents()).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Config.MaxConcurrentReconciles)}).
		Named("devicerig").
		Complete(r)
}

// leaseEvents wakes a rig when its Lease is taken or changed, and a moment
// after it is released (Config.ReleaseSettle).
func (r *Reconciler) leaseEvents() handler.EventHandler {
	settle := r.Config.ReleaseSettle
	if settle == 0 {
		settle = time.Second
	}
	rigOf := func(o client.Object) (reconcile.Request, bool) {
		if _, ok := o.GetLabels()[farmv1.LabelRig]; !ok {
			return reconcile.Request{}, false
		}
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}, true
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if req, ok := rigOf(e.Object); ok {
				q.Add(req)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if req, ok := rigOf(e.ObjectNew); ok {
				q.Add(req)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if req, ok := rigOf(e.Object); ok {
				q.AddAfter(req, settle)
			}
		},
	}
}

// rigNodeIndex indexes rigs by spec.nodeName: a node's event wakes its own
// rigs, read without a scan of the farm.
const rigNodeIndex = "spec.nodeName"

func (r *Reconciler) rigsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var rigs farmv1.DeviceRigList
	if err := r.List(ctx, &rigs, client.MatchingFields{rigNodeIndex: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(rigs.Items))
	for i := range rigs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rigs.Items[i])})
	}
	return reqs
}

// probeClient is the client the probes use: Reconciler.HTTP if set, else
// one whose dialer refuses link-local and metadata addresses after name
// resolution (refuseForbidden) and that goes through no proxy — the manager
// fetches from its own network position. Neither follows a redirect.
func (r *Reconciler) probeClient() *http.Client {
	c := r.HTTP
	if c == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: r.Config.ProbeTimeout, Control: refuseForbidden}).DialContext
		t.Proxy = nil
		c = &http.Client{Timeout: r.Config.ProbeTimeout, Transport: t}
	}
	cp := *c
	cp.CheckRedirect = noRedirects
	return &cp
}
