// Package devicerig is the DeviceRig controller: it keeps each rig's status
// true to the world — its node, its health route, its Lease, maintenance.
package devicerig

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
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
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/lease"
	"github.com/clawfarm/clawfarm/internal/nodestate"
)

// Config is the manager's settings for the DeviceRig controller.
type Config struct {
	// ProbeInterval is how often a rig's health route is asked.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe.
	ProbeTimeout time.Duration
	// MaxConcurrentReconciles of the controller (probes run inside reconciles).
	MaxConcurrentReconciles int
	// ReleaseSettle is how long a released rig waits before its status says
	// Ready (default 1 s): when the next queued run takes the rig within it, the
	// status goes straight from one run to the next, one write instead of two.
	ReleaseSettle time.Duration
	// ProbeRecordInterval is how stale status.lastProbeTime may grow while
	// probes find nothing new (default 5 minutes). A probe that changes
	// nothing writes nothing: on a farm of thousands of idle rigs, writing
	// the time of every probe would be most of the API server's work.
	ProbeRecordInterval time.Duration
}

// DefaultProbeRecordInterval is Config.ProbeRecordInterval's default.
const DefaultProbeRecordInterval = 5 * time.Minute

// Reconciler reconciles DeviceRigs.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	HTTP     *http.Client
	// APIReader reads around the cache where a stale read could release a
	// Lease still in use (default: the manager's API reader).
	APIReader client.Reader
	Config    Config

	// probed holds when each rig was last probed (types.NamespacedName →
	// time.Time), which the status records only when something else changed
	// or ProbeRecordInterval has passed. A new manager starts from the status.
	probed sync.Map
}

// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=devicerigs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=devicerigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;delete

// Reconcile rebuilds the rig's status from the world: node, health, Lease.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// 1. Load the rig.
	var rig farmv1.DeviceRig
	if err := r.Get(ctx, req.NamespacedName, &rig); err != nil {
		if apierrors.IsNotFound(err) {
			rigsByPhase.forget(req.String())
			r.probed.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := rig.Status.DeepCopy()
	st := &rig.Status
	gen := rig.Generation
	now := r.Clock.Now()

	// 2. The node it is plugged into.
	nodeReady, nodeReason, nodeMsg := r.nodeState(ctx, rig.Spec.NodeName)
	conditions.Set(&st.Conditions, gen, farmv1.ConditionNodeReady, status(nodeReady), nodeReason, nodeMsg)

	// 3. Its health route, at most every probe interval.
	lastProbe := r.lastProbe(req.NamespacedName, st.LastProbeTime)
	probed := false
	if lastProbe.IsZero() || !now.Before(lastProbe.Add(r.Config.ProbeInterval)) {
		health, err := r.probe(ctx, &rig)
		probed, lastProbe = true, now
		r.probed.Store(req.NamespacedName, now)
		if err != nil {
			probeFailures.Inc()
			st.Health = nil
			conditions.False(&st.Conditions, gen, farmv1.ConditionEndpointReachable, farmv1.ReasonProbeFailed, err.Error())
			conditions.Unknown(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonUnknown, "the health route did not answer")
		} else {
			st.Health = health
			conditions.True(&st.Conditions, gen, farmv1.ConditionEndpointReachable, farmv1.ReasonProbeSucceeded, "GET "+healthURL(&rig)+" answered")
			if health.Calibrated && health.OriginPinned {
				conditions.True(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonCalibrated, "calibrated, origin pinned")
			} else {
				conditions.False(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonNotCalibrated,
					fmt.Sprintf("calibrated=%v origin_pinned=%v: calibrate the rig", health.Calibrated, health.OriginPinned))
			}
		}
	}

	// 4. The Lease: who holds the rig. A Lease whose run is gone is released.
	st.CurrentRun = ""
	l, err := lease.Get(ctx, r.Client, rig.Namespace, rig.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if l != nil && lease.IsRigLease(l) {
		name, uid := lease.HolderRun(l)
		stale, err := r.staleLease(ctx, rig.Namespace, name, uid)
		if err != nil {
			return ctrl.Result{}, err
		}
		if stale {
			if err := lease.ReleaseStale(ctx, r.Client, l); err != nil {
				return ctrl.Result{}, err
			}
			recorder{r.Recorder}.staleLeaseReleased(&rig, name)
		} else {
			st.CurrentRun = name
		}
	}

	// 5. Ready and phase, derived from the conditions.
	st.Phase, st.ObservedGeneration = r.phase(&rig), gen
	if st.Phase == farmv1.RigReady || st.Phase == farmv1.RigInUse {
		conditions.True(&st.Conditions, gen, farmv1.ConditionReady, farmv1.ReasonRigReady, "node ready, endpoint reachable, rig healthy")
	} else {
		conditions.False(&st.Conditions, gen, farmv1.ConditionReady, readyReason(&rig), readyMessage(&rig))
	}
	rigsByPhase.set(&rig)

	// 6. Write what changed; an Event when the rig's health moved. Ready ↔ InUse
	// is every session's rhythm, shown in the status and on the run's own events.
	// The probe's time goes in with any other change, and on its own only
	// when the recorded one is older than ProbeRecordInterval.
	if probed && (!equality.Semantic.DeepEqual(before, st) || due(st.LastProbeTime, now, r.recordInterval())) {
		t := metav1.NewTime(now)
		st.LastProbeTime = &t
	}
	if !equality.Semantic.DeepEqual(before, st) {
		if err := r.Status().Update(ctx, &rig); err != nil {
			return ctrl.Result{}, fmt.Errorf("update rig status: %w", err)
		}
		if health(before.Phase) != health(st.Phase) {
			recorder{r.Recorder}.phase(&rig, readyMessage(&rig))
		}
	}
	next := lastProbe.Add(r.Config.ProbeInterval).Sub(r.Clock.Now()) // lastProbe is set: a probe is never due past this point
	return ctrl.Result{RequeueAfter: max(next, 100*time.Millisecond)}, nil
}

// lastProbe is when the rig was last probed: by this manager if it has,
// else as the status records it (zero: never).
func (r *Reconciler) lastProbe(key types.NamespacedName, recorded *metav1.Time) time.Time {
	var t time.Time
	if recorded != nil {
		t = recorded.Time
	}
	if v, ok := r.probed.Load(key); ok && v.(time.Time).After(t) {
		t = v.(time.Time)
	}
	return t
}

func (r *Reconciler) recordInterval() time.Duration {
	if r.Config.ProbeRecordInterval > 0 {
		return r.Config.ProbeRecordInterval
	}
	return DefaultProbeRecordInterval
}

func (r *Reconciler) nodeState(ctx context.Context, name string) (bool, string, string) {
	var node corev1.Node
	if err := r.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, farmv1.ReasonNodeNotFound, fmt.Sprintf("node %s does not exist", name)
		}
		return false, farmv1.ReasonUnknown, err.Error()
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status != corev1.ConditionTrue {
			return false, farmv1.ReasonNodeNotReady, fmt.Sprintf("node %s is not Ready: %s", name, c.Message)
		}
		if why := cordoned(&node); why != "" {
			return false, farmv1.ReasonNodeCordoned, fmt.Sprintf("node %s is Ready but %s: no new session starts on it", name, why)
		}
		return true, farmv1.ReasonNodeReady, fmt.Sprintf("node %s is Ready", name)
	}
	return false, farmv1.ReasonNodeNotReady, fmt.Sprintf("node %s reports no Ready condition", name)
}

