package agentrun

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// notes is the little this manager remembers about runs between reconciles,
// beyond what the API server holds. Losing every note — a restart, a new
// leader — is safe, because no decision about a phone rests on one alone:
//   - a lost start note makes the start time the first pod's creation time, to
//     the second, and the queue-wait metric measure up to it; the status that
//     records the start is then written at once instead of after
//     startRecordDelay (one status write that a short session could have
//     folded into its outcome);
//   - a lost own-write note makes a reconcile trust the cache, as any
//     controller does: deterministic pod names and the Lease still stop a
//     second pod on the phone;
//   - a lost created-pod or let-go note costs a create that is refused
//     (the pod's name is the attempt's) or one more patch of a finalizer.
type notes struct {
	// starting holds, for runs whose first pod has no start time in their
	// status yet, when they took their rig and created the pod.
	starting sync.Map // types.NamespacedName → *startNote
	// recorded holds, per run, this manager's last status write: a cache
	// that does not show it yet is older than that write.
	recorded sync.Map // types.NamespacedName → ownWrite
	// podsMade holds, per run, the attempt pod this manager created last,
	// until the cache shows it.
	podsMade sync.Map // types.NamespacedName → madePod
	// lastMade holds, per run, the name of the last attempt pod this manager
	// created, until the run is gone (forget): while the cache shows that
	// pod ended, no pod of the run is alive that the cache does not show
	// (releaseRig).
	lastMade sync.Map // types.NamespacedName → string
	// finalized holds, per run, the last pod whose finalizer this manager
	// removed, until the cache shows the removal.
	finalized sync.Map // types.NamespacedName → letGone
	// holds holds, per run, the rig this manager made it hold (took, or
	// handed to it) until the cache shows the run's Lease; or that the run
	// gave its rig back for good (doneWithRigs).
	holds sync.Map // types.NamespacedName → heldRig
}

// heldRig is a rig a run was made to hold, and when.
type heldRig struct {
	uid types.UID
	rig string
	at  time.Time
}

// ownWriteWait bounds how long a reconcile waits for the cache to show the
// manager's own last status write before it goes on regardless.
const ownWriteWait = 30 * time.Second

// ownWrite is a status write of this manager: the run and the resource
// version the write gave it; echoWakes, when the write's event must wake
// the run: a reconcile found the cache behind the write and waits for it,
// or the write was made by another run's reconcile (wroteAnother).
type ownWrite struct {
	uid       types.UID
	rv        string
	at        time.Time
	echoWakes bool
}

// madePod is an attempt pod this manager created, and when.
type madePod struct {
	name string
	at   time.Time
}

// letGone is a pod whose finalizer this manager removed, and the resource
// version the removal gave it.
type letGone struct {
	uid types.UID
	rv  string
}

// startNote is when a run took its rig and created its first pod, kept until
// the status that records the start is written: the metrics are observed
// once, from those moments, whichever reconcile writes it.
type startNote struct {
	mu              sync.Mutex
	leasedAt, podAt time.Time
	// recordAfter, when set, is when the status recording the start is
	// written at the latest if the pod has not ended (startRecordDelay).
	recordAfter time.Time
}

// forget drops every note of a run that is gone.
func (n *notes) forget(key types.NamespacedName) {
	n.starting.Delete(key)
	n.recorded.Delete(key)
	n.finalized.Delete(key)
	n.podsMade.Delete(key)
	n.lastMade.Delete(key)
	n.holds.Delete(key)
}

// leased notes when the run took its rig, unless noted before.
func (n *notes) leased(key types.NamespacedName, t time.Time) {
	s := n.start(key)
	s.first(&s.leasedAt, t)
}

// podCreated notes when the run's first pod was created, unless noted before.
func (n *notes) podCreated(key types.NamespacedName, t time.Time) {
	s := n.start(key)
	s.first(&s.podAt, t)
}

func (n *notes) start(key types.NamespacedName) *startNote {
	s, _ := n.starting.LoadOrStore(key, &startNote{})
	return s.(*startNote)
}

// recordStartAfter notes that the status recording the run's start may
// wait until t (startRecordDelay), unless noted before.
func (n *notes) recordStartAfter(key types.NamespacedName, t time.Time) {
	s := n.start(key)
	s.first(&s.recordAfter, t)
}

// startRecordedAfter is when the status recording the run's start is due
// (zero: at once, as nothing noted it may wait).
func (n *notes) startRecordedAfter(key types.NamespacedName) time.Time {
	if s, ok := n.starting.Load(key); ok {
		s := s.(*startNote)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.recordAfter
	}
	return time.Time{}
}

