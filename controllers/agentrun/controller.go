// Package agentrun is the AgentRun controller: it queues a run for a rig, takes
// the rig's Lease, runs attempt pods on the rig's node, records how each one
// ended, and acts on the sentinel (done, retry, follow-up).
package agentrun

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// Config is the manager's settings for the AgentRun controller.
type Config struct {
	// Loop holds the defaults of attempt pods (image, service account, pull policy).
	Loop attempt.Defaults
	// FollowUp holds the defaults of follow-up Jobs.
	FollowUp followup.JobDefaults
	// StartupTimeout bounds how long an attempt pod may stay Pending (a free retry after).
	StartupTimeout time.Duration
	// NodeLostGrace is how long a pod's node may be NotReady before the attempt counts as lost.
	NodeLostGrace time.Duration
	// MaxConcurrentReconciles of the controller.
	MaxConcurrentReconciles int
}

// podRunIndex indexes pods by the run they belong to (the run label), so a
// reconcile reads its run's pods without a scan of every pod in the namespace.
const podRunIndex = "farm.clawfarm.dev/run"

// Reconciler reconciles AgentRuns.
type Reconciler struct {
	client.Client
	// APIReader reads around the cache where a stale read could break exclusivity.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Config    Config

	// deferred holds the runs whose first "Queued" status waits behind more
	// urgent work (see acquire).
	deferred sync.Map // types.NamespacedName → struct{}
	// starting holds, for runs whose first pod has no start time in their
	// status yet, when they took their rig and created the pod (*startNote).
	starting sync.Map // types.NamespacedName → *startNote
	// recorded holds, per run, the newest attempt record of this manager's
	// last status write (*ownWrite): a cache that does not show it yet is
	// older than that write.
	recorded sync.Map // types.NamespacedName → ownWrite
	// observeStart, when set, replaces the queue-wait and time-to-pod
	// histograms (tests).
	observeStart func(queueWait, timeToPod time.Duration)
}

// ownWrite is the newest attempt record a status write of this manager held.
type ownWrite struct {
	uid types.UID
	pod string
	at  time.Time
}

// ownWriteWait bounds how long a reconcile waits for the cache to show the
// manager's own last status write before it goes on regardless.
const ownWriteWait = 30 * time.Second

// startNote is when a run took its rig and created its first pod, kept until
// the status that records the start is written: the metrics are observed
// once, from those moments, whichever reconcile writes it.
type startNote struct {
	mu              sync.Mutex
	leasedAt, podAt time.Time
}

// first sets one of the note's moments to t, unless it is already set.
func (n *startNote) first(moment *time.Time, t time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if moment.IsZero() {
		*moment = t
	}
}

// moments reads the note (zero times for moments not noted).
func (n *startNote) moments() (leasedAt, podAt time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leasedAt, n.podAt
}

// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=agentruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=devicerigs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile reads as the run's story: observe the world, record what ended,
// then act on the phase — stop, follow up, finish, or queue and run.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// 1. Load the run. When it is gone, its pods and Lease are orphans to clean up.
	var run farmv1.AgentRun
	if err := r.Get(ctx, req.NamespacedName, &run); err != nil {
		if apierrors.IsNotFound(err) {
			r.deferred.Delete(req.NamespacedName)
			r.starting.Delete(req.NamespacedName)
			r.recorded.Delete(req.NamespacedName)
			return ctrl.Result{}, r.cleanUpOrphans(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if run.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // pods go with the run (owner references); cleanUpOrphans finishes the job
	}
	if r.behindOwnWrite(&run) {
		// The cache has not yet shown the status this manager last wrote:
		// acting on the older one could start an attempt already recorded —
		// and re-create its pod, if it was deleted, next to the retry on the
		// same phone. The write's own event brings the run back.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	s := &step{r: r, run: &run, ev: recorder{r.Recorder}, now: r.Clock.Now(), before: run.Status.DeepCopy()}
	if run.Status.Phase == "" {
		run.Status.Phase = farmv1.RunPending
	}

	// 2. Observe the world: the run's attempt pods, the Lease it holds, that rig.
	if err := s.observe(ctx); err != nil {
		return ctrl.Result{}, err
	}
	if run.Status.StartTime == nil && len(s.pods) > 0 {
		// The run started when its first pod was created, whether or not a
		// status said so before the pod ended.
		t := metav1.NewTime(s.startedAt(s.pods[0]))
		run.Status.StartTime = &t
	}

	// 3. Record every attempt pod that ended, then let its finalizer go.
	if err := s.recordEnded(ctx); err != nil {
		return ctrl.Result{}, err
	}

	// 4. Act on the phase.
	var err error
	switch {
	case s.stopReason() != nil && !run.Status.Phase.Finished():
		err = s.stop(ctx)
	case run.Status.Phase == farmv1.RunWaiting:
		err = s.followUp(ctx)
	case run.Status.Phase.Finished():
		err = s.finish(ctx)
	default:
		err = s.advance(ctx)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.deferQueued {
		// Back into the work queue behind the runs that can start now; the
		// next pass writes Queued if the run still waits.
		return ctrl.Result{RequeueAfter: time.Millisecond, Priority: ptr.To(handler.LowPriority)}, nil
	}
	r.deferred.Delete(req.NamespacedName)
	if s.podCreated {
		// The pod is what the run waited for. Its status (Running, the
		// attempt, the start time) is written by the reconcile that the pod's
		// own watch event brings, behind the runs still waiting to create
		// theirs: in a burst, pods start first and the bookkeeping follows.
		// Nothing is lost if the manager stops in between — the status is
		// rebuilt from the pod.
		return s.result(), nil
	}

	// 5. Write what changed.
	if err := s.writeStatus(ctx); err != nil {
		return ctrl.Result{}, err
	}
	return s.result(), nil
}

// step is one reconcile of one run: what it saw and what it decided.
type step struct {
	r      *Reconciler
	run    *farmv1.AgentRun
	ev     recorder
	now    time.Time
	before *farmv1.AgentRunStatus

	pods    []*corev1.Pod // the run's attempt pods, oldest first
	live    []*corev1.Pod // pods whose loop may still be running
	heldRig string        // the rig whose Lease the run holds ("" for none)
	rig     *farmv1.DeviceRig

	wakeAt      time.Time
	justLeased  bool
	deferQueued bool
	podCreated  bool // this reconcile created an attempt pod
}

func (s *step) wake(t time.Time) {
	if !t.IsZero() && (s.wakeAt.IsZero() || t.Before(s.wakeAt)) {
		s.wakeAt = t
	}
}

func (s *step) result() ctrl.Result {
	if s.wakeAt.IsZero() {
		return ctrl.Result{}
	}
	d := s.wakeAt.Sub(s.r.Clock.Now())
	if d < 100*time.Millisecond {
		d = 100 * time.Millisecond
	}
	return ctrl.Result{RequeueAfter: d}
}

func (s *step) observe(ctx context.Context) error {
	var list corev1.PodList
	if err := s.r.List(ctx, &list, client.InNamespace(s.run.Namespace), client.MatchingFields{podRunIndex: s.run.Name}); err != nil {
		return fmt.Errorf("list attempt pods: %w", err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if metav1.IsControlledBy(p, s.run) {
			s.pods = append(s.pods, p)
		}
	}
	sort.Slice(s.pods, func(i, j int) bool { return s.pods[i].CreationTimestamp.Before(&s.pods[j].CreationTimestamp) })
	held, err := lease.HeldBy(ctx, s.r.Client, lease.HolderOf(s.run))
	if err != nil {
		return err
	}
	if len(held) > 0 {
		s.heldRig = held[0]
		var rig farmv1.DeviceRig
		err := s.r.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: s.heldRig}, &rig)
		switch {
		case err == nil:
			s.rig = &rig
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("get rig %s: %w", s.heldRig, err)
		}
	}
	return nil
}

// recordEnded records the outcome of every attempt pod that ended. The status
// is written before any finalizer is removed, so a restarted manager finds
// either an unrecorded pod (and records it) or a recorded one (and only lets it go).
func (s *step) recordEnded(ctx context.Context) error {
	type ending struct {
		pod   *corev1.Pod
		evict bool
	}
	var done []ending
	recorded := false
	for _, pod := range s.pods {
		if !controllerutil.ContainsFinalizer(pod, farmv1.FinalizerOutcome) {
			if !terminal(pod) {
				s.live = append(s.live, pod)
			}
			continue
		}
		o, ended := attempt.Classify(pod, attempt.World{
			Now: s.now, NodeLost: s.nodeLost(ctx, pod), Cancelling: s.stopReason() != nil,
			StartupTimeout: s.r.Config.StartupTimeout,
		})
		if attempt.Recorded(&s.run.Status, pod.Name) {
			done = append(done, ending{pod, o.Evict})
			continue
		}
		if !ended {
			s.live = append(s.live, pod)
			if pod.Status.Phase == corev1.PodPending {
				s.wake(pod.CreationTimestamp.Add(s.r.Config.StartupTimeout + time.Second))
			}
			continue
		}
		n, retry := podAttempt(pod)
		rec := attempt.Record(pod, n, retry, o, s.now)
		if o.Mismatch {
			s.ev.mismatch(s.run, pod, o.Explanation)
		}
		if o.Message != nil && len(o.Message.Jobs) > 0 {
			s.materialiseJobs(ctx, pod.Labels[farmv1.LabelRig], o)
		}
		v := attempt.Apply(s.run, rec, o)
		if !v.Phase.Finished() {
			s.ev.attemptEnded(s.run, pod, rec) // a final phase's own event says how the run ended
		}
		s.enter(v, o)
		attemptsEnded.WithLabelValues(rec.Outcome).Inc()
		done = append(done, ending{pod, o.Evict})
		recorded = true
	}
	if recorded {
		// A run that no longer needs its rig gives it back in the same write
		// that records the outcome: the pod has terminated, the record is the
		// durable memory, and a restart in between only repeats a no-op.
		if p := s.run.Status.Phase; (p.Finished() || p == farmv1.RunWaiting) && len(s.live) == 0 {
			if err := s.releaseRig(ctx); err != nil {
				return err
			}
		}
		if err := s.writeStatus(ctx); err != nil {
			return err
		}
	}
	for _, e := range done {
		if err := s.release(ctx, e.pod, e.evict); err != nil {
			return err
		}
	}
	return nil
}

// release lets a recorded pod go: the finalizer is removed; a pod that will
// not end by itself (lost node, never started) is deleted outright.
func (s *step) release(ctx context.Context, pod *corev1.Pod, evict bool) error {
	patch := client.MergeFrom(pod.DeepCopy())
	controllerutil.RemoveFinalizer(pod, farmv1.FinalizerOutcome)
	if err := s.r.Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer of pod %s: %w", pod.Name, err)
	}
	if evict || (!terminal(pod) && pod.DeletionTimestamp == nil) {
		if err := s.r.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// enter moves the run to the verdict's phase. A final phase never changes.
func (s *step) enter(v attempt.Verdict, o attempt.Outcome) {
	st := &s.run.Status
	if st.Phase.Finished() {
		return
	}
	gen := s.run.Generation
	switch v.Phase {
	case farmv1.RunSucceeded, farmv1.RunFailed, farmv1.RunCancelled:
		s.finishWith(v.Phase, v.Reason, v.Message)
	case farmv1.RunWaiting:
		st.Phase = farmv1.RunWaiting
		conditions.True(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonWaiting, v.Message)
		s.planFollowUp(o)
		runsFinished.WithLabelValues(string(farmv1.RunWaiting), st.Sentinel).Inc()
		s.ev.phase(s.run, farmv1.RunWaiting, farmv1.ReasonWaiting, v.Message)
	case farmv1.RunRetrying:
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRetrying, v.Message)
		s.ev.phase(s.run, farmv1.RunRetrying, farmv1.ReasonRetrying, v.Message)
	}
}

func (s *step) finishWith(phase farmv1.RunPhase, reason, message string) {
	st := &s.run.Status
	st.Phase = phase
	status := metav1.ConditionFalse
	if phase == farmv1.RunSucceeded {
		status = metav1.ConditionTrue
	}
	conditions.Set(&st.Conditions, s.run.Generation, farmv1.ConditionSucceeded, status, reason, message)
	if st.CompletionTime == nil {
		t := metav1.NewTime(s.now)
		st.CompletionTime = &t
	}
	runsFinished.WithLabelValues(string(phase), st.Sentinel).Inc()
	s.ev.phase(s.run, phase, reason, message)
}

// stopCause says why a run is being stopped from outside the agent.
type stopCause struct {
	phase           farmv1.RunPhase
	reason, message string
}

func (s *step) stopReason() *stopCause {
	run := s.run
	if run.Spec.Cancel {
		return &stopCause{farmv1.RunCancelled, farmv1.ReasonCancelled, "the run was cancelled (spec.cancel)"}
	}
	if t := run.Spec.Limits.RunTimeoutSeconds; t > 0 {
		deadline := run.CreationTimestamp.Add(time.Duration(t) * time.Second)
		if !s.now.Before(deadline) {
			return &stopCause{farmv1.RunFailed, farmv1.ReasonDeadlineExceeded,
				fmt.Sprintf("the run exceeded limits.runTimeoutSeconds (%ds)", t)}
		}
		s.wake(deadline)
	}
	return nil
}

// stop ends the run from outside: live pods are deleted gracefully (the loop
// gets SIGTERM and its grace period), and once none is left the rig is released.
func (s *step) stop(ctx context.Context) error {
	cause := s.stopReason()
	for _, pod := range s.live {
		if pod.DeletionTimestamp != nil {
			continue
		}
		s.ev.stopping(s.run, pod.Name, cause.message)
		if err := s.r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stop pod %s: %w", pod.Name, err)
		}
	}
	if len(s.live) > 0 {
		return nil // the pods' updates bring us back
	}
	if err := s.releaseRig(ctx); err != nil {
		return err
	}
	if s.heldRig != "" {
		return nil // a pod the cache has not shown yet is still alive; releaseRig set a wake-up
	}
	s.finishWith(cause.phase, cause.reason, cause.message)
	return nil
}

// finish keeps a finished run tidy: the rig is released once no pod of the run
// is alive, and the run is deleted after its TTL.
func (s *step) finish(ctx context.Context) error {
	if len(s.live) > 0 {
		for _, pod := range s.live { // a pod of a finished run must not go on
			if pod.DeletionTimestamp == nil {
				if err := s.r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("stop pod %s: %w", pod.Name, err)
				}
			}
		}
		return nil
	}
	if err := s.releaseRig(ctx); err != nil {
		return err
	}
	ttl := s.run.Spec.TTLSecondsAfterFinished
	if ttl == nil || s.run.Status.CompletionTime == nil {
		return nil
	}
	at := s.run.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second)
	if s.now.Before(at) {
		s.wake(at)
		return nil
	}
	log.FromContext(ctx).Info("deleting finished run after its TTL", "ttlSecondsAfterFinished", *ttl)
	if err := s.r.Delete(ctx, s.run, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete run after TTL: %w", err)
	}
	return nil
}