// cordoned says why a Ready node takes no new sessions: it is cordoned
// (kubectl cordon or drain), or it carries a NoExecute taint other than the
// rig taint loop pods tolerate. "" when it takes them.
func cordoned(node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return "cordoned (spec.unschedulable; kubectl uncordon ends it)"
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && t.Key != farmv1.TaintRig {
			return fmt.Sprintf("tainted %s:NoExecute", t.Key)
		}
	}
	return ""
}

// probe asks the rig's health route (the PhysiClaw /api/status JSON).
func (r *Reconciler) probe(ctx context.Context, rig *farmv1.DeviceRig) (*farmv1.RigHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Config.ProbeTimeout)
	defer cancel()
	u := healthURL(rig)
	if err := sameHost(u, rig.Spec.Endpoint.URL); err != nil {
		// The API refuses such a rig; one stored before that rule is not probed.
		return nil, fmt.Errorf("health URL %q: %w", u, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("health URL %q: %w", u, err)
	}
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("probe rig %s: %w", rig.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthBody))
	if err != nil {
		return nil, fmt.Errorf("probe rig %s: read body: %w", rig.Name, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, fmt.Errorf("probe rig %s: GET %s answered %s (to %q); redirects are not followed: set endpoint.healthURL to the route itself",
			rig.Name, u, resp.Status, resp.Header.Get("Location"))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("probe rig %s: GET %s answered %s", rig.Name, u, resp.Status)
	}
	var h farmv1.RigHealth
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, fmt.Errorf("probe rig %s: GET %s did not answer the PhysiClaw status JSON: %w", rig.Name, u, err)
	}
	return &h, nil
}

// maxHealthBody is the most of a health answer the manager reads.
const maxHealthBody = 64 << 10

// sameHost refuses a health URL on another host than the rig's endpoint:
// the manager fetches it from its own network position.
func sameHost(health, endpoint string) error {
	h, err := url.Parse(health)
	if err != nil {
		return err
	}
	e, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("the endpoint URL: %w", err)
	}
	if (h.Scheme != "http" && h.Scheme != "https") || !strings.EqualFold(h.Hostname(), e.Hostname()) {
		return fmt.Errorf("not an http(s) URL on the endpoint's host %q: not probed", e.Hostname())
	}
	return nil
}

