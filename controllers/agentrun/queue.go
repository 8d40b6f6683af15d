package agentrun

import (
	"context"
	"fmt"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// queueIndex indexes the runs waiting for a rig by what they wait for:
// "rig/<name>" for a rigRef run, "selector" for a selector run. Runs that wait
// for nothing are not indexed, so a farm's history costs the queue nothing.
const queueIndex = "farm.clawfarm.dev/queue"

func queueKey(run *farmv1.AgentRun) []string {
	switch {
	case !run.WaitsForRig():
		return nil
	case run.Spec.RigRef != nil:
		return []string{"rig/" + run.Spec.RigRef.Name}
	case run.Spec.RigSelector != nil:
		return []string{"selector"}
	}
	return nil
}

// queue is a namespace's rig queue as the cache shows it: the runs waiting
// for a rig, oldest first, and the free rigs handed out to them.
type queue struct {
	waiting []*farmv1.AgentRun
	// given maps a waiting run to the free rig it may take now.
	given map[string]string
}

// readQueue hands the namespace's free rigs to its waiting runs: oldest run
// first (creation time, then name), each taking the first free usable rig, by
// name, that it may use. A rig is free while no Lease names it. This is FIFO
// per rig, and it lets N free rigs go to the N oldest runs in one pass, which
// a plain "head of each rig's queue" cannot do for selector runs (every rig's
// head would be the same run).
//
// Only the runs that can take a free rig are read: those naming a free rig
// and those with a selector. When no selector run waits and the caller cares
// about one rig (forRig), only that rig's runs are read.
//
// freeing names a rig its holder is about to give up: it counts as free, so
// the holder can hand it to the run it goes to next.
//
// The cache may lag: a run that already holds a Lease may still look queued
// (it is skipped by its Lease), and a Lease just taken may not show yet (the
// Create fails and the Lease's event wakes the queue again).
func (r *Reconciler) readQueue(ctx context.Context, namespace, forRig, freeing string) (*queue, error) {
	selectors, err := r.listWaiting(ctx, namespace, "selector")
	if err != nil {
		return nil, err
	}
	if len(selectors) == 0 && forRig != "" {
		return r.readRigQueue(ctx, namespace, forRig, freeing) // no selector run could take another rig first
	}
	var rigs farmv1.DeviceRigList
	if err := r.List(ctx, &rigs, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list rigs: %w", err)
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, client.InNamespace(namespace), client.HasLabels{farmv1.LabelRunUID}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	leased := map[string]bool{}
	holding := map[string]bool{} // run UIDs that hold a Lease
	for i := range leases.Items {
		_, uid := lease.HolderRun(&leases.Items[i])
		leased[leases.Items[i].Name] = leases.Items[i].Name != freeing
		holding[string(uid)] = true
	}
	var free []*farmv1.DeviceRig
	for i := range rigs.Items {
		rig := &rigs.Items[i]
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
	for _, run := range waiting {
		if !holding[string(run.UID)] {
			q.waiting = append(q.waiting, run)
		}
	}
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

// readRigQueue is readQueue for one rig when only rigRef runs wait: the rig,
// its Lease and its own runs are all that decide who takes it.
func (r *Reconciler) readRigQueue(ctx context.Context, namespace, name, freeing string) (*queue, error) {
	q := &queue{given: map[string]string{}}
	var rig farmv1.DeviceRig
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &rig); err != nil {
		if apierrors.IsNotFound(err) {
			return q, nil
		}
		return nil, fmt.Errorf("get rig %s: %w", name, err)
	}
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
	for _, run := range all {
		if run.UID != holder { // the holder may still look queued: its status lags its Lease
			waiting = append(waiting, run)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return queuedBefore(waiting[i], waiting[j]) })
	q.waiting = waiting
	if (held == nil || name == freeing) && usable(&rig) && len(waiting) > 0 {
		q.given[waiting[0].Name] = name
	}
	return q, nil
}

// nextHolder is the run a rig goes to when its holder gives it up now: the
// one the queue hands it to, or nil when no waiting run may take it.
func (r *Reconciler) nextHolder(ctx context.Context, namespace, rig string) (*farmv1.AgentRun, error) {
	q, err := r.readQueue(ctx, namespace, rig, rig)
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
	return rig.Status.Phase == farmv1.RigReady || rig.Status.Phase == farmv1.RigInUse
}

func rigMatches(run *farmv1.AgentRun, rig *farmv1.DeviceRig) bool {
	if ref := run.Spec.RigRef; ref != nil {
		return ref.Name == rig.Name
	}
	if sel := run.Spec.RigSelector; sel != nil {
		return labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(rig.Labels))
	}
	return false
}

// whyWaiting says why a run with usable rigs got none of them. The message
// stays the same while the queue moves, so waiting costs no status writes.
func whyWaiting(rigs []*farmv1.DeviceRig) string {
	if len(rigs) == 1 {
		return fmt.Sprintf("rig %s is in use or promised to an earlier run", rigs[0].Name)
	}
	return fmt.Sprintf("all %d matching rigs are in use or promised to earlier runs", len(rigs))
}