// releaseRig gives the rig back, only after no pod of the run is alive —
// checked against the API server, not the cache.
func (s *step) releaseRig(ctx context.Context) error {
	if s.heldRig == "" {
		return nil
	}
	var pods corev1.PodList
	if err := s.r.APIReader.List(ctx, &pods, client.InNamespace(s.run.Namespace), client.MatchingLabels{farmv1.LabelRun: s.run.Name}); err != nil {
		return fmt.Errorf("list attempt pods before releasing rig %s: %w", s.heldRig, err)
	}
	for i := range pods.Items {
		if !terminal(&pods.Items[i]) {
			s.wake(s.now.Add(2 * time.Second))
			return nil
		}
	}
	// The rig goes straight to the run the queue gives it to next, if any: one
	// write instead of a delete and a create, and no gap a third run could use.
	msg := fmt.Sprintf("rig %s released", s.heldRig)
	next, err := s.r.nextHolder(ctx, s.run.Namespace, s.heldRig)
	if err != nil {
		return err
	}
	handed := false
	if next != nil && next.UID != s.run.UID {
		if handed, err = lease.HandOver(ctx, s.r.Client, s.heldRig, lease.HolderOf(s.run), lease.HolderOf(next)); err != nil {
			return err
		}
		if handed {
			msg = fmt.Sprintf("rig %s released to run %s, next in its queue", s.heldRig, next.Name)
		}
	}
	if !handed {
		if err := lease.Release(ctx, s.r.Client, s.heldRig, lease.HolderOf(s.run)); err != nil {
			return err
		}
	}
	conditions.False(&s.run.Status.Conditions, s.run.Generation, farmv1.ConditionRigLeased, farmv1.ReasonReleased, msg)
	if !s.run.Status.Phase.Finished() { // a finished run's final event covers the release
		s.ev.rigReleased(s.run, s.heldRig)
	}
	s.heldRig = ""
	return nil
}

