package agentrun

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// queueIndex indexes the runs waiting for a rig by what they wait for:
// "rig/<name>" for a rigRef run, "selector/<matchLabels>" for a selector run
// (its labels sorted, as labels.Set prints them). Runs that wait for nothing
// are not indexed, so a farm's history costs the queue nothing.
const queueIndex = "farm.clawfarm.dev/queue"

func queueKey(run *farmv1.AgentRun) []string {
	switch {
	case !run.WaitsForRig():
		return nil
	case run.Spec.RigRef != nil:
		return []string{"rig/" + run.Spec.RigRef.Name}
	case run.Spec.RigSelector != nil:
		return []string{"selector/" + labels.Set(run.Spec.RigSelector.MatchLabels).String()}
	}
	return nil
}

// indexQueue is the queue index's function: queueKey, noting each selector
// the namespace's runs wait with, so a queue read can find them without
// listing every waiting run.
func (r *Reconciler) indexQueue(o client.Object) []string {
	run := o.(*farmv1.AgentRun)
	keys := queueKey(run)
	if len(keys) == 1 && run.Spec.RigRef == nil {
		r.selectors.note(run.Namespace, keys[0], run.Spec.RigSelector.MatchLabels, r.now())
	}
	return keys
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// selectorBook remembers, per namespace, the selectors runs have waited
// with: a handful on a real farm (pools, models, node groups), whatever
// its number of runs. A selector no run has been indexed with for
// selectorForget, and that no run waits with, is forgotten.
type selectorBook struct {
	mu   sync.Mutex
	byNS map[string]map[string]*selectorEntry
}

type selectorEntry struct {
	set      labels.Set
	lastSeen time.Time
}

const selectorForget = 10 * time.Minute

func (b *selectorBook) note(namespace, key string, set map[string]string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNS == nil {
		b.byNS = map[string]map[string]*selectorEntry{}
	}
	ns := b.byNS[namespace]
	if ns == nil {
		ns = map[string]*selectorEntry{}
		b.byNS[namespace] = ns
	}
	if e := ns[key]; e != nil {
		e.lastSeen = now
		return
	}
	ns[key] = &selectorEntry{set: labels.Set(set), lastSeen: now}
}

// all is a copy of the namespace's selectors, key → labels.
func (b *selectorBook) all(namespace string) map[string]labels.Set {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]labels.Set, len(b.byNS[namespace]))
	for k, e := range b.byNS[namespace] {
		out[k] = e.set
	}
	return out
}

// forget drops a selector no run waits with, unless a run was indexed
// with it within selectorForget (it may be on its way into the cache).
func (b *selectorBook) forget(namespace, key string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.byNS[namespace][key]; e != nil && now.Sub(e.lastSeen) > selectorForget {
		delete(b.byNS[namespace], key)
	}
}

// queue is a part of a namespace's rig queue as the cache shows it: the
// runs waiting for a rig, oldest first, and the free rigs handed out to them.
type queue struct {
	waiting []*farmv1.AgentRun
	// given maps a waiting run to the free rig it may take now.
	given map[string]string
}