// podCreatedAt is when this manager noted the run's first pod (zero if it did not).
func (n *notes) podCreatedAt(key types.NamespacedName) time.Time {
	if s, ok := n.starting.Load(key); ok {
		_, podAt := s.(*startNote).moments()
		return podAt
	}
	return time.Time{}
}

// takeStart returns the start note and forgets it (zero times for moments not noted).
func (n *notes) takeStart(key types.NamespacedName) (leasedAt, podAt time.Time) {
	if s, ok := n.starting.LoadAndDelete(key); ok {
		return s.(*startNote).moments()
	}
	return time.Time{}, time.Time{}
}

// wrote notes the resource version of a status write this manager made
// in the run's own reconcile.
func (n *notes) wrote(run *farmv1.AgentRun, at time.Time) {
	n.recorded.Store(types.NamespacedName{Namespace: run.Namespace, Name: run.Name},
		ownWrite{uid: run.UID, rv: run.ResourceVersion, at: at})
}

// wroteAnother notes a status write this manager made of run in another
// run's reconcile (a session's run marking a run it collected, a steer run
// joining a session): run's own reconcile has not seen it, so its event
// wakes the run.
func (n *notes) wroteAnother(run *farmv1.AgentRun, at time.Time) {
	n.recorded.Store(types.NamespacedName{Namespace: run.Namespace, Name: run.Name},
		ownWrite{uid: run.UID, rv: run.ResourceVersion, at: at, echoWakes: true})
}

// behindOwnWrite reports whether run, as the cache shows it, is older than
// this manager's last status write of it: its resource version is lower
// (resource versions of one resource compare as integers). After
// ownWriteWait it gives up waiting — the cache is stuck, and acting on it is
// what any controller does.
func (n *notes) behindOwnWrite(run *farmv1.AgentRun, now time.Time) bool {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	v, ok := n.recorded.Load(key)
	if !ok {
		return false
	}
	w := v.(ownWrite)
	if w.uid != run.UID || !olderThan(run.ResourceVersion, w.rv) || now.Sub(w.at) > ownWriteWait {
		n.recorded.CompareAndDelete(key, w)
		return false
	}
	if !w.echoWakes {
		waiting := w
		waiting.echoWakes = true
		n.recorded.CompareAndSwap(key, w, waiting)
	}
	return true
}

// ownEcho reports whether run, as an update event shows it, is this
// manager's own last status write, made in the run's own reconcile, that
// no reconcile waits to see. The reconcile that wrote it went on with what
// it wrote, so the event brings nothing to decide. An event that comes
// before the write's answer, or after a later write by anyone, is not an
// echo. A reconcile that reads the cache just before the echo lands, and
// is found behind only after the echo was dropped, looks again after
// cacheLagPoll.
func (n *notes) ownEcho(run *farmv1.AgentRun) bool {
	v, ok := n.recorded.Load(types.NamespacedName{Namespace: run.Namespace, Name: run.Name})
	if !ok {
		return false
	}
	w := v.(ownWrite)
	return w.uid == run.UID && w.rv == run.ResourceVersion && !w.echoWakes
}

// created notes that this manager created the run's attempt pod.
func (n *notes) created(run types.NamespacedName, pod *corev1.Pod, at time.Time) {
	n.podsMade.Store(run, madePod{name: pod.Name, at: at})
	n.lastMade.Store(run, pod.Name)
}

// madeUnknown forgets the run's last created pod when a create may have
// made a pod this manager cannot name as made (an error with no answer, a
// pod that already existed): endedLast then says nothing until the next
// create that is answered.
func (n *notes) madeUnknown(run types.NamespacedName) { n.lastMade.Delete(run) }

// endedLast reports whether pods, the run's attempt pods as the cache shows
// them, hold the last pod this manager created for the run, and all have
// ended. The run's pods are created only by its own reconciles, which the
// work queue never runs two at a time, and this manager notes each create
// it makes (or forgets the note, madeUnknown, when it cannot tell): so no
// pod of the run is alive that the cache does not show. A manager that did
// not create the run's last pod (it started since) knows nothing of the kind.
func (n *notes) endedLast(run types.NamespacedName, pods []*corev1.Pod) bool {
	v, ok := n.lastMade.Load(run)
	if !ok {
		return false
	}
	shown := false
	for _, p := range pods {
		if !terminal(p) {
			return false
		}
		shown = shown || p.Name == v.(string)
	}
	return shown
}

