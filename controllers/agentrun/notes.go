package agentrun

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
)

// notes is the little this manager remembers about runs between reconciles,
// beyond what the API server holds. Losing every note — a restart, a new
// leader — is safe, because no decision about a phone rests on one alone:
//   - a deferred first Queued status is written at once instead (one status
//     write earlier than needed);
//   - a lost start note makes the start time the first pod's creation time, to
//     the second, and the queue-wait metric measure up to it;
//   - a lost own-write note makes a reconcile trust the cache, as any
//     controller does: deterministic pod names and the Lease still stop a
//     second pod on the phone.
type notes struct {
	// deferred holds the runs whose first Queued status waits behind more
	// urgent work (see acquire).
	deferred sync.Map // types.NamespacedName → struct{}
	// starting holds, for runs whose first pod has no start time in their
	// status yet, when they took their rig and created the pod.
	starting sync.Map // types.NamespacedName → *startNote
	// recorded holds, per run, the newest attempt record of this manager's
	// last status write: a cache that does not show it yet is older than that write.
	recorded sync.Map // types.NamespacedName → ownWrite
}

// ownWriteWait bounds how long a reconcile waits for the cache to show the
// manager's own last status write before it goes on regardless.
const ownWriteWait = 30 * time.Second

// ownWrite is the newest attempt record a status write of this manager held.
type ownWrite struct {
	uid types.UID
	pod string
	at  time.Time
}

// startNote is when a run took its rig and created its first pod, kept until
// the status that records the start is written: the metrics are observed
// once, from those moments, whichever reconcile writes it.
type startNote struct {
	mu              sync.Mutex
	leasedAt, podAt time.Time
}

// forget drops every note of a run that is gone.
func (n *notes) forget(key types.NamespacedName) {
	n.deferred.Delete(key)
	n.starting.Delete(key)
	n.recorded.Delete(key)
}

// deferOnce reports whether the run's first Queued status is deferred now:
// true the first time it is asked, false after (the status is then written).
func (n *notes) deferOnce(key types.NamespacedName) bool {
	_, again := n.deferred.LoadOrStore(key, struct{}{})
	return !again
}

// undefer forgets a deferral once the run's status no longer waits on it.
func (n *notes) undefer(key types.NamespacedName) { n.deferred.Delete(key) }

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

// wrote notes the newest attempt record of a status write this manager made.
func (n *notes) wrote(run *farmv1.AgentRun, at time.Time) {
	if a := run.Status.Attempts; len(a) > 0 {
		n.recorded.Store(types.NamespacedName{Namespace: run.Namespace, Name: run.Name},
			ownWrite{uid: run.UID, pod: a[len(a)-1].Pod, at: at})
	}
}

// behindOwnWrite reports whether run, as the cache shows it, is older than
// this manager's last status write of it: that write's newest attempt record
// is missing. (Records are only ever appended; the oldest are dropped past
// 100, never the newest.) After ownWriteWait it gives up waiting — another
// manager may have written since.
func (n *notes) behindOwnWrite(run *farmv1.AgentRun, now time.Time) bool {
	key := types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
	v, ok := n.recorded.Load(key)
	if !ok {
		return false
	}
	w := v.(ownWrite)
	if w.uid != run.UID || attempt.Recorded(&run.Status, w.pod) || now.Sub(w.at) > ownWriteWait {
		n.recorded.CompareAndDelete(key, w)
		return false
	}
	return true
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