// advance moves a run that is not finished: it takes a rig if it has none,
// and keeps an attempt pod running on it.
func (s *step) advance(ctx context.Context) error {
	st := &s.run.Status
	gen := s.run.Generation
	if s.heldRig != "" && s.rig == nil {
		return s.rigLost(ctx)
	}
	if s.heldRig != "" && waitsForRig(s.run) && !rigMatches(s.run, s.rig) && len(s.live) == 0 {
		// Handed a rig its spec no longer names (a spec may change until the
		// run starts): give it back and queue like any other run.
		if err := s.releaseRig(ctx); err != nil || s.heldRig != "" {
			return err
		}
	}
	switch {
	case s.heldRig == "":
		if len(s.live) > 0 {
			return nil // a pod from a lost rig is still stopping
		}
		ok, err := s.acquire(ctx)
		if err != nil || !ok {
			return err
		}
	case waitsForRig(s.run):
		s.took(s.rig) // handed over by the run that held it before
	}
	// Rebuilt from the world every time, so a status write lost to a conflict loses nothing.
	st.Rig = s.heldRig
	conditions.True(&st.Conditions, gen, farmv1.ConditionRigLeased, farmv1.ReasonLeased,
		fmt.Sprintf("holding rig %s on node %s", s.rig.Name, s.rig.Spec.NodeName))
	if len(s.live) > 0 {
		st.Attempt, _ = podAttempt(s.live[len(s.live)-1])
		st.Phase = farmv1.RunRunning
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRunning,
			fmt.Sprintf("attempt %d is running on rig %s", st.Attempt, s.heldRig))
		return nil
	}
	if p := s.rig.Status.Phase; p == farmv1.RigOffline || p == farmv1.RigNotReady {
		// Keep the rig, but start nothing on a node or phone that cannot run it:
		// the rig's status change wakes this run when it is back.
		st.Phase = farmv1.RunRetrying
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRigNotReady,
			fmt.Sprintf("attempt %d waits for rig %s, which is %s", attempt.Next(st).Attempt, s.rig.Name, p))
		return nil
	}
	return s.startAttempt(ctx)
}