// podToShow is the attempt pod this manager created for the run that the
// cache may not show yet (""): the reconcile looks for it among the pods it
// observed and waits, up to ownWriteWait, for the pod's own event. Acting
// without it would create it again, refused, and write a status on a world
// that is one pod short.
func (n *notes) podToShow(run types.NamespacedName, now time.Time) string {
	v, ok := n.podsMade.Load(run)
	if !ok {
		return ""
	}
	m := v.(madePod)
	if now.Sub(m.at) > ownWriteWait {
		n.podsMade.CompareAndDelete(run, m)
		return ""
	}
	return m.name
}

// podShown forgets the created pod once the cache shows it.
func (n *notes) podShown(run types.NamespacedName) { n.podsMade.Delete(run) }

// letGo notes that this manager removed the finalizer of the run's pod, as
// the patch returned it (its resource version after the removal).
func (n *notes) letGo(run types.NamespacedName, pod *corev1.Pod) {
	n.finalized.Store(run, letGone{uid: pod.UID, rv: pod.ResourceVersion})
}

// stillLettingGo reports whether pod, as the cache shows it, is older than
// this manager's removal of its finalizer: a second patch would be a write
// for nothing.
func (n *notes) stillLettingGo(run types.NamespacedName, pod *corev1.Pod) bool {
	v, ok := n.finalized.Load(run)
	if !ok {
		return false
	}
	g := v.(letGone)
	if g.uid != pod.UID {
		return false
	}
	if !olderThan(pod.ResourceVersion, g.rv) {
		n.finalized.CompareAndDelete(run, g)
		return false
	}
	return true
}

// olderThan says whether resource version a is lower than b; false when
// either is not a resource version the API server compares.
func olderThan(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}

// first sets one of the note's moments to t, unless it is already set.
func (s *startNote) first(moment *time.Time, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if moment.IsZero() {
		*moment = t
	}
}

// moments reads the note (zero times for moments not noted).
func (s *startNote) moments() (leasedAt, podAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leasedAt, s.podAt
}

// hold notes that this manager is about to make run hold rig: a Lease it
// takes or is handed. It reports false when a hold of another rig is
// noted for the run (within ownWriteWait), and the rig must then go
// elsewhere. Noted before the Lease's write, it makes the workers that all
// found one run at the head of their queues, on a cache that does not show
// the run's new Lease yet, hand it one rig instead of one each.
func (n *notes) hold(run *farmv1.AgentRun, rig string, now time.Time) bool {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	want := heldRig{uid: run.UID, rig: rig, at: now}
	for {
		v, loaded := n.holds.LoadOrStore(key, want)
		if !loaded {
			return true
		}
		h := v.(heldRig)
		if h.uid == run.UID && now.Sub(h.at) <= ownWriteWait {
			return h.rig == rig
		}
		if n.holds.CompareAndSwap(key, h, want) {
			return true
		}
	}
}

// unhold forgets the hold of rig noted for run: its Lease was not written,
// the cache shows it, or the rig went back.
func (n *notes) unhold(run *farmv1.AgentRun, rig string) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	if v, ok := n.holds.Load(key); ok {
		if h := v.(heldRig); h.uid == run.UID && h.rig == rig {
			n.holds.CompareAndDelete(key, h)
		}
	}
}

// heldNote is the rig a fresh note says run holds; ok is false when no
// fresh note is kept. A run with a note is handed nothing more: it holds a
// rig the cache may not show yet, or (rig "") it gave its rig back for good
// on a cache that may still show it waiting (notes.doneWithRigs). Its own
// reconcile confirms a noted rig on the API server (heldRigs).
func (n *notes) heldNote(run *farmv1.AgentRun, now time.Time) (rig string, ok bool) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	v, ok := n.holds.Load(key)
	if !ok {
		return "", false
	}
	h := v.(heldRig)
	if h.uid != run.UID || now.Sub(h.at) > ownWriteWait {
		n.holds.CompareAndDelete(key, h)
		return "", false
	}
	return h.rig, true
}

// doneWithRigs notes that run gave its rig back and will take none again
// (it finished, or waits for its follow-up): until the cache shows the
// status that says so, the queue would still see it waiting and hand it
// the next free rig.
func (n *notes) doneWithRigs(run *farmv1.AgentRun, now time.Time) {
	n.holds.Store(types.NamespacedName{Namespace: run.Namespace, Name: run.Name}, heldRig{uid: run.UID, at: now})
}
