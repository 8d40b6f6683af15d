package agentrun

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// A model account is the model-key Secret runs name in
// spec.model.apiKeySecretRef: one provider key, one rate limit. A rig
// administrator caps its sessions with the Secret's annotation
// farm.clawfarm.dev/max-sessions; a run beyond the cap waits, Queued with
// reason ModelAccountBusy and its place, and takes no rig meanwhile. The
// sessions are counted by the account's slot Leases (internal/lease/slot.go),
// taken with the rig and given back with it (docs/architecture.md,
// "Model accounts: a cap per key").

// modelAccount is a run's model account as its key Secret says it.
type modelAccount struct {
	// secret is the key Secret's name ("": the run names none).
	secret string
	// cap is the annotation's number of sessions (0: no cap).
	cap int
	// invalid says why the annotation is no cap; the run waits meanwhile.
	invalid string
}

func (a modelAccount) capped() bool { return a.secret != "" && (a.cap > 0 || a.invalid != "") }

// modelAccountOf reads the cap of the run's model account: the metadata of
// its key Secret, around the cache (the manager keeps no Secrets), as read
// within capFresh. A Secret that does not exist, or is not labelled a model
// key, caps nothing here: the run waits for it, or fails, when its pod is
// about to be made (modelkey.go), which reads the cap afresh (ensureSlot).
func (r *Reconciler) modelAccountOf(ctx context.Context, run *farmv1.AgentRun) (modelAccount, error) {
	ref := run.Spec.Model.APIKeySecretRef
	if ref == nil {
		return modelAccount{}, nil
	}
	key := types.NamespacedName{Namespace: run.Namespace, Name: ref.Name}
	now := r.now()
	if a, ok := r.caps.get(key, now); ok {
		return a, nil
	}
	a, err := r.readAccount(ctx, key)
	if err == nil {
		r.caps.put(key, a, now)
	}
	return a, err
}

// readAccount reads the cap of the account of key Secret key.
func (r *Reconciler) readAccount(ctx context.Context, key types.NamespacedName) (modelAccount, error) {
	a := modelAccount{secret: key.Name}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.APIReader.Get(ctx, key, meta)
	switch {
	case apierrors.IsNotFound(err):
		return a, nil
	case err != nil:
		return a, fmt.Errorf("read the model key Secret %s: %w", key.Name, err)
	}
	return accountFrom(key.Name, meta), nil
}

// capFresh is how long a key Secret's cap, once read, decides a waiting
// run's turn: a farm's waiting runs look at their turn about once a minute
// each, and would otherwise each read their Secret from the API server.
// A changed cap is seen within it; a pod is made only with the cap read
// then (ensureSlot).
const capFresh = 5 * time.Second

// capBook remembers each key Secret's cap for capFresh. It holds settings,
// never a count: the sessions are the slot Leases.
type capBook struct {
	mu sync.Mutex
	m  map[types.NamespacedName]capEntry
}

type capEntry struct {
	a  modelAccount
	at time.Time
}

func (b *capBook) get(key types.NamespacedName, now time.Time) (modelAccount, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[key]
	if !ok || now.Sub(e.at) >= capFresh || now.Before(e.at) {
		return modelAccount{}, false
	}
	return e.a, true
}

func (b *capBook) put(key types.NamespacedName, a modelAccount, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[types.NamespacedName]capEntry{}
	}
	for k, e := range b.m { // a farm has a handful of keys; drop the stale ones
		if now.Sub(e.at) >= capFresh {
			delete(b.m, k)
		}
	}
	b.m[key] = capEntry{a: a, at: now}
}