// readQueue hands free rigs to waiting runs: oldest run first (creation
// time, then name), each taking the first free usable rig, by name, that it
// may use. A rig is free while no Lease names it. This is FIFO per rig, and
// it lets N free rigs go to the N oldest runs in one pass, which a plain
// "head of each rig's queue" cannot do for selector runs (every rig's head
// would be the same run).
//
// With forRig, only the part of the queue that can decide who gets forRig is
// read: the rigs and waiting selectors connected to it (a selector that
// matches one of the rigs brings in every rig it matches, and so on), and
// the rigRef runs of those rigs. Nothing outside that part can take one of
// its rigs, and nothing inside can take a rig outside it, so the hand-out
// is the one a read of the whole namespace would make. On a farm whose
// selectors name pools, that is one pool's rigs and runs, not the farm's;
// one rig's alone when no selector run waits for it. Without forRig the
// whole namespace is read.
//
// freeing names a rig its holder is about to give up: it counts as free, so
// the holder can hand it to the run it goes to next.
//
// A run whose status shows it waiting for its model account (account.go)
// is handed no rig, so the rig goes to the next run; self, the run being
// reconciled, is handed one all the same when its account's turn has come
// (its status says so only once written).
//
// The cache may lag: a run that already holds a Lease may still look queued
// (it is skipped by its Lease, or, while the cache does not show that Lease
// yet, by the hold this manager noted when it wrote it: notes.hold), and a
// Lease another manager just took may not show yet (the Create fails and
// the Lease's event wakes the queue again).
func (r *Reconciler) readQueue(ctx context.Context, namespace, forRig, freeing string, self types.UID) (*queue, error) {
	rigs, selectors, err := r.queuePart(ctx, namespace, forRig)
	if err != nil {
		return nil, err
	}
	if len(selectors) == 0 && forRig != "" {
		// No selector run could take another rig first. With no selector in
		// the part, the part is forRig alone (none when it does not exist).
		if len(rigs) == 0 {
			return &queue{given: map[string]string{}}, nil
		}
		return r.readRigQueue(ctx, rigs[0], freeing, self)
	}
	leased := map[string]bool{}
	holding := map[types.UID]bool{} // runs that hold a Lease of this part
	for _, rig := range rigs {
		l, err := lease.Get(ctx, r.Client, namespace, rig.Name)
		if err != nil {
			return nil, err
		}
		if l != nil && lease.IsRigLease(l) {
			_, uid := lease.HolderRun(l)
			leased[rig.Name] = rig.Name != freeing
			holding[uid] = true
		}
	}
	var free []*farmv1.DeviceRig
	for _, rig := range rigs {
		if !leased[rig.Name] && usable(rig) {
			free = append(free, rig)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i].Name < free[j].Name })

	q := &queue{given: map[string]string{}}
	waiting := selectors
	for _, rig := range free {
		more, err := r.listWaiting(ctx, namespace, "rig/"+rig.Name)
		if err != nil {
			return nil, err
		}
		waiting = append(waiting, more...)
	}
	now := r.now()
	for _, run := range waiting {
		if holding[run.UID] || run.UID != self && accountBlocked(run) {
			continue
		}
		if noted, ok := r.heldNoteOf(run, self, now); ok {
			// It holds a rig the cache does not show it holding yet
			// (neither the run nor that rig is free), or it is done with rigs.
			if noted != "" {
				leased[noted] = leased[noted] || noted != freeing
			}
			continue
		}
		q.waiting = append(q.waiting, run)
	}
	free = slices.DeleteFunc(free, func(rig *farmv1.DeviceRig) bool { return leased[rig.Name] })
	sort.Slice(q.waiting, func(i, j int) bool { return queuedBefore(q.waiting[i], q.waiting[j]) })
	for _, run := range q.waiting {
		if len(free) == 0 {
			break
		}
		for i, rig := range free {
			if rigMatches(run, rig) {
				q.given[run.Name] = rig.Name
				free = append(free[:i], free[i+1:]...)
				break
			}
		}
	}
	return q, nil
}

// queuePart finds the rigs and the waiting selector runs connected to
// forRig (all of the namespace's without it), through the cache's indexes
// and labels: a selector with no waiting run connects nothing.
func (r *Reconciler) queuePart(ctx context.Context, namespace, forRig string) ([]*farmv1.DeviceRig, []*farmv1.AgentRun, error) {
	rigs := map[string]*farmv1.DeviceRig{}
	var fresh []*farmv1.DeviceRig // rigs not yet matched against the selectors
	addRigs := func(set map[string]string) error {
		list, err := r.listRigsMatching(ctx, namespace, set, client.UnsafeDisableDeepCopy)
		if err != nil {
			return err
		}
		for i := range list {
			if rig := &list[i]; rigs[rig.Name] == nil {
				rigs[rig.Name] = rig
				fresh = append(fresh, rig)
			}
		}
		return nil
	}
	if forRig == "" {
		if err := addRigs(nil); err != nil {
			return nil, nil, err
		}
	} else {
		var rig farmv1.DeviceRig
		if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: forRig}, &rig); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("get rig %s: %w", forRig, err)
		}
		rigs[rig.Name] = &rig
		fresh = append(fresh, &rig)
	}
	pending := r.selectors.all(namespace) // selectors not yet in the part
	var waiting []*farmv1.AgentRun
	for len(fresh) > 0 && len(pending) > 0 {
		batch := fresh
		fresh = nil
		for key, set := range pending {
			matches := false
			for _, rig := range batch {
				if hasLabels(rig.Labels, set) {
					matches = true
					break
				}
			}
			if !matches {
				continue
			}
			delete(pending, key)
			runs, err := r.listWaiting(ctx, namespace, key)
			if err != nil {
				return nil, nil, err
			}
			if len(runs) == 0 {
				r.selectors.forget(namespace, key, r.now())
				continue
			}
			waiting = append(waiting, runs...)
			if err := addRigs(set); err != nil {
				return nil, nil, err
			}
		}
	}
	out := make([]*farmv1.DeviceRig, 0, len(rigs))
	for _, rig := range rigs {
		out = append(out, rig)
	}
	return out, waiting, nil
}

