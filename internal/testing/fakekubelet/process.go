package fakekubelet

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podState is the kubelet's book on one pod (one UID): what the API last
// said of it, its process, and what the kubelet has written.
type podState struct {
	id, key, rig string
	pod          *corev1.Pod // as last seen; shared, never written to
	seen         time.Time   // first seen
	gone         bool        // the pod object is gone from the API
	proc         *process    // nil until the process starts

	running      bool   // its Running status is written
	waiting      string // the waiting reason written
	waitingSince time.Time
	final        bool // its terminal status is written, or there is none to write
	removed      bool // deleted with grace 0 after its end
	evicted      bool // its eviction is posted
	busy         bool // a worker has it
}

// process is a pod's "container": it runs on its node's clock whether or not
// the node can talk to the API server.
type process struct {
	node    string
	start   time.Time
	clock   time.Time // Ending.After counts from here
	checked time.Time // last seen still running by its script
	hung    bool      // its script said Hang when last asked
	termAt  time.Time // SIGTERM delivered
	killAt  time.Time // SIGKILL due
	end     time.Time // zero while it runs
	exit    exit
}

func (p *process) live() bool { return p.end.IsZero() }

// settle ends the process if, by its script e and the signals it was sent,
// it has ended by now, at the moment it ended.
func (p *process) settle(e Ending, now time.Time) {
	if !p.live() {
		return
	}
	var at time.Time
	var how exit
	consider := func(t time.Time, x exit) {
		if !t.IsZero() && !t.After(now) && (at.IsZero() || t.Before(at)) {
			at, how = t, x
		}
	}
	var natural time.Time
	if !e.Hang && e.Evict != ByEvictionAPI {
		// A script that changed its mind ends the process no earlier than
		// the last time it was seen running; one that hung until now ends
		// it now, when the change is seen: a test that lets a session end
		// while the kubelet had not looked for a while must not find it
		// ended back when the kubelet last looked.
		natural = later(p.clock.Add(e.After), p.checked)
		if p.hung {
			natural = later(natural, now)
		}
	}
	signal := earliest(p.termAt, p.killAt)
	if e.StuckTerminating > 0 && !signal.IsZero() {
		if !natural.IsZero() && natural.Before(signal) {
			consider(natural, e.exit())
		}
		consider(signal.Add(e.StuckTerminating), killed)
	} else {
		consider(natural, e.exit())
		if !e.IgnoreSIGTERM {
			consider(p.termAt, terminated)
		}
		consider(p.killAt, killed)
	}
	if at.IsZero() {
		p.checked, p.hung = now, e.Hang
		return
	}
	p.end, p.exit = at, how
}

// minGrace is the least time a kubelet leaves a container between SIGTERM
// and SIGKILL (kuberuntime: minimumGracePeriodInSeconds).
const minGrace = 2 * time.Second

// signal tells the process what the API says of its pod, as a kubelet that
// hears it now does: SIGTERM for a deletion, SIGKILL at the deletion's
// deadline (and no sooner than minGrace); for a pod that is gone (force
// deleted), SIGTERM and SIGKILL minGrace later, sooner than any deadline.
func (p *process) signal(st *podState, now time.Time) {
	switch {
	case !p.live():
	case st.gone:
		if p.termAt.IsZero() {
			p.termAt = now
		}
		p.killAt = earliest(p.killAt, now.Add(minGrace))
	case st.pod.DeletionTimestamp != nil && p.termAt.IsZero():
		p.termAt = now
		p.killAt = later(st.pod.DeletionTimestamp.Time, now.Add(minGrace))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earliest is the earlier of two times, a zero time meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}