// rigLost handles a held rig whose DeviceRig was deleted: the attempt is
// stopped (a free retry), the Lease released, and the run queues again.
func (s *step) rigLost(ctx context.Context) error {
	for _, pod := range s.live {
		if pod.DeletionTimestamp == nil {
			s.ev.stopping(s.run, pod.Name, "rig "+s.heldRig+" was deleted")
			if err := s.r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("stop pod %s: %w", pod.Name, err)
			}
		}
	}
	if len(s.live) > 0 {
		return nil
	}
	lost := s.heldRig
	if err := s.releaseRig(ctx); err != nil {
		return err
	}
	if s.heldRig == "" {
		s.run.Status.Phase = farmv1.RunQueued
		conditions.False(&s.run.Status.Conditions, s.run.Generation, farmv1.ConditionRigLeased, farmv1.ReasonRigLost,
			fmt.Sprintf("rig %s was deleted while the run held it", lost))
	}
	return nil
}

// acquire queues the run for a rig, FIFO per rig, and takes the first free
// one it heads the queue of. It reports whether the run now holds a rig.
func (s *step) acquire(ctx context.Context) (bool, error) {
	st := &s.run.Status
	gen := s.run.Generation
	s.markQueued()
	if t := s.run.Spec.Limits.QueueTimeout(); t > 0 {
		deadline := st.QueuedAt.Add(time.Duration(t) * time.Second)
		if !s.now.Before(deadline) {
			s.finishWith(farmv1.RunFailed, farmv1.ReasonQueueTimeout,
				fmt.Sprintf("no rig became free within limits.queueTimeoutSeconds (%ds)", t))
			return false, nil
		}
		s.wake(deadline)
	}
	rigs, why, reason, err := s.candidates(ctx)
	if err != nil {
		return false, err
	}
	if len(rigs) > 0 {
		forRig := ""
		if ref := s.run.Spec.RigRef; ref != nil {
			forRig = ref.Name
		}
		q, err := s.r.readQueue(ctx, s.run.Namespace, forRig, "")
		if err != nil {
			return false, err
		}
		why, reason = whyWaiting(rigs), farmv1.ReasonRigBusy
		for _, rig := range rigs {
			if q.given[s.run.Name] != rig.Name {
				continue
			}
			res, err := lease.Acquire(ctx, s.r.Client, rig.Name, lease.HolderOf(s.run))
			if err != nil {
				return false, err
			}
			if !res.Acquired {
				why = fmt.Sprintf("rig %s was just taken by another run", rig.Name)
				break
			}
			s.took(rig)
			return true, nil
		}
	}
	if st.Phase == farmv1.RunPending && reason == farmv1.ReasonRigBusy {
		// A new run that only waits its turn writes its first Queued status
		// after the more urgent work: when many runs arrive at once, the
		// ones that can start now are not kept waiting behind the status
		// writes of the ones that cannot. Under no load this is a millisecond.
		if _, again := s.r.deferred.LoadOrStore(client.ObjectKeyFromObject(s.run), struct{}{}); !again {
			s.deferQueued = true
			return false, nil
		}
	}
	if st.Phase != farmv1.RunQueued {
		s.ev.queued(s.run, why) // once per wait: the message stays the same while the queue moves
	}
	st.Phase = farmv1.RunQueued
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, reason, why)
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonQueued, "waiting for a rig: "+why)
	s.wake(s.now.Add(time.Minute)) // a safety net; Lease and rig events wake the queue first
	return false, nil
}

