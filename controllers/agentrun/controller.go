// Package agentrun is the AgentRun controller: it queues a run for a rig, takes
// the rig's Lease, runs attempt pods on the rig's node, records how each one
// ended, and acts on the sentinel (done, retry, follow-up).
//
// Reconcile (this file) is the run's story; each chapter is a sub-reconciler
// in a file of its own: observe.go reads the world, record.go records ended
// attempts and moves the phase, stall.go is the stall watchdog, rig.go takes
// and gives back rigs (queue.go orders the queue, account.go a capped model
// account's turn), attempt.go starts attempt
// pods, stop.go stops runs and cleans up after them, followup.go schedules
// WAIT follow-ups and agent jobs, joined.go and steer.go run several runs'
// triggers in one session, status.go writes the status and counts what it
// made true, notes.go is the little this manager remembers between
// reconciles, watches.go says which changes wake which runs, events.go and
// metrics.go declare every Event and metric.
package agentrun

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// Config is the manager's settings for the AgentRun controller.
type Config struct {
	// Loop holds the defaults of attempt pods (image, service account, pull policy).
	Loop attempt.Defaults
	// FollowUp holds the defaults of follow-up Jobs.
	FollowUp followup.JobDefaults
	// StartupTimeout bounds how long an attempt pod may stay Pending (a free retry after).
	StartupTimeout time.Duration
	// NodeLostGrace is how long a pod's node may be NotReady before the run's
	// status says so. The attempt still counts as alive: only the node's own
	// report, its deletion or the out-of-service taint ends it.
	NodeLostGrace time.Duration
	// ConfigErrorGrace is how long an attempt pod may show a configuration
	// error (a missing Secret, an image that does not exist) before the run
	// fails InvalidConfig (default 30 s).
	ConfigErrorGrace time.Duration
	// AttemptBackoff is the wait before the second attempt once the first
	// ended STUCK, doubled for each attempt after (default 10 s, at most
	// attempt.MaxBackoff).
	AttemptBackoff time.Duration
	// RigNotReadyGrace is how long a run keeps a rig that is not Ready, with
	// no attempt running on it, before it gives the rig back and queues
	// again (default 5 min).
	RigNotReadyGrace time.Duration
	// PricingConfigMap names the ConfigMap holding the manager's price list
	// (key prices.yaml), which prices the runs without spec.model.pricing;
	// empty: none.
	PricingConfigMap types.NamespacedName
	// MaxConcurrentReconciles of the controller.
	MaxConcurrentReconciles int
	// Shard is the manager's shard (--shard, a selector on
	// farm.clawfarm.dev/pool; nil: no sharding). The cache holds only its
	// runs and rigs (CacheOptions); with it, a rigRef run whose rig is in
	// another pool fails InvalidConfig.
	Shard labels.Selector
}

// Reconciler reconciles AgentRuns.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read could break exclusivity.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Config    Config

	notes notes
	// selectors are the selectors runs wait with, per namespace (queue.go).
	selectors selectorBook
	// caps are the model-key Secrets' caps as last read (account.go).
	caps capBook
	// observeStart, when set, replaces the queue-wait and time-to-pod
	// histograms (tests).
	observeStart func(queueWait, timeToPod time.Duration)
}

// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=devicerigs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// The metrics endpoint authenticates and authorizes its callers through the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile reads as the run's story: observe the world, record what ended,
// watch what runs, then act on the phase — stop, follow up, finish, or queue
// and run. Each chapter is a sub-reconciler with narrow inputs: the run (whose
// status it sets), the world observe read, and what the chapters before it
// decided; it returns its decisions as values (a wake-up time, whether the
// rig went back), merged here.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// 1. Load the run. When it is gone, its pods and Lease are orphans to clean up.
	var run farmv1.AgentRun
	if err := r.Get(ctx, req.NamespacedName, &run); err != nil {
		if apierrors.IsNotFound(err) {
			r.notes.forget(req.NamespacedName)
			return ctrl.Result{}, r.cleanUpOrphans(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if run.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // pods go with the run (owner references); cleanUpOrphans finishes the job
	}

	// 2. Act only on a cache that shows this manager's own last status write:
	// acting on an older status could start an attempt already recorded — and
	// re-create its pod, if it was deleted, next to the retry on the same
	// phone — and a status written over an older one is refused (a conflict,
	// a write for nothing). The write's own event brings the run back, at
	// this reconcile's priority at least: the requeue below keeps it, and is
	// only a safety net (polling a lagging cache is work for nothing too).
	now := r.Clock.Now()
	if r.notes.behindOwnWrite(&run, now) {
		return ctrl.Result{RequeueAfter: cacheLagPoll}, nil
	}
	status := r.statusWriter(&run)
	if run.Status.Phase == "" {
		run.Status.Phase = farmv1.RunPending
	}

	// 3. Observe the world: the run's attempt pods and their nodes, the Lease
	// it holds, that rig, and whether it must stop (spec.cancel, its deadline).
	w, wake, err := r.observe(ctx, &run, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if name := r.notes.podToShow(req.NamespacedName, now); name != "" {
		// Likewise for the attempt pod it created: the pod's event brings the run back.
		if !slices.ContainsFunc(w.pods, func(p *corev1.Pod) bool { return p.Name == name }) {
			return ctrl.Result{RequeueAfter: cacheLagPoll}, nil
		}
		r.notes.podShown(req.NamespacedName)
	}
	if run.Status.StartTime == nil && len(w.pods) > 0 {
		// The run started when its first pod was created, whether or not a
		// status said so before the pod ended.
		t := metav1.NewTime(r.startedAt(&run, w.pods[0]))
		run.Status.StartTime = &t
	}

	// 4. Record every attempt pod that ended (record.go). A run that no
	// longer needs its rig gives it back in the same write that records the
	// outcome: the pod has terminated, the record is the durable memory, and
	// a restart in between only repeats a no-op. The status is written before
	// any finalizer goes, so a restarted manager finds either an unrecorded
	// pod (and records it) or a recorded one (and only lets it go).
	rec, err := r.recordEnded(ctx, &run, w)
	if err != nil {
		return ctrl.Result{}, err
	}
	wake = earliest(wake, rec.wake)
	r.noteApproval(ctx, &run, rec.live)
	if rec.any {
		if p := run.Status.Phase; (p.Finished() || p == farmv1.RunWaiting) && len(rec.live) == 0 {
			released, err := r.releaseRig(ctx, &run, w)
			if err != nil {
				return ctrl.Result{}, err
			}
			w, wake = w.afterRelease(released), earliest(wake, retryRelease(w, released))
		}
		if err := status.write(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	lettingGo, err := r.letGoAll(ctx, &run, w.now, rec.endings)
	if err != nil {
		return ctrl.Result{}, err
	}
	wake = earliest(wake, lettingGo)

	// 5. Watch the live attempts for a stall (stall.go).
	stallAt, err := r.watchdog(ctx, &run, w, rec.live)
	if err != nil {
		return ctrl.Result{}, err
	}
	wake = earliest(wake, stallAt)

	// 6. Act on the phase.
	d, err := r.act(ctx, &run, w, rec.live, status)
	if err != nil {
		return ctrl.Result{}, err
	}
	wake = earliest(wake, d.wake)

	// 7. Write what changed, unless a later reconcile writes it.
	switch d.then {
	case writeLater:
		// Back into the work queue behind the work that can start a phone
		// now, until the delay is up; the run's rig, or its pod's end, may
		// come first and fold this write into the next.
		res := r.result(wake)
		res.Priority = ptr.To(handler.LowPriority)
		return res, nil
	case awaitPodEvent:
		// The pod is what the run waited for. Its status (Running, the
		// attempt, the start time) is written by the reconcile that the pod's
		// own watch event brings, behind the runs still waiting to create
		// theirs: in a burst, pods start first and the bookkeeping follows.
		// Nothing is lost if the manager stops in between — the status is
		// rebuilt from the pod.
		return r.result(wake), nil
	}
	if err := status.write(ctx); err != nil {
		return ctrl.Result{}, err
	}
	return r.result(wake), nil
}

// cacheLagPoll is how soon a reconcile that found the cache behind the
// manager's own writes looks again if no event has brought it back.
const cacheLagPoll = time.Second

// then is what is left of a reconcile once the run has been acted on.
type then int

const (
	// writeNow: write the status in this reconcile.
	writeNow then = iota
	// writeLater: the status is written when the decision's wake comes,
	// after the more urgent work, unless what the run waits for comes first
	// and makes the write moot: a new run's first Queued status (rig.go,
	// queuedRecordDelay), a young session's start (attempt.go,
	// startToRecordLater).
	writeLater
	// awaitPodEvent: an attempt pod was created; the reconcile its event
	// brings writes the status.
	awaitPodEvent
)

// decision is what acting on the run decided besides the status it set:
// what is left of the reconcile, and when to look at the run again (zero:
// no need).
type decision struct {
	then then
	wake time.Time
}

// wakeAt is a decision to write the status now and look again at t.
func wakeAt(t time.Time) decision { return decision{then: writeNow, wake: t} }

// chapter is the part of the story a run's phase calls for.
type chapter int

const (
	advancing chapter = iota // queue, take a rig, run attempts (attempt.go)
	stopping                 // stop.go
	following                // joined.go: the run's trigger is in another run's session
	waiting                  // followup.go: a WAIT's follow-up
	finishing                // stop.go: what is left once the run has ended
)

// chapterOf is the chapter the run is in, in the world observe read.
func chapterOf(run *farmv1.AgentRun, w world) chapter {
	switch {
	case w.stop != nil && !run.Status.Phase.Finished():
		return stopping
	case !run.Status.Phase.Finished() && (run.Status.CollectedInto != "" || run.Status.SteeredInto != ""):
		return following
	case run.Status.Phase == farmv1.RunWaiting:
		return waiting
	case run.Status.Phase.Finished():
		return finishing
	}
	return advancing
}

// act moves the run on according to its chapter. A run that acting moved
// into another chapter (a queue timeout fails it, a stop ends it) is looked
// at again at once: the next chapter's work (a follow-up, a TTL, letting
// the pods go) is not left to an event, since the echo of the manager's
// own status write wakes no reconcile (runUpdateNews).
func (r *Reconciler) act(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod, status *statusWriter) (decision, error) {
	from := chapterOf(run, w)
	var d decision
	var err error
	switch from {
	case stopping:
		d, err = r.stop(ctx, run, w, live)
	case following:
		d, err = r.follow(ctx, run, w, live)
	case waiting:
		d, err = r.followUp(ctx, run, w)
	case finishing:
		d, err = r.finish(ctx, run, w, live)
	default:
		d, err = r.advance(ctx, run, w, live, status)
	}
	if err == nil && chapterOf(run, w) != from {
		d.wake = earliest(d.wake, w.now)
	}
	return d, err
}

// earliest is the earliest of the wake-up times that are set (zero: none is).
func earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

// result asks for the run to be reconciled again at wake, if set.
func (r *Reconciler) result(wake time.Time) ctrl.Result {
	if wake.IsZero() {
		return ctrl.Result{}
	}
	d := wake.Sub(r.Clock.Now())
	if d < 100*time.Millisecond {
		d = 100 * time.Millisecond
	}
	return ctrl.Result{RequeueAfter: d}
}

// ev is the controller's Event recorder (events.go).
func (r *Reconciler) ev() recorder { return recorder{r.Recorder} }

// decided logs one decision of a reconcile at V(1): what was decided, for
// which run, attempt and rig, and why.
func decided(ctx context.Context, run *farmv1.AgentRun, what, reason string, kv ...any) {
	log.FromContext(ctx).V(1).Info(what, append([]any{"run", run.Name, "attempt", run.Status.Attempt, "rig", run.Status.Rig, "reason", reason}, kv...)...)
}

func (c Config) configErrorGrace() time.Duration {
	if c.ConfigErrorGrace == 0 {
		return 30 * time.Second
	}
	return c.ConfigErrorGrace
}

func (c Config) attemptBackoff() time.Duration {
	if c.AttemptBackoff == 0 {
		return 10 * time.Second
	}
	return c.AttemptBackoff
}

func (c Config) rigNotReadyGrace() time.Duration {
	if c.RigNotReadyGrace == 0 {
		return 5 * time.Minute
	}
	return c.RigNotReadyGrace
}

// SetupWithManager registers the controller and its watches (watches.go).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return r.watch(mgr)
}
