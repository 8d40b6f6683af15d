// Package lease is rig exclusivity: one session per phone, ever. A run holds a
// rig by owning a coordination.k8s.io/v1 Lease named after the rig, with the
// run's UID as holder. Creating the Lease is the atomic step, so two manager
// replicas or two racing reconciles can never book one rig twice.
package lease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Holder identifies a run that may hold a rig.
type Holder struct {
	Namespace string
	Name      string
	UID       types.UID
	// Pool is the run's pool label (farmv1.LabelPool), which the Lease
	// carries so that a sharded manager's cache holds it; empty: none.
	Pool string
}

// HolderOf returns the holder identity of a run.
func HolderOf(run *farmv1.AgentRun) Holder {
	return Holder{Namespace: run.Namespace, Name: run.Name, UID: run.UID, Pool: run.Labels[farmv1.LabelPool]}
}

// Result of an acquisition attempt.
type Result struct {
	// Acquired is true when the holder owns the rig's Lease (new or already held).
	Acquired bool
	// HeldBy names the run holding the rig when Acquired is false.
	HeldBy string
}

// Acquire takes the rig's Lease for the holder. It is idempotent: a Lease the
// holder already owns counts as acquired.
func Acquire(ctx context.Context, c client.Client, rig string, h Holder) (Result, error) {
	holder := string(h.UID)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: rig}}
	hold(l, h)
	err := c.Create(ctx, l)
	if err == nil {
		return Result{Acquired: true}, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return Result{}, fmt.Errorf("create lease for rig %s: %w", rig, err)
	}
	cur, err := Get(ctx, c, h.Namespace, rig)
	if err != nil {
		return Result{}, err
	}
	if cur == nil { // released between our create and get: the next reconcile tries again
		return Result{HeldBy: ""}, nil
	}
	if holderOf(cur) == holder {
		return Result{Acquired: true}, nil
	}
	return Result{HeldBy: cur.Labels[farmv1.LabelRun]}, nil
}

// Release deletes the rig's Lease if, and only if, the holder owns it.
func Release(ctx context.Context, c client.Client, rig string, h Holder) error {
	cur, err := Get(ctx, c, h.Namespace, rig)
	if err != nil || cur == nil {
		return err
	}
	if holderOf(cur) != string(h.UID) {
		return nil
	}
	return deleteExact(ctx, c, cur)
}

// HandOver passes the rig's Lease from one run straight to the next, in one
// write: the Lease is never absent, so no third run can slip in between, and
// the next run needs no create of its own. It is guarded by the Lease's
// resourceVersion; it reports false (and changes nothing) when the Lease is
// gone or no longer held by from, or when it changed in the meantime.
func HandOver(ctx context.Context, c client.Client, rig string, from, to Holder) (bool, error) {
	cur, err := Get(ctx, c, from.Namespace, rig)
	if err != nil || cur == nil || holderOf(cur) != string(from.UID) || cur.DeletionTimestamp != nil {
		return false, err
	}
	l := cur.DeepCopy()
	transitions := int32(1)
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions + 1
	}
	l.Spec.LeaseTransitions = &transitions
	hold(l, to)
	if err := c.Update(ctx, l); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("hand lease of rig %s to run %s: %w", rig, to.Name, err)
	}
	return true, nil
}

// hold makes the rig's Lease l say that h holds it, since now: the holder
// identity and acquire time, and the labels the queue and the rig's status
// read (the rig's name is the Lease's), and the holder's pool.
func hold(l *coordinationv1.Lease, h Holder) {
	holder := string(h.UID)
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.AcquireTime = &holder, &now
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[farmv1.LabelRig] = l.Name
	l.Labels[farmv1.LabelRun] = h.Name
	l.Labels[farmv1.LabelRunUID] = string(h.UID)
	if h.Pool != "" {
		l.Labels[farmv1.LabelPool] = h.Pool
	} else {
		delete(l.Labels, farmv1.LabelPool)
	}
}

// ReleaseStale deletes a Lease whose holder is gone, guarded by its UID and
// resourceVersion so a Lease re-taken in the meantime survives.
func ReleaseStale(ctx context.Context, c client.Client, l *coordinationv1.Lease) error {
	return deleteExact(ctx, c, l)
}

func deleteExact(ctx context.Context, c client.Client, l *coordinationv1.Lease) error {
	uid, rv := l.UID, l.ResourceVersion
	err := c.Delete(ctx, l, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("release lease of rig %s: %w", l.Name, err)
	}
	return nil
}

// Get returns the rig's Lease, or nil when the rig is free.
func Get(ctx context.Context, c client.Reader, namespace, rig string) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: rig}, &l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get lease of rig %s: %w", rig, err)
	}
	return &l, nil
}

// HeldBy returns the rigs whose Leases the holder owns (normally zero or one).
func HeldBy(ctx context.Context, c client.Reader, h Holder) ([]string, error) {
	var ls coordinationv1.LeaseList
	if err := c.List(ctx, &ls, client.InNamespace(h.Namespace), client.MatchingLabels{farmv1.LabelRunUID: string(h.UID)}); err != nil {
		return nil, fmt.Errorf("list leases of run %s: %w", h.Name, err)
	}
	var rigs []string
	for i := range ls.Items {
		if holderOf(&ls.Items[i]) == string(h.UID) && ls.Items[i].DeletionTimestamp == nil {
			rigs = append(rigs, ls.Items[i].Name)
		}
	}
	return rigs, nil
}

// HolderRun returns the name and UID of the run holding a Lease.
func HolderRun(l *coordinationv1.Lease) (name string, uid types.UID) {
	return l.Labels[farmv1.LabelRun], types.UID(holderOf(l))
}

// IsRigLease reports whether a Lease is one of ours.
func IsRigLease(l *coordinationv1.Lease) bool {
	_, ok := l.Labels[farmv1.LabelRunUID]
	return ok
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
