package agentrun

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// claim is what acquire got the run.
type claim int

const (
	// queued: no rig now; the run is Queued (or failed its queue timeout).
	queued claim = iota
	// queuedLater: no rig now, and the run's first Queued status waits
	// behind more urgent work.
	queuedLater
	// took: the run holds a rig.
	took
	// steeredIn: a steer run joined the rig's running session (steer.go).
	steeredIn
)

// queuedRecordDelay is how long a new run that waits for a busy rig reads
// Pending before its Queued status and Event are written: a queue that
// moves within it — a busy farm handing its phones from session to
// session — costs no write, and a run that waits longer says so, with its
// place, while it still has most of its wait ahead of it (sessions last
// minutes).
const queuedRecordDelay = 10 * time.Second

// acquired is what acquire got the run: a claim, the rig it took (took
// only), and when to look again.
type acquired struct {
	claim claim
	rig   *farmv1.DeviceRig
	wake  time.Time
}

// acquire queues the run for a rig, FIFO per rig, and takes the first free
// one it heads the queue of.
func (r *Reconciler) acquire(ctx context.Context, run *farmv1.AgentRun, w world, status *statusWriter) (acquired, error) {
	st := &run.Status
	gen := run.Generation
	res := acquired{claim: queued}
	markQueued(run, w.now)
	if t := run.Spec.Limits.QueueTimeout(); t > 0 {
		deadline := st.QueuedAt.Add(time.Duration(t) * time.Second)
		if !w.now.Before(deadline) {
			what := "no rig became free"
			if accountBlocked(run) && run.Spec.Model.APIKeySecretRef != nil {
				what = "no session of model account " + run.Spec.Model.APIKeySecretRef.Name + " became free"
			}
			r.finishWith(ctx, run, w.now, farmv1.RunFailed, farmv1.ReasonQueueTimeout,
				fmt.Sprintf("%s within limits.queueTimeoutSeconds (%ds)", what, t))
			return res, nil
		}
		res.wake = deadline
	}
	if joined, err := r.steer(ctx, run, w, status); err != nil || joined {
		res.claim = steeredIn
		return res, err
	}
	c, err := r.candidates(ctx, run)
	if err != nil {
		return res, err
	}
	if c.invalid != "" {
		r.finishWith(ctx, run, w.now, farmv1.RunFailed, farmv1.ReasonInvalidConfig, c.invalid)
		return res, nil
	}
	var turn accountTurn
	if len(c.rigs) > 0 {
		// A capped model account's turn comes first (account.go): a run
		// beyond the cap takes no rig, and the rig goes to the next run.
		acct, err := r.modelAccountOf(ctx, run)
		if err != nil {
			return res, err
		}
		if acct.capped() {
			if turn, err = r.turnOf(ctx, run, acct, ""); err != nil {
				return res, err
			}
			if !turn.pass {
				r.accountBusy(ctx, run, acct, turn)
				res.wake = earliest(res.wake, w.now.Add(time.Minute)) // a safety net; slot and run events wake the account's queue first
				return res, nil
			}
		}
		// Any of the run's rigs leads to the part of the queue that decides
		// which of them it gets: the part holds every rig its selector matches.
		q, err := r.readQueue(ctx, run.Namespace, c.rigs[0].Name, "", run.UID)
		if err != nil {
			return res, err
		}
		c.why, c.reason = whyWaiting(c.rigs), farmv1.ReasonRigBusy
		for _, rig := range c.rigs {
			if q.given[run.Name] != rig.Name {
				continue
			}
			slot, fresh := turn.slot, false
			if acct.capped() && slot == "" {
				// The atomic step of the cap, as the rig's Lease is of the rig.
				if slot, fresh, err = lease.TakeSlot(ctx, r.Client, r.APIReader, acct.secret, acct.cap, lease.HolderOf(run)); err != nil {
					return res, err
				}
				if slot == "" {
					turn.inUse = acct.cap
					r.accountBusy(ctx, run, acct, turn)
					res.wake = earliest(res.wake, w.now.Add(time.Minute))
					return res, nil
				}
			}
			var lr lease.Result
			if !r.notes.hold(run, rig.Name, w.now) {
				// Another run handed the run a rig since it was observed:
				// that Lease's event brings it back.
				c.why = "another rig was just handed to the run"
			} else if lr, err = lease.Acquire(ctx, r.Client, rig.Name, lease.HolderOf(run)); err == nil && !lr.Acquired {
				c.why = fmt.Sprintf("rig %s was just taken by another run", rig.Name)
			}
			if err != nil || !lr.Acquired {
				r.notes.unhold(run, rig.Name)
			}
			if fresh && (err != nil || !lr.Acquired) {
				// Only the slot this reconcile took goes back here: one the
				// run held before may be its running session's, on a cache
				// that does not show the session yet (releaseRig gives that back).
				if rerr := lease.ReleaseSlot(ctx, r.Client, r.APIReader, slot, lease.HolderOf(run)); rerr != nil && err == nil {
					err = rerr
				}
			}
			if err != nil {
				return res, err
			}
			if !lr.Acquired {
				break
			}
			r.took(run, w.now, rig)
			decided(ctx, run, "took a rig", farmv1.ReasonLeased, "took", rig.Name, "slot", slot)
			return acquired{claim: took, rig: rig, wake: res.wake}, nil
		}
	}
	if turn.slot != "" {
		// A slot held from before (handed over with a rig that then went
		// elsewhere, or taken just before the manager stopped) while the run
		// waits for a rig: back to the account, once the API server shows
		// the run holds no rig and runs no pod.
		if err := r.dropIdleSlots(ctx, run); err != nil {
			return res, err
		}
	}
	if due := run.CreationTimestamp.Add(queuedRecordDelay); st.Phase == farmv1.RunPending && c.reason == farmv1.ReasonRigBusy && w.now.Before(due) {
		// A new run that only waits its turn reads Pending for its first
		// queuedRecordDelay: a rig that frees up by then starts it with no
		// Queued status or Event written, and when many runs arrive at once
		// the ones that can start now are not kept waiting behind the status
		// writes of the ones that cannot.
		res.claim, res.wake = queuedLater, earliest(res.wake, due)
		return res, nil
	}
	if st.Phase != farmv1.RunQueued {
		if c.reason != farmv1.ReasonRigBusy {
			// Once per wait, and only for a wait that someone must end: a
			// rig that is missing, matches nothing or cannot serve. Waiting
			// for a busy rig is a farm's routine, and the run's phase and
			// RigLeased condition tell it (with the place) at no extra write.
			r.ev().queued(run, c.why)
		}
		decided(ctx, run, "queued", c.reason, "why", c.why)
	}
	st.Phase = farmv1.RunQueued
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, c.reason, c.why)
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonQueued, "waiting for a rig: "+c.why)
	res.wake = earliest(res.wake, w.now.Add(time.Minute)) // a safety net; Lease and rig events wake the queue first
	return res, nil
}

