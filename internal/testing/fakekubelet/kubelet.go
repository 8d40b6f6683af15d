// Package fakekubelet drives attempt pods on envtest the way kubelets would.
// It binds each pod to the node its affinity names, starts its "process",
// marks it Running, and ends it with the exit code and termination message
// a Script decides.
//
// A process is not its pod object. It runs on its own clock from its start
// until it really ends, and the kubelet reports that end (then, for a pod
// being deleted, deletes the pod with grace 0, as a kubelet does once its
// containers are dead). By default a deleted pod's process ends on SIGTERM
// at once; on demand it models a real kubelet's faults:
//
//   - a partitioned node (PartitionNode, HealNode): its Ready condition goes
//     Unknown and the kubelet neither hears the API nor writes to it, while
//     the node's processes keep running; back, it reports what they did,
//     kills those whose pods are gone, and signals those being deleted;
//   - a process that ignores SIGTERM until the deletion's grace period ends
//     (Ending.IgnoreSIGTERM), or one stuck terminating (StuckTerminating);
//   - a container that never starts (Ending.Waiting: image pull or
//     configuration errors, with a kubelet's messages);
//   - evictions with the DisruptionTarget condition (Ending.Evict).
//
// It keeps a ledger of every process per rig (Ledger) and flags a process
// started on a rig while another was live there (Violations), so tests can
// prove no two sessions ever shared a phone, partitions and force deletions
// included.
package fakekubelet

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Script decides how a pod ends; it sees the pod as last seen. It is asked
// again and again while the pod lives, so it may change its mind (a Hang
// that later ends); it must not call the Kubelet.
type Script func(pod *corev1.Pod) Ending

// Kubelet is the fake kubelet of every node.
type Kubelet struct {
	Client client.Client
	Script Script
	// Poll is how often the kubelet lists pods (default 50 ms). Once Events
	// has been registered with an informer, a poll lists nothing: it only
	// looks again at the pods the events gave it that may still need work.
	Poll time.Duration
	// Workers drive pods in parallel (default 8), as many kubelets would.
	Workers int
	// Observe, when set, is called once for each pod the first time the kubelet sees it.
	Observe func(pod *corev1.Pod)
	// Foreign, when set, names the nodes another agent runs (a real rignode):
	// their pods are bound, as the scheduler would, and left to that agent.
	Foreign func(node string) bool
	// EndOnly skips the binding and the Running status: a pod goes from
	// Pending straight to its ending, in one status write. A benchmark uses
	// it to keep the harness's own writes off the API server it measures.
	EndOnly bool
	// CountFromSeen counts Ending.After from when the kubelet first saw the
	// pod rather than from when it started it, so the kubelet's own
	// queueing under load does not lengthen the sessions.
	CountFromSeen bool

	once sync.Once
	// cut is held by a worker for each action, and whole by PartitionNode:
	// once a node is cut off, no write for its pods is still in flight.
	cut    sync.RWMutex
	nodeMu sync.Mutex // node condition writes, one at a time

	mu         sync.Mutex
	watched    bool                   // pods come from Events, not from a List each poll
	pods       map[string]*podState   // pod id → its book, for every pod ever seen
	active     map[string]*podState   // with watched: pods that may need work without a new event
	running    map[string]*podState   // pods whose process is live
	rigs       map[string][]*podState // rig → the pods whose process started on it, in order
	cuts       map[string]*partition  // node → its partition
	violations []string
	count      int
	work       chan<- *podState // set by Run; Events offers pods to it
}

func (k *Kubelet) init() {
	k.once.Do(func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.pods, k.active, k.running = map[string]*podState{}, map[string]*podState{}, map[string]*podState{}
		k.rigs, k.cuts = map[string][]*podState{}, map[string]*partition{}
	})
}