// readRigQueue is readQueue for one rig when only rigRef runs wait: the rig,
// its Lease and its own runs are all that decide who takes it.
func (r *Reconciler) readRigQueue(ctx context.Context, rig *farmv1.DeviceRig, freeing string, self types.UID) (*queue, error) {
	q := &queue{given: map[string]string{}}
	namespace, name := rig.Namespace, rig.Name
	held, err := lease.Get(ctx, r.Client, namespace, name)
	if err != nil {
		return nil, err
	}
	all, err := r.listWaiting(ctx, namespace, "rig/"+name)
	if err != nil {
		return nil, err
	}
	var holder types.UID
	if held != nil {
		_, holder = lease.HolderRun(held)
	}
	var waiting []*farmv1.AgentRun
	now := r.now()
	taken := false // by a run whose new Lease the cache does not show yet
	for _, run := range all {
		// The holder may still look queued: its status lags its Lease.
		if run.UID == holder || run.UID != self && accountBlocked(run) {
			continue
		}
		if noted, ok := r.heldNoteOf(run, self, now); ok {
			taken = taken || noted == name
			continue
		}
		waiting = append(waiting, run)
	}
	sort.Slice(waiting, func(i, j int) bool { return queuedBefore(waiting[i], waiting[j]) })
	q.waiting = waiting
	if (held == nil && !taken || name == freeing) && usable(rig) && len(waiting) > 0 {
		q.given[waiting[0].Name] = name
	}
	return q, nil
}

// heldNoteOf is notes.heldNote for a run of the queue other than self:
// the reconcile of the run itself reads its Leases through heldRigs.
func (r *Reconciler) heldNoteOf(run *farmv1.AgentRun, self types.UID, now time.Time) (string, bool) {
	if run.UID == self {
		return "", false
	}
	return r.notes.heldNote(run, now)
}

// nextHolder is the run a rig goes to when its holder gives it up now: the
// one the queue hands it to, or nil when no waiting run may take it.
func (r *Reconciler) nextHolder(ctx context.Context, namespace, rig string) (*farmv1.AgentRun, error) {
	q, err := r.readQueue(ctx, namespace, rig, rig, "")
	if err != nil {
		return nil, err
	}
	for _, run := range q.waiting {
		if q.given[run.Name] == rig {
			return run, nil
		}
	}
	return nil, nil
}

func (r *Reconciler) listWaiting(ctx context.Context, namespace, key string) ([]*farmv1.AgentRun, error) {
	var runs farmv1.AgentRunList
	if err := r.List(ctx, &runs, client.InNamespace(namespace), client.MatchingFields{queueIndex: key}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list runs waiting for %s: %w", key, err)
	}
	out := make([]*farmv1.AgentRun, 0, len(runs.Items))
	for i := range runs.Items {
		if runs.Items[i].WaitsForRig() { // the index is the cache's; re-check the object
			out = append(out, &runs.Items[i])
		}
	}
	return out, nil
}

func queuedBefore(a, b *farmv1.AgentRun) bool {
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.Name < b.Name
}

// usable reports whether a rig may be handed to a queued run: schedulable and
// Ready. InUse counts too: the Lease decides, and the rig's status may lag it.
func usable(rig *farmv1.DeviceRig) bool {
	if rig.Spec.Unschedulable {
		return false
	}
	return rig.Status.Phase.Serving()
}

func rigMatches(run *farmv1.AgentRun, rig *farmv1.DeviceRig) bool {
	if ref := run.Spec.RigRef; ref != nil {
		return ref.Name == rig.Name
	}
	if sel := run.Spec.RigSelector; sel != nil {
		return hasLabels(rig.Labels, sel.MatchLabels)
	}
	return false
}

// hasLabels reports whether have carries every label of want: a
// matchLabels selector's test, without building a selector.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// rigLabelIndex indexes rigs by each of their labels, "key=value", so the
// rigs a selector matches are read without a scan of the farm's rigs.
const rigLabelIndex = "farm.clawfarm.dev/rig-label"

func rigLabelKeys(o client.Object) []string {
	out := make([]string, 0, len(o.GetLabels()))
	for k, v := range o.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out
}

// listRigsMatching lists the namespace's rigs that carry every label of
// set, through rigLabelIndex (every rig when set is empty).
func (r *Reconciler) listRigsMatching(ctx context.Context, namespace string, set map[string]string, opts ...client.ListOption) ([]farmv1.DeviceRig, error) {
	opts = append(opts, client.InNamespace(namespace))
	if len(set) > 0 {
		// Any one label finds a superset; the first by name keeps the read the same each time.
		first := ""
		for k := range set {
			if first == "" || k < first {
				first = k
			}
		}
		opts = append(opts, client.MatchingFields{rigLabelIndex: first + "=" + set[first]})
	}
	var list farmv1.DeviceRigList
	if err := r.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("list rigs: %w", err)
	}
	out := list.Items[:0]
	for _, rig := range list.Items {
		if hasLabels(rig.Labels, set) {
			out = append(out, rig)
		}
	}
	return out, nil
}

// whyWaiting says why a run with usable rigs got none of them. The message
// stays the same while the queue moves, so waiting costs no status writes.
func whyWaiting(rigs []*farmv1.DeviceRig) string {
	if len(rigs) == 1 {
		return fmt.Sprintf("rig %s is in use or promised to an earlier run", rigs[0].Name)
	}
	return fmt.Sprintf("all %d matching rigs are in use or promised to earlier runs", len(rigs))
}