// markQueued sets when the run started waiting for a rig, once: a run that
// was never queued before (Pending) has waited since it was created, even
// when its first Queued status was held back (see acquire) or it was handed
// a rig before that status was written.
func (s *step) markQueued() {
	st := &s.run.Status
	if st.QueuedAt != nil {
		return
	}
	t := metav1.NewTime(s.now)
	if st.Phase == farmv1.RunPending && !s.run.CreationTimestamp.IsZero() {
		t = s.run.CreationTimestamp
	}
	st.QueuedAt = &t
}

// took records that the run now holds rig, taken from the queue or handed
// over by the run before it (advance then writes the RigLeased condition).
func (s *step) took(rig *farmv1.DeviceRig) {
	st := &s.run.Status
	s.markQueued()
	s.heldRig, s.rig = rig.Name, rig
	if st.StartTime == nil {
		n := s.note()
		n.first(&n.leasedAt, s.now)
	}
	s.justLeased = true // the attempt-started event names the rig
}

// candidates lists the rigs the run may take now: Ready, schedulable, free,
// in name order. When there are none it says why.
func (s *step) candidates(ctx context.Context) ([]*farmv1.DeviceRig, string, string, error) {
	var all []farmv1.DeviceRig
	if ref := s.run.Spec.RigRef; ref != nil {
		var rig farmv1.DeviceRig
		if err := s.r.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: ref.Name}, &rig); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Sprintf("rig %s does not exist", ref.Name), farmv1.ReasonRigNotFound, nil
			}
			return nil, "", "", fmt.Errorf("get rig %s: %w", ref.Name, err)
		}
		all = []farmv1.DeviceRig{rig}
	} else {
		var list farmv1.DeviceRigList
		if err := s.r.List(ctx, &list, client.InNamespace(s.run.Namespace)); err != nil {
			return nil, "", "", fmt.Errorf("list rigs: %w", err)
		}
		all = list.Items
	}
	var out []*farmv1.DeviceRig
	matching := 0
	var notReady string
	for i := range all {
		rig := &all[i]
		if !rigMatches(s.run, rig) {
			continue
		}
		matching++
		switch {
		case usable(rig): // the queue's own rule
			out = append(out, rig)
		case rig.Spec.Unschedulable:
			notReady = fmt.Sprintf("rig %s is in maintenance", rig.Name)
		default:
			notReady = fmt.Sprintf("rig %s is %s", rig.Name, orUnknown(string(rig.Status.Phase)))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	switch {
	case len(out) > 0:
		return out, "", "", nil
	case matching == 0:
		return nil, "no rig matches rigSelector", farmv1.ReasonNoMatchingRig, nil
	}
	return nil, notReady, farmv1.ReasonRigNotReady, nil
}

// startAttempt creates the next attempt pod on the held rig.
func (s *step) startAttempt(ctx context.Context) error {
	st := &s.run.Status
	gen := s.run.Generation
	next := attempt.Next(st)
	pod := attempt.BuildPod(attempt.Spec{
		Run: s.run, Rig: s.rig, Attempt: next.Attempt, Retry: next.Retry, Resume: next.Resume, Defaults: s.r.Config.Loop,
	})
	err := s.r.Create(ctx, pod)
	switch {
	case err == nil:
		if s.justLeased {
			s.ev.rigLeasedAndStarted(s.run, s.rig, pod, next.Attempt, next.Retry)
		} else {
			s.ev.attemptStarted(s.run, pod, next.Attempt, next.Retry)
		}
		if st.StartTime == nil {
			n := s.note()
			n.first(&n.podAt, s.now)
		}
		s.podCreated = true
	case apierrors.IsAlreadyExists(err):
		// created by an earlier reconcile the cache has not shown yet
	case apierrors.IsInvalid(err):
		s.ev.podCreateFailed(s.run, err)
		s.finishWith(farmv1.RunFailed, farmv1.ReasonInvalidConfig, fmt.Sprintf("the attempt pod was refused: %v", err))
		return s.releaseRig(ctx)
	default:
		s.ev.podCreateFailed(s.run, err)
		return fmt.Errorf("create attempt pod %s: %w", pod.Name, err)
	}
	st.Attempt = next.Attempt
	st.Phase = farmv1.RunRunning
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonRunning,
		fmt.Sprintf("attempt %d is running on rig %s", next.Attempt, s.heldRig))
	return nil
}