// Events returns the handler to register with a pod informer (attempt pods):
// the kubelet then works from the watch, as real kubelets do. Each change is
// offered to a worker at once, and a poll looks only at the pods the events
// gave it that may still need work, not at a List of every pod ever created.
func (k *Kubelet) Events() toolscache.ResourceEventHandler {
	k.init()
	k.mu.Lock()
	k.watched = true
	k.mu.Unlock()
	saw := func(o any) {
		pod, ok := o.(*corev1.Pod)
		if !ok || pod.Labels[farmv1.LabelKind] != "attempt" {
			return
		}
		now := time.Now()
		st := k.see(pod, now)
		k.mu.Lock()
		work := k.work
		k.mu.Unlock()
		if work != nil {
			k.offer(st, work, now)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    saw,
		UpdateFunc: func(_, o any) { saw(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				k.gone(idOf(pod), time.Now())
			}
		},
	}
}

// Run drives pods until ctx ends. Each poll settles the live processes,
// hands the pods that need a write (a new pod to start, an ended one to
// report, a deleted one to remove) to a pool of workers and goes on polling:
// a slow write holds up its own pod, not the others, as each pod has its own
// worker in a real kubelet.
func (k *Kubelet) Run(ctx context.Context) {
	if k.Poll == 0 {
		k.Poll = 50 * time.Millisecond
	}
	if k.Workers == 0 {
		k.Workers = 8
	}
	k.init()
	work := make(chan *podState, 1024)
	k.mu.Lock()
	k.work = work
	k.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	for w := 0; w < k.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case st := <-work:
					k.drive(ctx, st)
					k.mu.Lock()
					st.busy = false
					k.mu.Unlock()
				}
			}
		}()
	}
	t := time.NewTicker(k.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.tick(ctx, work)
		}
	}
}

// Violations lists every start of a process on a rig while another process
// was live there.
func (k *Kubelet) Violations() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.violations...)
}

// Started is how many processes the kubelet started.
func (k *Kubelet) Started() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.count
}

// Interval is one process's life on a rig: from its start until it really
// ended, which may be long after its pod object was deleted.
type Interval struct {
	Pod   string // namespace/name of its pod
	Node  string
	Start time.Time
	End   time.Time // zero while the process runs
}

// Ledger returns, for each rig (namespace/rig), the intervals of the
// processes that ran on it in the order they started, as of the last poll.
func (k *Kubelet) Ledger() map[string][]Interval {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string][]Interval, len(k.rigs))
	for rig, sts := range k.rigs {
		for _, st := range sts {
			out[rig] = append(out[rig], Interval{Pod: st.key, Node: st.proc.node, Start: st.proc.start, End: st.proc.end})
		}
	}
	return out
}

func (k *Kubelet) tick(ctx context.Context, work chan<- *podState) {
	now := time.Now()
	k.flipDue(ctx, now)
	k.mu.Lock()
	watched := k.watched
	var sts []*podState
	for _, st := range k.active {
		sts = append(sts, st)
	}
	k.mu.Unlock()
	if !watched {
		var list corev1.PodList
		if err := k.Client.List(ctx, &list, client.MatchingLabels{farmv1.LabelKind: "attempt"}); err != nil {
			return
		}
		listed := map[string]bool{}
		for i := range list.Items {
			sts = append(sts, k.see(&list.Items[i], now))
			listed[idOf(&list.Items[i])] = true
		}
		// A pod missing from the list is gone: its process is killed, if
		// its node can hear of it.
		k.mu.Lock()
		var gone []string
		for id, st := range k.pods {
			if !listed[id] && !st.gone {
				gone = append(gone, id)
			}
		}
		k.mu.Unlock()
		for _, id := range gone {
			k.gone(id, now)
		}
	}
	k.settle(now, k.live(""))
	for _, st := range sts {
		k.offer(st, work, now)
	}
}

// see records the pod as the API shows it now, and signals its process if
// its node can hear of a deletion.
func (k *Kubelet) see(pod *corev1.Pod, now time.Time) *podState {
	k.init()
	id := idOf(pod)
	k.mu.Lock()
	st := k.pods[id]
	first := st == nil
	if first {
		st = &podState{id: id, key: keyOf(pod), rig: rigOf(pod), seen: now}
		k.pods[id] = st
	}
	if !st.gone {
		st.pod = pod
		if k.watched {
			k.active[id] = st
		}
		if st.proc != nil && k.cuts[st.proc.node] == nil {
			st.proc.signal(st, now)
		}
	}
	k.mu.Unlock()
	if first && k.Observe != nil {
		k.Observe(pod)
	}
	return st
}