// accountFrom reads the cap of the model account whose key Secret is
// secret from the Secret's metadata.
func accountFrom(secret string, meta *metav1.PartialObjectMetadata) modelAccount {
	a := modelAccount{secret: secret}
	if meta.Labels[admission.LabelModelKey] != "true" {
		return a
	}
	v, ok := meta.Annotations[farmv1.AnnotationMaxSessions]
	if !ok {
		return a
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		a.invalid = fmt.Sprintf("waiting for model account %s: its annotation %s=%q is not a positive integer; "+
			"a rig administrator sets it to how many sessions the key may have at once, or removes it",
			secret, farmv1.AnnotationMaxSessions, v)
		return a
	}
	a.cap = n
	return a
}

// ensureSlot makes sure a run of a capped model account holds a slot
// before its attempt pod is made: one the cache shows, else one it takes
// now. A run may hold a rig without one — its key Secret, or its cap,
// appeared after it took the rig — and then only a free slot lets its pod
// be made; without one the rig goes back and the run waits for its account.
func (r *Reconciler) ensureSlot(ctx context.Context, run *farmv1.AgentRun, w world, a modelAccount) (decision, bool, error) {
	if !a.capped() {
		return decision{}, true, nil
	}
	h := lease.HolderOf(run)
	held, err := lease.SlotsOf(ctx, r.Client, h)
	if err != nil {
		return decision{}, false, err
	}
	for i := range held {
		if held[i].Annotations[farmv1.AnnotationModelAccount] == a.secret {
			return decision{}, true, nil
		}
	}
	slot := ""
	if a.invalid == "" {
		if slot, _, err = lease.TakeSlot(ctx, r.Client, r.APIReader, a.secret, a.cap, h); err != nil || slot != "" {
			return decision{}, slot != "", err
		}
	}
	released, err := r.releaseRig(ctx, run, w)
	if err != nil || !released {
		return wakeAt(retryRelease(w, released)), false, err
	}
	r.accountBusy(ctx, run, a, accountTurn{inUse: a.cap, place: 1})
	return wakeAt(w.now.Add(time.Minute)), false, nil
}

// accountTurn is where a run stands in its model account's queue.
type accountTurn struct {
	// slot is the slot Lease the run holds already ("": none).
	slot string
	// inUse is how many slots other runs hold.
	inUse int
	// place is the run's place among the runs waiting for the account, from 1.
	place int
	// pass: the run may take a slot now.
	pass bool
}

// turnOf says whether the run may take a session of its capped account
// now: it may when the runs waiting for the account ahead of it (FIFO:
// creation time, then name) are fewer than the slots no other run holds.
// The slots are the account's Leases, which the cache shows; a slot taken
// meanwhile by another manager or shard is caught when this run creates
// its own (lease.TakeSlot), so the cap never depends on this count.
//
// leaving, when set, is a run about to give its slot up: its slot counts
// as free (releaseRig asks whether the run its rig goes to next may have
// it).
func (r *Reconciler) turnOf(ctx context.Context, run *farmv1.AgentRun, a modelAccount, leaving types.UID) (accountTurn, error) {
	var t accountTurn
	slots, err := lease.Slots(ctx, r.Client, run.Namespace, a.secret)
	if err != nil {
		return t, err
	}
	holders := map[types.UID]bool{}
	for i := range slots {
		uid := types.UID(lease.SlotHolder(&slots[i]))
		if uid == run.UID {
			t.slot = slots[i].Name
			continue
		}
		if uid == leaving {
			continue
		}
		holders[uid] = true
		t.inUse++
	}
	if t.slot != "" {
		t.pass = true
		return t, nil
	}
	waiting, err := r.listAccountWaiting(ctx, run.Namespace, a.secret)
	if err != nil {
		return t, err
	}
	ahead := 0
	for _, o := range waiting {
		if o.UID != run.UID && !holders[o.UID] && awaitsAccount(o) && queuedBefore(o, run) {
			ahead++
		}
	}
	t.place = ahead + 1
	t.pass = a.invalid == "" && ahead < a.cap-t.inUse
	return t, nil
}

