package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// A model account's sessions are bounded the way a rig's are: by Leases.
// An account capped at N sessions has N slots, Leases named
// SlotName(secret, 0…N-1), and a run holds one from when it takes its rig
// until it gives the rig back. Creating a slot's Lease is the atomic step,
// so two reconciles, two replicas or two shards can never fill one slot
// twice, and the count survives any restart: it is the API server's.
// A slot Lease carries the holder's name (farmv1.LabelRun, which the
// manager's cache keeps) but not farmv1.LabelRunUID: it is no rig's Lease.

// SlotName is the name of slot i of the model account whose key is the
// Secret secret: "model-account.<secret>.<i>", a name no rig can have (a
// rig's name is its Lease's, and carries no "model-account." prefix with
// a dot); a Secret name too long for it is replaced by its hash.
func SlotName(secret string, i int) string {
	name := fmt.Sprintf("model-account.%s.%d", secret, i)
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = fmt.Sprintf("model-account.%s.%d", hash(secret), i)
	}
	return name
}

// AccountLabel is the value of farmv1.LabelModelAccount for the account
// of Secret secret: its name, or its hash when the name is no label value.
func AccountLabel(secret string) string {
	if len(validation.IsValidLabelValue(secret)) == 0 {
		return secret
	}
	return "h-" + hash(secret)
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:40]
}

// TakeSlot takes a free slot of the account of Secret secret, capped at
// limit sessions, for h: the first of slots 0…limit-1 whose Lease it can
// create, or one h already holds. It returns the slot's name ("" when
// every slot is held by another run), and fresh when this call created
// it. A slot h holds at or past limit (the cap was lowered) is not taken
// again.
func TakeSlot(ctx context.Context, c client.Client, reader client.Reader, secret string, limit int, h Holder) (slot string, fresh bool, err error) {
	for i := 0; i < limit; i++ {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: SlotName(secret, i)}}
		holdSlot(l, secret, limit, h)
		err := c.Create(ctx, l)
		if err == nil {
			return l.Name, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", false, fmt.Errorf("create slot %d of model account %s: %w", i, secret, err)
		}
		// Read around the cache: a slot this holder created a moment ago may
		// not show there yet, and taking a second one would count it twice.
		cur, err := Get(ctx, reader, h.Namespace, l.Name)
		if err != nil {
			return "", false, err
		}
		if cur != nil && holderOf(cur) == string(h.UID) && cur.DeletionTimestamp == nil {
			return cur.Name, false, nil
		}
	}
	return "", false, nil
}

// holdSlot makes l a slot Lease of the account of Secret secret held by h.
func holdSlot(l *coordinationv1.Lease, secret string, limit int, h Holder) {
	holder := string(h.UID)
	now := metav1.NewMicroTime(time.Now())
	l.Spec.HolderIdentity, l.Spec.AcquireTime = &holder, &now
	l.Labels = map[string]string{
		farmv1.LabelModelAccount: AccountLabel(secret),
		farmv1.LabelKind:         farmv1.KindModelAccountSlot,
		farmv1.LabelRun:          h.Name,
	}
	if h.Pool != "" {
		l.Labels[farmv1.LabelPool] = h.Pool
	}
	l.Annotations = map[string]string{
		farmv1.AnnotationModelAccount: secret,
		farmv1.AnnotationMaxSessions:  strconv.Itoa(limit),
	}
}

// Slots lists the slot Leases of the account of Secret secret that are
// held (not being deleted), as reader shows them.
func Slots(ctx context.Context, reader client.Reader, namespace, secret string) ([]coordinationv1.Lease, error) {
	var ls coordinationv1.LeaseList
	if err := reader.List(ctx, &ls, client.InNamespace(namespace), client.MatchingLabels{farmv1.LabelModelAccount: AccountLabel(secret)}); err != nil {
		return nil, fmt.Errorf("list slots of model account %s: %w", secret, err)
	}
	out := ls.Items[:0]
	for _, l := range ls.Items {
		if l.DeletionTimestamp == nil && l.Annotations[farmv1.AnnotationModelAccount] == secret {
			out = append(out, l)
		}
	}
	return out, nil
}

// SlotsOf lists the slot Leases h holds, of any account, as reader shows
// them (normally none or one).
func SlotsOf(ctx context.Context, reader client.Reader, h Holder) ([]coordinationv1.Lease, error) {
	var ls coordinationv1.LeaseList
	if err := reader.List(ctx, &ls, client.InNamespace(h.Namespace),
		client.MatchingLabels{farmv1.LabelRun: h.Name, farmv1.LabelKind: farmv1.KindModelAccountSlot}); err != nil {
		return nil, fmt.Errorf("list model-account slots of run %s: %w", h.Name, err)
	}
	out := ls.Items[:0]
	for _, l := range ls.Items {
		if holderOf(&l) == string(h.UID) && l.DeletionTimestamp == nil {
			out = append(out, l)
		}
	}
	return out, nil
}

// ReleaseSlots gives back every slot h holds as reader shows them; each
// delete is guarded by the Lease's UID and resourceVersion.
func ReleaseSlots(ctx context.Context, c client.Client, reader client.Reader, h Holder) (int, error) {
	held, err := SlotsOf(ctx, reader, h)
	if err != nil {
		return 0, err
	}
	for i := range held {
		if err := deleteExact(ctx, c, &held[i]); err != nil {
			return i, err
		}
	}
	return len(held), nil
}

// ReleaseSlot gives back the slot named name if h holds it.
func ReleaseSlot(ctx context.Context, c client.Client, reader client.Reader, name string, h Holder) error {
	cur, err := Get(ctx, reader, h.Namespace, name)
	if err != nil || cur == nil || holderOf(cur) != string(h.UID) {
		return err
	}
	return deleteExact(ctx, c, cur)
}

// HandOverSlot passes slot l from one run straight to the next, in one
// write guarded by its resourceVersion, as HandOver passes a rig: the slot
// is never free for a third run. It reports false (and changes nothing)
// when l is no longer from's or changed in the meantime.
func HandOverSlot(ctx context.Context, c client.Client, l *coordinationv1.Lease, from, to Holder) (bool, error) {
	if holderOf(l) != string(from.UID) || l.DeletionTimestamp != nil {
		return false, nil
	}
	next := l.DeepCopy()
	transitions := int32(1)
	if next.Spec.LeaseTransitions != nil {
		transitions = *next.Spec.LeaseTransitions + 1
	}
	next.Spec.LeaseTransitions = &transitions
	limit, _ := strconv.Atoi(l.Annotations[farmv1.AnnotationMaxSessions])
	holdSlot(next, l.Annotations[farmv1.AnnotationModelAccount], limit, to)
	if err := c.Update(ctx, next); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("hand slot %s to run %s: %w", l.Name, to.Name, err)
	}
	return true, nil
}

// SlotHolder is the UID of the run holding a slot Lease.
func SlotHolder(l *coordinationv1.Lease) string { return holderOf(l) }