// markQueued sets when the run started waiting for a rig, once: a run that
// was never queued before (Pending) has waited since it was created, even
// when its first Queued status was held back (see acquire) or it was handed
// a rig before that status was written.
func markQueued(run *farmv1.AgentRun, now time.Time) {
	st := &run.Status
	if st.QueuedAt != nil {
		return
	}
	t := metav1.NewTime(now)
	if st.Phase == farmv1.RunPending && !run.CreationTimestamp.IsZero() {
		t = run.CreationTimestamp
	}
	st.QueuedAt = &t
}

// took notes that the run now holds rig, taken from the queue or handed
// over by the run before it (advance then writes the RigLeased condition).
func (r *Reconciler) took(run *farmv1.AgentRun, now time.Time, rig *farmv1.DeviceRig) {
	markQueued(run, now)
	if run.Status.StartTime == nil {
		r.notes.leased(client.ObjectKeyFromObject(run), now)
	}
}

// rigChoice is the rigs a run may take now, or why there are none.
type rigChoice struct {
	rigs []*farmv1.DeviceRig // Ready, schedulable and matching, in name order
	// why and reason (a RigLeased condition reason) say why the run waits.
	why, reason string
	// invalid says why the run can never take its rig: it fails InvalidConfig.
	invalid string
}

// sharded says the manager serves one shard of the farm (Config.Shard).
func (r *Reconciler) sharded() bool {
	return r.Config.Shard != nil && !r.Config.Shard.Empty()
}

// otherPool says why a sharded manager's run may not take rig: the rig is in
// another pool (farm.clawfarm.dev/pool) than the run, so it may be another
// shard's, whose manager would hand it out too. Admission refuses what it
// can see (docs/sharding.md); a rigRef naming another pool's rig it cannot.
func (r *Reconciler) otherPool(run *farmv1.AgentRun, rig *farmv1.DeviceRig) string {
	if !r.sharded() {
		return ""
	}
	runPool, rigPool := run.Labels[farmv1.LabelPool], rig.Labels[farmv1.LabelPool]
	if runPool == rigPool {
		return ""
	}
	if rigPool == "" {
		return fmt.Sprintf("rig %s is in no pool but run %s is in pool %s (label %s): "+
			"name a rig of pool %s in spec.rigRef, or ask a rig administrator to label rig %s with its pool",
			rig.Name, run.Name, runPool, farmv1.LabelPool, runPool, rig.Name)
	}
	return fmt.Sprintf("rig %s is in pool %s but run %s is in pool %s (label %s): "+
		"name a rig of pool %s in spec.rigRef, or create the run with %s=%s",
		rig.Name, rigPool, run.Name, orNone(runPool), farmv1.LabelPool, orNone(runPool), farmv1.LabelPool, rigPool)
}