func (s *step) writeStatus(ctx context.Context) error {
	s.run.Status.ObservedGeneration = s.run.Generation
	if equality.Semantic.DeepEqual(s.before, &s.run.Status) {
		return nil
	}
	if err := s.r.Status().Update(ctx, s.run); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	if s.before.StartTime == nil && s.run.Status.StartTime != nil {
		s.observeStart()
	}
	if a := s.run.Status.Attempts; len(a) > 0 {
		s.r.recorded.Store(client.ObjectKeyFromObject(s.run), ownWrite{uid: s.run.UID, pod: a[len(a)-1].Pod, at: s.r.Clock.Now()})
	}
	s.before = s.run.Status.DeepCopy()
	return nil
}

// behindOwnWrite reports whether run, as the cache shows it, is older than
// this manager's last status write of it: that write's newest attempt record
// is missing. (Records are only ever appended; the oldest are dropped past
// 100, never the newest.) After ownWriteWait it gives up waiting — another
// manager may have written since.
func (r *Reconciler) behindOwnWrite(run *farmv1.AgentRun) bool {
	key := client.ObjectKeyFromObject(run)
	v, ok := r.recorded.Load(key)
	if !ok {
		return false
	}
	w := v.(ownWrite)
	if w.uid != run.UID || attempt.Recorded(&run.Status, w.pod) || r.Clock.Since(w.at) > ownWriteWait {
		r.recorded.CompareAndDelete(key, w)
		return false
	}
	return true
}

// note is the run's startNote, made on first use.
func (s *step) note() *startNote {
	n, _ := s.r.starting.LoadOrStore(client.ObjectKeyFromObject(s.run), &startNote{})
	return n.(*startNote)
}

// startedAt is when the run's first pod was created: as this manager noted
// it, or (after a restart) the pod's creation time.
func (s *step) startedAt(first *corev1.Pod) time.Time {
	if n, ok := s.r.starting.Load(client.ObjectKeyFromObject(s.run)); ok {
		if _, podAt := n.(*startNote).moments(); !podAt.IsZero() {
			return podAt
		}
	}
	return first.CreationTimestamp.Time
}

// observeStart observes the queue wait and the time to pod once, when the
// status that first records the start has been written.
func (s *step) observeStart() {
	created := s.run.CreationTimestamp.Time
	started := s.run.Status.StartTime.Time
	leased := started
	if n, ok := s.r.starting.LoadAndDelete(client.ObjectKeyFromObject(s.run)); ok {
		leasedAt, podAt := n.(*startNote).moments()
		if !podAt.IsZero() {
			started = podAt
		}
		if !leasedAt.IsZero() {
			leased = leasedAt
		}
	}
	observe := s.r.observeStart
	if observe == nil {
		observe = func(wait, toPod time.Duration) {
			queueWait.Observe(wait.Seconds())
			timeToPod.Observe(toPod.Seconds())
		}
	}
	observe(leased.Sub(created), started.Sub(created))
}

// nodeLost reports whether the pod's node is gone or NotReady past the grace period.
func (s *step) nodeLost(ctx context.Context, pod *corev1.Pod) bool {
	if pod.Spec.NodeName == "" || terminal(pod) {
		return false
	}
	var node corev1.Node
	if err := s.r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, &node); err != nil {
		return apierrors.IsNotFound(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			until := c.LastTransitionTime.Add(s.r.Config.NodeLostGrace)
			if s.now.After(until) {
				return true
			}
			s.wake(until)
		}
	}
	return false
}

