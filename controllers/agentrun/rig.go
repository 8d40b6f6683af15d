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

// acquire queues the run for a rig, FIFO per rig, and takes the first free
// one it heads the queue of.
func (s *step) acquire(ctx context.Context) (claim, error) {
	st := &s.run.Status
	gen := s.run.Generation
	s.markQueued()
	if t := s.run.Spec.Limits.QueueTimeout(); t > 0 {
		deadline := st.QueuedAt.Add(time.Duration(t) * time.Second)
		if !s.now.Before(deadline) {
			s.finishWith(farmv1.RunFailed, farmv1.ReasonQueueTimeout,
				fmt.Sprintf("no rig became free within limits.queueTimeoutSeconds (%ds)", t))
			return queued, nil
		}
		s.wake(deadline)
	}
	if joined, err := s.steer(ctx); err != nil || joined {
		return steeredIn, err
	}
	c, err := s.candidates(ctx)
	if err != nil {
		return queued, err
	}
	if c.invalid != "" {
		s.finishWith(farmv1.RunFailed, farmv1.ReasonInvalidConfig, c.invalid)
		return queued, nil
	}
	if len(c.rigs) > 0 {
		// Any of the run's rigs leads to the part of the queue that decides
		// which of them it gets: the part holds every rig its selector matches.
		q, err := s.r.readQueue(ctx, s.run.Namespace, c.rigs[0].Name, "")
		if err != nil {
			return queued, err
		}
		c.why, c.reason = whyWaiting(c.rigs), farmv1.ReasonRigBusy
		for _, rig := range c.rigs {
			if q.given[s.run.Name] != rig.Name {
				continue
			}
			res, err := lease.Acquire(ctx, s.r.Client, rig.Name, lease.HolderOf(s.run))
			if err != nil {
				return queued, err
			}
			if !res.Acquired {
				c.why = fmt.Sprintf("rig %s was just taken by another run", rig.Name)
				break
			}
			s.took(rig)
			return took, nil
		}
	}
	if st.Phase == farmv1.RunPending && c.reason == farmv1.ReasonRigBusy && s.r.notes.deferOnce(client.ObjectKeyFromObject(s.run)) {
		// A new run that only waits its turn writes its first Queued status
		// after the more urgent work: when many runs arrive at once, the
		// ones that can start now are not kept waiting behind the status
		// writes of the ones that cannot. Under no load this is a millisecond.
		return queuedLater, nil
	}
	if st.Phase != farmv1.RunQueued {
		s.ev.queued(s.run, c.why) // once per wait: the message stays the same while the queue moves
	}
	st.Phase = farmv1.RunQueued
	conditions.False(&st.Conditions, gen, farmv1.ConditionRigLeased, c.reason, c.why)
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonQueued, "waiting for a rig: "+c.why)
	s.wake(s.now.Add(time.Minute)) // a safety net; Lease and rig events wake the queue first
	return queued, nil
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
	s.markQueued()
	s.heldRig, s.rig = rig.Name, rig
	if s.run.Status.StartTime == nil {
		s.r.notes.leased(client.ObjectKeyFromObject(s.run), s.now)
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
func (s *step) candidates(ctx context.Context) (rigChoice, error) {
	var all []farmv1.DeviceRig
	if ref := s.run.Spec.RigRef; ref != nil {
		var rig farmv1.DeviceRig
		key := types.NamespacedName{Namespace: s.run.Namespace, Name: ref.Name}
		err := s.r.Get(ctx, key, &rig)
		if apierrors.IsNotFound(err) && s.r.sharded() {
			// Not in this shard's cache: the rig may be another shard's,
			// which only the API server shows.
			err = s.r.APIReader.Get(ctx, key, &rig)
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				return rigChoice{why: fmt.Sprintf("rig %s does not exist", ref.Name), reason: farmv1.ReasonRigNotFound}, nil
			}
			return rigChoice{}, fmt.Errorf("get rig %s: %w", ref.Name, err)
		}
		if why := s.r.otherPool(s.run, &rig); why != "" {
			return rigChoice{invalid: why}, nil
		}
		all = []farmv1.DeviceRig{rig}
	} else {
		var sel map[string]string
		if s.run.Spec.RigSelector != nil {
			sel = s.run.Spec.RigSelector.MatchLabels
		}
		list, err := s.r.listRigsMatching(ctx, s.run.Namespace, sel) // a pool's rigs, through an index: not the farm's
		if err != nil {
			return rigChoice{}, err
		}
		all = list
	}
	var c rigChoice
	matching := 0
	for i := range all {
		rig := &all[i]
		if !rigMatches(s.run, rig) {
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

// releaseRig gives the rig back, only after no pod of the run is alive —
// checked against the API server, not the cache. The rig goes straight to the
// run the queue gives it to next, if any: one write instead of a delete and a
// create, and no gap a third run could use.
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
	msg := fmt.Sprintf("rig %s released", s.heldRig)
	next, err := s.r.nextHolder(ctx, s.run.Namespace, s.heldRig)
	if err != nil {
		return err
	}
	handed := false
	if next != nil && next.UID != s.run.UID && s.mayHandTo(next) {
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

// mayHandTo says whether the held rig may pass straight to next. A sharded
// manager hands it only to a run of the rig's pool: any other run takes the
// rig through candidates, which fails a rigRef to another pool's rig.
func (s *step) mayHandTo(next *farmv1.AgentRun) bool {
	if !s.r.sharded() {
		return true
	}
	if s.rig != nil && s.rig.Name == s.heldRig {
		return s.r.otherPool(next, s.rig) == ""
	}
	return next.Labels[farmv1.LabelPool] == s.run.Labels[farmv1.LabelPool]
}

// rigLost handles a held rig whose DeviceRig was deleted: the attempt is
// stopped (a free retry), the Lease released, and the run queues again.
func (s *step) rigLost(ctx context.Context) error {
	if len(s.live) > 0 {
		return s.stopLive(ctx, "rig "+s.heldRig+" was deleted")
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

func orUnknown(s string) string {
	if s == "" {
		return "not yet probed"
	}
	return s
}