func orNone(pool string) string {
	if pool == "" {
		return "(none)"
	}
	return pool
}

// candidates lists the rigs the run may take now: Ready, schedulable,
// matching; when there are none it says why.
func (r *Reconciler) candidates(ctx context.Context, run *farmv1.AgentRun) (rigChoice, error) {
	var all []farmv1.DeviceRig
	if ref := run.Spec.RigRef; ref != nil {
		var rig farmv1.DeviceRig
		key := types.NamespacedName{Namespace: run.Namespace, Name: ref.Name}
		err := r.Get(ctx, key, &rig)
		if apierrors.IsNotFound(err) && r.sharded() {
			// Not in this shard's cache: the rig may be another shard's,
			// which only the API server shows.
			err = r.APIReader.Get(ctx, key, &rig)
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				return rigChoice{why: fmt.Sprintf("rig %s does not exist", ref.Name), reason: farmv1.ReasonRigNotFound}, nil
			}
			return rigChoice{}, fmt.Errorf("get rig %s: %w", ref.Name, err)
		}
		if why := r.otherPool(run, &rig); why != "" {
			return rigChoice{invalid: why}, nil
		}
		all = []farmv1.DeviceRig{rig}
	} else {
		var sel map[string]string
		if run.Spec.RigSelector != nil {
			sel = run.Spec.RigSelector.MatchLabels
		}
		list, err := r.listRigsMatching(ctx, run.Namespace, sel) // a pool's rigs, through an index: not the farm's
		if err != nil {
			return rigChoice{}, err
		}
		all = list
	}
	var c rigChoice
	matching := 0
	for i := range all {
		rig := &all[i]
		if !rigMatches(run, rig) {
			continue
		}
		matching++
		switch {
		case usable(rig): // the queue's own rule
			c.rigs = append(c.rigs, rig)
		case rig.Spec.Unschedulable:
			c.why = fmt.Sprintf("rig %s is in maintenance", rig.Name)
		default:
			c.why = fmt.Sprintf("rig %s is %s", rig.Name, orUnknown(string(rig.Status.Phase)))
		}
	}
	sort.Slice(c.rigs, func(i, j int) bool { return c.rigs[i].Name < c.rigs[j].Name })
	switch {
	case len(c.rigs) > 0:
		return rigChoice{rigs: c.rigs}, nil
	case matching == 0:
		return rigChoice{why: "no rig matches rigSelector", reason: farmv1.ReasonNoMatchingRig}, nil
	}
	c.reason = farmv1.ReasonRigNotReady
	return c, nil
}

// releaseRig gives the rig back, only after no pod of the run is alive:
// checked against the API server, not the cache — unless the cache shows
// the last pod this manager created for the run ended (notes.endedLast), the
// usual end of a session, which no pod the cache has not shown can follow.
// The rig goes straight to the run the queue gives it to next, if any: one
// write instead of a delete and a create, and no gap a third run could use.
// It reports whether the run now holds no rig; while a pod of it is alive it
// holds on (retryRelease says when to ask again).
func (r *Reconciler) releaseRig(ctx context.Context, run *farmv1.AgentRun, w world) (bool, error) {
	if w.held == "" {
		// A model-account slot left from a rig that was never taken (the
		// manager stopped in between) goes back with the run's end.
		return true, r.dropIdleSlots(ctx, run)
	}
	if !r.notes.endedLast(client.ObjectKeyFromObject(run), w.pods) {
		var pods corev1.PodList
		if err := r.APIReader.List(ctx, &pods, client.InNamespace(run.Namespace), client.MatchingLabels{farmv1.LabelRun: run.Name}); err != nil {
			return false, fmt.Errorf("list attempt pods before releasing rig %s: %w", w.held, err)
		}
		for i := range pods.Items {
			if !terminal(&pods.Items[i]) {
				return false, nil
			}
		}
	}
	done := run.Status.Phase.Finished() || run.Status.Phase == farmv1.RunWaiting
	if done {
		// Noted before the Lease's write, as notes.hold is: a worker whose
		// cache already shows the rig's next holder but still shows this
		// run waiting (its finished status not written or not seen yet)
		// would hand it another rig, which it would hold, idle, until its
		// next reconcile gave that one back too.
		r.notes.doneWithRigs(run, w.now)
	}
	msg := fmt.Sprintf("rig %s released", w.held)
	next, err := r.handTo(ctx, run, w)
	if err != nil {
		return false, err
	}
	handed := false
	if next != nil {
		// A run of a capped model account takes its rig only with a slot
		// of it (account.go).
		ok, err := r.passSlot(ctx, run, next)
		if err == nil && ok {
			handed, err = lease.HandOver(ctx, r.Client, w.held, lease.HolderOf(run), lease.HolderOf(next))
		}
		if !handed {
			r.notes.unhold(next, w.held)
		}
		if err != nil {
			return false, err
		}
		if handed {
			msg = fmt.Sprintf("rig %s released to run %s, next in its queue", w.held, next.Name)
		}
	}
	if !handed {
		if err := lease.Release(ctx, r.Client, w.held, lease.HolderOf(run)); err != nil {
			return false, err
		}
	}
	if !done {
		r.notes.unhold(run, w.held)
	}
	// The session's model-account slot goes with the rig, read from the API
	// server: no pod of the run is alive, so no session is left to count.
	if err := r.dropSlots(ctx, run, r.APIReader); err != nil {
		return false, err
	}
	conditions.False(&run.Status.Conditions, run.Generation, farmv1.ConditionRigLeased, farmv1.ReasonReleased, msg)
	if !run.Status.Phase.Finished() { // a finished run's final event covers the release
		r.ev().rigReleased(run, w.held)
	}
	to := ""
	if handed {
		to = next.Name
	}
	decided(ctx, run, "gave the rig back", farmv1.ReasonReleased, "released", w.held, "to", to)
	return true, nil
}