// awaitsAccount says whether a waiting run keeps a place in its account's
// queue: it waits for the account (ModelAccountBusy), or has not been
// looked at yet. A run that passed its account's turn and waits for a rig
// keeps none: runs behind it that have a rig free go first.
func awaitsAccount(run *farmv1.AgentRun) bool {
	c := conditions.Get(run.Status.Conditions, farmv1.ConditionRigLeased)
	return c == nil || accountBlocked(run)
}

// accountBlocked says the run's status shows it waiting for its model
// account: the rig queue hands it no rig (queue.go).
func accountBlocked(run *farmv1.AgentRun) bool {
	c := conditions.Get(run.Status.Conditions, farmv1.ConditionRigLeased)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == farmv1.ReasonModelAccountBusy
}

// accountBusy queues the run behind its model account: Queued, with the
// account, its sessions and the run's place in the RigLeased condition,
// and an Event when the wait begins.
func (r *Reconciler) accountBusy(ctx context.Context, run *farmv1.AgentRun, a modelAccount, t accountTurn) {
	st := &run.Status
	msg := a.invalid
	if msg == "" {
		msg = fmt.Sprintf("waiting for model account %s: %d of %d sessions in use, place %d in queue", a.secret, min(t.inUse, a.cap), a.cap, t.place)
	}
	if !accountBlocked(run) {
		r.ev().accountBusy(run, msg) // once per wait: the place moves, the Event stays
		decided(ctx, run, "queued for the model account", farmv1.ReasonModelAccountBusy, "secret", a.secret, "place", t.place)
	}
	st.Phase = farmv1.RunQueued
	conditions.False(&st.Conditions, run.Generation, farmv1.ConditionRigLeased, farmv1.ReasonModelAccountBusy, msg)
	conditions.Unknown(&st.Conditions, run.Generation, farmv1.ConditionSucceeded, farmv1.ReasonQueued, msg)
}

// dropSlots gives back the model-account slots the run holds, as reader
// shows them: the API server's when the run has just given its rig back.
func (r *Reconciler) dropSlots(ctx context.Context, run *farmv1.AgentRun, reader client.Reader) error {
	if run.Spec.Model.APIKeySecretRef == nil {
		return nil
	}
	n, err := lease.ReleaseSlots(ctx, r.Client, reader, lease.HolderOf(run))
	if n > 0 {
		decided(ctx, run, "gave a model-account slot back", farmv1.ReasonReleased, "secret", run.Spec.Model.APIKeySecretRef.Name)
	}
	return err
}

// dropIdleSlots gives back a slot the cache shows the run holding without
// a rig — taken just before a rig the manager never got to — once the API
// server shows that it holds no rig and no pod of it is alive: on a cache
// that lags, a slot that looks idle may be a running session's.
func (r *Reconciler) dropIdleSlots(ctx context.Context, run *farmv1.AgentRun) error {
	if run.Spec.Model.APIKeySecretRef == nil {
		return nil
	}
	h := lease.HolderOf(run)
	held, err := lease.SlotsOf(ctx, r.Client, h)
	if err != nil || len(held) == 0 {
		return err
	}
	rigs, err := lease.HeldBy(ctx, r.APIReader, h)
	if err != nil || len(rigs) > 0 {
		return err
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(run.Namespace), client.MatchingLabels{farmv1.LabelRun: run.Name}); err != nil {
		return fmt.Errorf("list attempt pods before giving back a model-account slot: %w", err)
	}
	for i := range pods.Items {
		if !terminal(&pods.Items[i]) {
			return nil
		}
	}
	return r.dropSlots(ctx, run, r.APIReader)
}