// gone notes a pod whose object left the API: its process is killed, if its
// node can hear of it; else when the node returns.
func (k *Kubelet) gone(id string, now time.Time) {
	k.mu.Lock()
	st := k.pods[id]
	if st == nil || st.gone {
		k.mu.Unlock()
		return
	}
	st.gone = true
	delete(k.active, id)
	if st.proc == nil {
		st.final = true
	} else if k.cuts[st.proc.node] == nil {
		st.proc.signal(st, now)
	}
	k.mu.Unlock()
	k.settle(now, []*podState{st})
}

// live lists the pods whose process is live, on rig or ("") on every rig.
func (k *Kubelet) live(rig string) []*podState {
	k.mu.Lock()
	defer k.mu.Unlock()
	var sts []*podState
	for _, st := range k.running {
		if rig == "" || st.rig == rig {
			sts = append(sts, st)
		}
	}
	return sts
}

// settle ends each process of sts that has ended by now by its script or by
// the signals it was sent. Scripts are asked outside the lock.
func (k *Kubelet) settle(now time.Time, sts []*podState) {
	pods := make([]*corev1.Pod, len(sts))
	k.mu.Lock()
	for i, st := range sts {
		if st.proc != nil && st.proc.live() {
			pods[i] = st.pod
		}
	}
	k.mu.Unlock()
	endings := make([]Ending, len(sts))
	for i, pod := range pods {
		if pod != nil {
			endings[i] = k.Script(pod)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, st := range sts {
		if pods[i] == nil || !st.proc.live() {
			continue
		}
		st.proc.settle(endings[i], now)
		if !st.proc.live() {
			delete(k.running, st.id)
			if st.gone {
				st.final = true // no pod left to report to
			}
		}
	}
}

// begin starts st's process on node, and records a violation if another
// process is live on its rig.
func (k *Kubelet) begin(st *podState, node string, now time.Time) {
	k.settle(now, k.live(st.rig))
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, other := range k.rigs[st.rig] {
		if other != st && other.proc.live() {
			k.violations = append(k.violations, fmt.Sprintf("rig %s: %s started while %s was live", st.rig, st.key, other.key))
		}
	}
	clock := now
	if k.CountFromSeen {
		clock = st.seen
	}
	st.proc = &process{node: node, start: now, clock: clock, checked: now}
	k.rigs[st.rig] = append(k.rigs[st.rig], st)
	k.running[st.id] = st
	k.count++
}

// offer hands st to a worker if it needs a write now and no worker has it.
// A watched pod that needs nothing until its next event leaves the poll.
func (k *Kubelet) offer(st *podState, work chan<- *podState, now time.Time) {
	k.mu.Lock()
	busy := st.busy
	k.mu.Unlock()
	if busy {
		return
	}
	a, _, _ := k.next(st, now)
	k.mu.Lock()
	defer k.mu.Unlock()
	if a == none {
		if k.watched && st.settled() {
			delete(k.active, st.id)
		}
		return
	}
	if st.busy {
		return
	}
	st.busy = true
	select {
	case work <- st:
	default: // every worker is busy and the queue is full: the next poll offers it again
		st.busy = false
	}
}

// settled reports whether nothing more can happen to the pod until the API
// says something new of it.
func (st *podState) settled() bool {
	p := st.pod
	switch {
	case st.gone:
		return true
	case st.final:
		return p.DeletionTimestamp == nil || st.removed
	}
	return st.proc == nil && p.DeletionTimestamp != nil && p.Spec.NodeName == ""
}

// idOf is a pod's id in the kubelet's books: namespace/name/uid, so a pod
// recreated under the same name is a new pod, as it is to a kubelet.
func idOf(pod *corev1.Pod) string { return keyOf(pod) + "/" + string(pod.UID) }

// keyOf is a pod's namespace/name.
func keyOf(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// rigOf is the rig a pod drives, namespace/rig.
func rigOf(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Labels[farmv1.LabelRig] }

// nodeOf is the node a pod is bound to, or the one its affinity names.
func nodeOf(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) > 0 {
				return f.Values[0]
			}
		}
	}
	return ""
}