// handTo picks the run the held rig goes to straight from run, and notes
// that it will hold the rig (notes.hold); nil when none may take it now.
// A run another worker handed a rig to a moment ago, which the cache shows
// as waiting still, is passed over for the next one.
func (r *Reconciler) handTo(ctx context.Context, run *farmv1.AgentRun, w world) (*farmv1.AgentRun, error) {
	for range 3 {
		next, err := r.nextHolder(ctx, run.Namespace, w.held)
		if err != nil || next == nil || next.UID == run.UID || !r.mayHandTo(run, w, next) {
			return nil, err
		}
		if r.notes.hold(next, w.held, w.now) {
			return next, nil
		}
	}
	return nil, nil // the rig is released, and the queue takes it from there
}

// releaseRetry is how soon a run whose rig could not go back yet (a pod of
// it still alive) asks again, if no pod event brings it back first.
const releaseRetry = 2 * time.Second

// retryRelease is when to ask releaseRig again: zero once the rig went.
func retryRelease(w world, released bool) time.Time {
	if released {
		return time.Time{}
	}
	return w.now.Add(releaseRetry)
}

// giveBack gives the rig back (releaseRig), and decides to look again while
// it cannot.
func (r *Reconciler) giveBack(ctx context.Context, run *farmv1.AgentRun, w world) (decision, error) {
	released, err := r.releaseRig(ctx, run, w)
	return wakeAt(retryRelease(w, released)), err
}

// mayHandTo says whether the held rig may pass straight to next. A sharded
// manager hands it only to a run of the rig's pool: any other run takes the
// rig through candidates, which fails a rigRef to another pool's rig.
func (r *Reconciler) mayHandTo(run *farmv1.AgentRun, w world, next *farmv1.AgentRun) bool {
	if !r.sharded() {
		return true
	}
	if w.rig != nil && w.rig.Name == w.held {
		return r.otherPool(next, w.rig) == ""
	}
	return next.Labels[farmv1.LabelPool] == run.Labels[farmv1.LabelPool]
}

// rigLost handles a held rig whose DeviceRig was deleted: the attempt is
// stopped (a free retry), the Lease released, and the run queues again.
func (r *Reconciler) rigLost(ctx context.Context, run *farmv1.AgentRun, w world, live []*corev1.Pod) (decision, error) {
	if len(live) > 0 {
		return decision{}, r.stopLive(ctx, run, live, "rig "+w.held+" was deleted")
	}
	released, err := r.releaseRig(ctx, run, w)
	if err != nil || !released {
		return wakeAt(retryRelease(w, released)), err
	}
	run.Status.Phase = farmv1.RunQueued
	conditions.False(&run.Status.Conditions, run.Generation, farmv1.ConditionRigLeased, farmv1.ReasonRigLost,
		fmt.Sprintf("rig %s was deleted while the run held it", w.held))
	decided(ctx, run, "queued again", farmv1.ReasonRigLost, "lost", w.held)
	return decision{}, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "not yet probed"
	}
	return s
}