// noRedirects makes a client stop at the first answer: a health route that
// redirects could send the manager anywhere.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// healthURL is the rig's health route: spec.endpoint.healthURL, else /api/status on the MCP URL's host.
func healthURL(rig *farmv1.DeviceRig) string {
	if rig.Spec.Endpoint.HealthURL != "" {
		return rig.Spec.Endpoint.HealthURL
	}
	u, err := url.Parse(rig.Spec.Endpoint.URL)
	if err != nil {
		return rig.Spec.Endpoint.URL
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/api/status"}).String()
}

// staleLease reports whether a rig's Lease names a run that is gone: no run
// of that name and UID exists, and no pod of it is alive. A cache that lags
// a brand-new run would call its Lease stale, so a miss in the cache is
// confirmed against the API server before anything is released.
func (r *Reconciler) staleLease(ctx context.Context, namespace, run string, uid types.UID) (bool, error) {
	var ar farmv1.AgentRun
	key := types.NamespacedName{Namespace: namespace, Name: run}
	if err := r.Get(ctx, key, &ar); err == nil && ar.UID == uid {
		return false, nil
	}
	switch err := r.APIReader.Get(ctx, key, &ar); {
	case err == nil && ar.UID == uid:
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{farmv1.LabelRun: run}); err != nil {
		return false, err
	}
	for i := range pods.Items {
		if p := pods.Items[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			return false, nil
		}
	}
	return true, nil
}

func (r *Reconciler) phase(rig *farmv1.DeviceRig) farmv1.RigPhase {
	st := &rig.Status
	switch {
	case rig.Spec.Unschedulable:
		return farmv1.RigMaintenance
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionNodeReady):
		if c := conditions.Get(st.Conditions, farmv1.ConditionNodeReady); c != nil && c.Reason == farmv1.ReasonNodeCordoned {
			return farmv1.RigNotReady // the node runs, and the sessions on it go on: only new ones wait
		}
		return farmv1.RigOffline
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionEndpointReachable),
		!conditions.IsTrue(st.Conditions, farmv1.ConditionCalibrated),
		st.Health == nil || !healthy(st.Health):
		return farmv1.RigNotReady
	case st.CurrentRun != "":
		return farmv1.RigInUse
	}
	return farmv1.RigReady
}

// healthy: a rig is usable only when arm, camera, bridge, calibrated,
// origin_pinned and ready are all true (docs/rig-contract.md); layout_learned
// is recorded in the status but not required.
func healthy(h *farmv1.RigHealth) bool {
	return h.Arm && h.Camera && h.Bridge && h.Calibrated && h.OriginPinned && h.Ready
}

func readyReason(rig *farmv1.DeviceRig) string {
	st := &rig.Status
	switch {
	case rig.Spec.Unschedulable:
		return farmv1.ReasonMaintenance
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionNodeReady):
		return conditions.Get(st.Conditions, farmv1.ConditionNodeReady).Reason
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionEndpointReachable):
		return farmv1.ReasonProbeFailed
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionCalibrated):
		return farmv1.ReasonNotCalibrated
	}
	return farmv1.ReasonHealthNotReady
}

func readyMessage(rig *farmv1.DeviceRig) string {
	st := &rig.Status
	if rig.Spec.Unschedulable {
		return "spec.unschedulable is true (maintenance)"
	}
	for _, t := range []string{farmv1.ConditionNodeReady, farmv1.ConditionEndpointReachable, farmv1.ConditionCalibrated} {
		if c := conditions.Get(st.Conditions, t); c != nil && c.Status != metav1.ConditionTrue {
			return c.Message
		}
	}
	if h := st.Health; h != nil && !healthy(h) {
		return fmt.Sprintf("health: arm=%v camera=%v bridge=%v calibrated=%v origin_pinned=%v ready=%v",
			h.Arm, h.Camera, h.Bridge, h.Calibrated, h.OriginPinned, h.Ready)
	}
	if st.CurrentRun != "" {
		return "in use by run " + st.CurrentRun
	}
	return "ready"
}

func status(ok bool) metav1.ConditionStatus {
	if ok {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

func due(last *metav1.Time, now time.Time, every time.Duration) bool {
	return last == nil || !now.Before(last.Add(every))
}

// SetupWithManager registers the controller: rigs, and the nodes and Leases they depend on.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.HTTP == nil {
		r.HTTP = &http.Client{Timeout: r.Config.ProbeTimeout}
	}
	c := *r.HTTP
	c.CheckRedirect = noRedirects
	r.HTTP = &c
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

// health folds InUse into Ready: a rig in use is a healthy rig.
func health(p farmv1.RigPhase) farmv1.RigPhase {
	if p == farmv1.RigInUse {
		return farmv1.RigReady
	}
	return p
}