// cleanUpOrphans finishes what a deleted run leaves behind: finalizers on its
// pods, and its rig's Lease once no pod of it is alive.
func (r *Reconciler) cleanUpOrphans(ctx context.Context, name types.NamespacedName) error {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(name.Namespace), client.MatchingLabels{farmv1.LabelRun: name.Name}); err != nil {
		return fmt.Errorf("list pods of deleted run %s: %w", name, err)
	}
	alive := false
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !terminal(pod) && pod.DeletionTimestamp == nil {
			if err := r.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if !terminal(pod) {
			alive = true
		}
		if controllerutil.ContainsFinalizer(pod, farmv1.FinalizerOutcome) && (terminal(pod) || pod.Spec.NodeName == "") {
			patch := client.MergeFrom(pod.DeepCopy())
			controllerutil.RemoveFinalizer(pod, farmv1.FinalizerOutcome)
			if err := r.Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	if alive {
		return nil // the pods' updates bring us back
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, client.InNamespace(name.Namespace), client.MatchingLabels{farmv1.LabelRun: name.Name}); err != nil {
		return err
	}
	var run farmv1.AgentRun
	runErr := r.Get(ctx, name, &run)
	for i := range leases.Items {
		l := &leases.Items[i]
		_, uid := lease.HolderRun(l)
		if runErr == nil && run.UID == uid {
			continue // a run of the same name holds it: not an orphan
		}
		if err := lease.ReleaseStale(ctx, r.Client, l); err != nil {
			return err
		}
	}
	return nil
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func podAttempt(pod *corev1.Pod) (int32, int32) {
	n, _ := strconv.Atoi(pod.Labels[farmv1.LabelAttempt])
	retry, _ := strconv.Atoi(pod.Annotations[farmv1.AnnotationRetry])
	return int32(n), int32(retry)
}

func orUnknown(s string) string {
	if s == "" {
		return "not yet probed"
	}
	return s
}

// SetupWithManager registers the controller and its watches: its pods and
// CronJobs, and the Leases and rigs that wake queued runs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	wakeQueue := handler.EnqueueRequestsFromMapFunc(r.queuedRunsForRigOf)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &farmv1.AgentRun{}, queueIndex, func(o client.Object) []string {
		return queueKey(o.(*farmv1.AgentRun))
	}); err != nil {
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&farmv1.AgentRun{}).
		Owns(&corev1.Pod{}).
		Owns(&batchv1.CronJob{}).
		Watches(&coordinationv1.Lease{}, wakeQueue, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := o.GetLabels()[farmv1.LabelRunUID]
			return ok
		}))).
		Watches(&farmv1.DeviceRig{}, wakeQueue).
		Watches(&farmv1.AgentRun{}, handler.EnqueueRequestsFromMapFunc(parentOf)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.runsOnNode)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Config.MaxConcurrentReconciles)}).
		Named("agentrun").
		Complete(r)
}

// queuedRunsForRigOf maps a Lease or a rig to the run holding the rig and to
// the queued runs that may take a free rig now.
func (r *Reconciler) queuedRunsForRigOf(ctx context.Context, o client.Object) []reconcile.Request {
	var rig farmv1.DeviceRig
	var reqs []reconcile.Request
	switch obj := o.(type) {
	case *farmv1.DeviceRig:
		rig = *obj
		if obj.Status.CurrentRun != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.Namespace, Name: obj.Status.CurrentRun}})
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
	q, err := r.readQueue(ctx, rig.Namespace, rig.Name, "")
	if err != nil {
		return reqs
	}
	for name := range q.given {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rig.Namespace, Name: name}})
	}
	return reqs
}

// parentOf maps a follow-up run to its parent, which is waiting for it to exist.
func parentOf(_ context.Context, o client.Object) []reconcile.Request {
	if p := o.GetLabels()[farmv1.LabelParent]; p != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: p}}}
	}
	return nil
}

// runsOnNode maps a Node to the runs with attempt pods on it.
func (r *Reconciler) runsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingLabels{farmv1.LabelKind: "attempt"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == o.GetName() && !terminal(p) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Labels[farmv1.LabelRun]}})
		}
	}
	return reqs
}