// passSlot decides whether the rig run gives up may be handed straight to
// next, and hands next a slot first when next's model account is capped:
// the slot run holds of that account, when next's turn has come with it
// counted free (FIFO: no older run waits for the account beyond the free
// slots). Otherwise the rig goes back to the queue, which hands it on to
// a run that takes a slot with it (acquire). One write moves the slot, as
// one moves the rig: no third run can take it in between.
func (r *Reconciler) passSlot(ctx context.Context, run, next *farmv1.AgentRun) (bool, error) {
	a, err := r.modelAccountOf(ctx, next)
	if err != nil || !a.capped() {
		return err == nil, err
	}
	held, err := lease.SlotsOf(ctx, r.APIReader, lease.HolderOf(run))
	if err != nil {
		return false, err
	}
	for i := range held {
		if held[i].Annotations[farmv1.AnnotationModelAccount] != a.secret {
			continue
		}
		turn, err := r.turnOf(ctx, next, a, run.UID)
		if err != nil || !turn.pass || turn.slot != "" {
			return false, err
		}
		return lease.HandOverSlot(ctx, r.Client, &held[i], lease.HolderOf(run), lease.HolderOf(next))
	}
	return false, nil
}

// accountIndex indexes the runs waiting for a rig that name a model-key
// Secret by that Secret's name: the account's queue. Runs joined into
// another's session wait for no session of their own.
const accountIndex = "farm.clawfarm.dev/model-account"

func indexAccount(o client.Object) []string {
	run := o.(*farmv1.AgentRun)
	ref := run.Spec.Model.APIKeySecretRef
	if ref == nil || !run.WaitsForRig() || run.Status.CollectedInto != "" || run.Status.SteeredInto != "" {
		return nil
	}
	return []string{ref.Name}
}

func (r *Reconciler) listAccountWaiting(ctx context.Context, namespace, secret string) ([]*farmv1.AgentRun, error) {
	var runs farmv1.AgentRunList
	if err := r.List(ctx, &runs, client.InNamespace(namespace), client.MatchingFields{accountIndex: secret}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list runs waiting for model account %s: %w", secret, err)
	}
	out := make([]*farmv1.AgentRun, 0, len(runs.Items))
	for i := range runs.Items {
		if indexAccount(&runs.Items[i]) != nil { // the index is the cache's; re-check the object
			out = append(out, &runs.Items[i])
		}
	}
	return out, nil
}

// accountHeads are the first n runs waiting for the account's turn, FIFO:
// the ones a freed slot may let in.
func (r *Reconciler) accountHeads(ctx context.Context, namespace, secret string, n int) []reconcile.Request {
	waiting, err := r.listAccountWaiting(ctx, namespace, secret)
	if err != nil {
		return nil
	}
	var heads []*farmv1.AgentRun
	for _, run := range waiting {
		if awaitsAccount(run) {
			heads = append(heads, run)
		}
	}
	sort.Slice(heads, func(i, j int) bool { return queuedBefore(heads[i], heads[j]) })
	reqs := make([]reconcile.Request, 0, min(n, len(heads)))
	for _, run := range heads[:min(n, len(heads))] {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: run.Name}})
	}
	return reqs
}

// capOf is the cap a slot Lease was taken under (at least 1).
func capOf(annotations map[string]string) int {
	n, err := strconv.Atoi(annotations[farmv1.AnnotationMaxSessions])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// rigQueueOf wakes the runs the rig queue of the run's rigs hands a rig
// to: when the run begins waiting for its account, a rig it was promised
// goes to the next run.
func (r *Reconciler) rigQueueOf(ctx context.Context, run *farmv1.AgentRun) []reconcile.Request {
	rig := ""
	switch {
	case run.Spec.RigRef != nil:
		rig = run.Spec.RigRef.Name
	case run.Spec.RigSelector != nil:
		rigs, err := r.listRigsMatching(ctx, run.Namespace, run.Spec.RigSelector.MatchLabels, client.UnsafeDisableDeepCopy)
		if err != nil || len(rigs) == 0 {
			return nil
		}
		rig = rigs[0].Name // the part of the queue read holds every rig the selector matches
	default:
		return nil
	}
	q, err := r.readQueue(ctx, run.Namespace, rig, "", "")
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(q.given))
	for name := range q.given {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: name}})
	}
	return reqs
}
