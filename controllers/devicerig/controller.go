// Package devicerig is the DeviceRig controller: it keeps each rig's status
// true to the world — its node, its health route, its Lease, maintenance.
//
// Reconcile (this file) is the rig's story; node.go reads the node, probe.go
// asks the health route, lease.go reads who holds the rig (and releases a
// Lease whose run is gone), phase.go derives the phase and Ready from the
// conditions, watches.go says which changes wake which rigs, events.go and
// metrics.go declare every Event and metric.
package devicerig

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
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

// Defaults of Config's intervals.
const (
	DefaultProbeRecordInterval = 5 * time.Minute
)

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
	// woke holds each rig's last wake-up as this manager made it
	// (*farmv1.WakeUpStatus), ahead of a status the cache may not show yet.
	woke sync.Map
	// wakeAt holds when a rate-limited wake may start its run
	// (time.Time), ahead of the next probe.
	wakeAt sync.Map
}

// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=devicerigs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=devicerigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns,verbs=get;list;watch;create
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
			r.woke.Delete(req.NamespacedName)
			r.wakeAt.Delete(req.NamespacedName)
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

	// 3. The Lease: who holds the rig. A Lease whose run is gone is released (lease.go).
	holder, err := r.holder(ctx, &rig)
	if err != nil {
		return ctrl.Result{}, err
	}

	// 4. Its health route, at most every probe interval (probe.go), and at
	// once when the run holding it found it not set up (notsetup.go).
	askedFrom := r.probeAsked(ctx, &rig, holder, r.lastProbe(req.NamespacedName, st.LastProbeTime))
	asked := !askedFrom.IsZero() && !now.Before(askedFrom)
	probed, lastProbe := r.probeIfDue(ctx, &rig, now, holder != "", asked)

	// 5. Ready and phase, derived from the conditions and the Lease.
	st.Phase, st.ObservedGeneration = r.phase(&rig, holder), gen
	if st.Phase.Serving() {
		conditions.True(&st.Conditions, gen, farmv1.ConditionReady, farmv1.ReasonRigReady, "node ready, endpoint reachable, rig healthy")
	} else {
		conditions.False(&st.Conditions, gen, farmv1.ConditionReady, readyReason(&rig), readyMessage(&rig, holder))
	}
	// Stalled is what kstatus (Flux, cli-utils, kubectl's wait tooling) reads:
	// True for a rig that cannot serve and will not without the world
	// changing (NotReady, Offline), so it is Failed there as it is Degraded to
	// Argo CD's check; absent otherwise (abnormal-true, conditions.Remove). A
	// rig in maintenance is InProgress to kstatus by its Ready False: it
	// waits to be put back.
	if st.Phase == farmv1.RigNotReady || st.Phase == farmv1.RigOffline {
		conditions.True(&st.Conditions, gen, farmv1.ConditionStalled, readyReason(&rig), readyMessage(&rig, holder))
	} else {
		conditions.Remove(&st.Conditions, farmv1.ConditionStalled)
	}
	rigsByPhase.set(&rig)

	// 6. A phone that woke while the rig is free starts a run (wake.go).
	var wakeAgain time.Time
	if (probed || r.wakeDue(req.NamespacedName, now)) && rig.Spec.WakeUp != nil && st.Phase == farmv1.RigReady && holder == "" {
		wakeAgain = r.wakeUp(ctx, &rig, now)
		r.wakeAt.Store(req.NamespacedName, wakeAgain)
	}

	// 7. Write what changed; an Event when the rig's health moved. Ready ↔ InUse
	// is every session's rhythm, shown in the status and on the run's own
	// events; a Lease passing from one run to the next changes nothing here.
	// The probe's time goes in with any other change, and on its own only
	// when the recorded one is older than ProbeRecordInterval. A change
	// another event brings (a Lease taken or given back) records the last
	// probe too, whose answer the status holds: rigs that all went InUse
	// at once then do not all come due together an interval later.
	next := lastProbe.Add(r.Config.ProbeInterval).Sub(r.Clock.Now()) // lastProbe is set: a probe is never due past this point
	if !askedFrom.IsZero() && !asked {
		next = min(next, askedFrom.Sub(r.Clock.Now()))
	}
	if !wakeAgain.IsZero() {
		next = min(next, wakeAgain.Sub(r.Clock.Now()))
	}
	changed := !equality.Semantic.DeepEqual(before, st)
	switch {
	case probed && (changed || asked || due(st.LastProbeTime, now, r.recordInterval())):
		t := metav1.NewTime(now)
		st.LastProbeTime = &t
	case changed && !lastProbe.IsZero() && (st.LastProbeTime == nil || lastProbe.After(st.LastProbeTime.Time.Add(time.Second))):
		t := metav1.NewTime(lastProbe)
		st.LastProbeTime = &t
	}
	if !equality.Semantic.DeepEqual(before, st) {
		if err := r.Status().Update(ctx, &rig); err != nil {
			return ctrl.Result{}, fmt.Errorf("update rig status: %w", err)
		}
		if before.Phase != st.Phase {
			log.FromContext(ctx).V(1).Info("rig phase changed", "rig", rig.Name, "from", before.Phase, "to", st.Phase,
				"run", holder, "reason", conditions.Get(st.Conditions, farmv1.ConditionReady).Reason)
		}
		if health(before.Phase) != health(st.Phase) {
			recorder{r.Recorder}.phase(&rig, readyMessage(&rig, holder))
		}
	}
	return ctrl.Result{RequeueAfter: max(next, 100*time.Millisecond)}, nil
}
