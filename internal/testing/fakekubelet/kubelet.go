// Package fakekubelet drives attempt pods on envtest the way a kubelet would:
// it binds each pod to the node its affinity names, marks it Running, and
// ends it with the exit code and termination message a script decides. It
// also honours graceful deletion (SIGTERM → exit 143). It records, per rig,
// when each pod was live, so tests can prove no two sessions ever shared a phone.
package fakekubelet

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Ending is how a script ends a pod.
type Ending struct {
	// After is how long the pod runs before it ends.
	After time.Duration
	// ExitCode of the loop container.
	ExitCode int32
	// Message is the termination message.
	Message string
	// Reason is the container's terminated reason (e.g. OOMKilled).
	Reason string
	// PodReason and Disruption, when set, end the pod the way infrastructure does.
	PodReason  string
	Disruption bool
	// Hang keeps the pod running until it is deleted.
	Hang bool
}

// Script decides how a pod ends; it sees the pod as created.
type Script func(pod *corev1.Pod) Ending

// Kubelet is the fake kubelet.
type Kubelet struct {
	Client client.Client
	Script Script
	// Poll is how often the kubelet lists pods (default 50 ms). Once Events
	// has been registered with an informer, a poll lists nothing: it only
	// looks again at the live pods the events gave it, for endings falling due.
	Poll time.Duration
	// Workers drive pods in parallel (default 8), as many kubelets would.
	Workers int
	// Observe, when set, is called once for each pod the first time the kubelet sees it.
	Observe func(pod *corev1.Pod)
	// EndOnly skips the binding and the Running status: a pod goes from
	// Pending straight to its ending, in one status write. A benchmark uses
	// it to keep the harness's own writes off the API server it measures.
	EndOnly bool
	// CountFromSeen counts Ending.After from when the kubelet first saw the
	// pod rather than from when it marked it Running, so the kubelet's own
	// queueing under load does not lengthen the sessions.
	CountFromSeen bool

	once       sync.Once
	mu         sync.Mutex
	watched    bool                   // pods come from Events, not from a List each poll
	latest     map[string]*corev1.Pod // with watched: each unfinished pod as last seen
	started    map[string]time.Time   // pod key → when marked Running
	ended      map[string]bool
	liveByRig  map[string]string // rig → live pod key
	observed   map[string]time.Time
	inFlight   map[string]bool // pods a worker is driving
	violations []string
	count      int
	work       chan<- *corev1.Pod // set by Run; Events offers pods to it
}

func (k *Kubelet) init() {
	k.once.Do(func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.started, k.ended, k.liveByRig, k.observed = map[string]time.Time{}, map[string]bool{}, map[string]string{}, map[string]time.Time{}
		k.inFlight, k.latest = map[string]bool{}, map[string]*corev1.Pod{}
	})
}

// Events returns the handler to register with a pod informer (attempt pods):
// the kubelet then works from the watch, as real kubelets do. Each change is
// offered to a worker at once, and a poll looks only at the unfinished pods
// the events gave it, not at a List of every pod ever created.
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
		key := keyOf(pod)
		k.mu.Lock()
		k.latest[key] = pod
		work := k.work
		k.mu.Unlock()
		if work != nil {
			k.offer(pod, work, time.Now())
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
				k.gone(keyOf(pod))
			}
		},
	}
}

// Run drives pods until ctx ends. Each poll hands the pods that need a write
// (a new pod to start, a due or deleted one to end) to a pool of workers and
// goes on polling: a slow write holds up its own pod, not the others, as each
// pod has its own worker in a real kubelet.
func (k *Kubelet) Run(ctx context.Context) {
	if k.Poll == 0 {
		k.Poll = 50 * time.Millisecond
	}
	if k.Workers == 0 {
		k.Workers = 8
	}
	k.init()
	work := make(chan *corev1.Pod, 1024)
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
				case pod := <-work:
					k.drive(ctx, pod)
					k.mu.Lock()
					delete(k.inFlight, keyOf(pod))
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

// Violations lists every moment two pods of one rig were live together.
func (k *Kubelet) Violations() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.violations...)
}

// Started is how many pods the kubelet started.
func (k *Kubelet) Started() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.count
}

func (k *Kubelet) tick(ctx context.Context, work chan<- *corev1.Pod) {
	k.mu.Lock()
	watched := k.watched
	var pods []*corev1.Pod
	for _, pod := range k.latest {
		pods = append(pods, pod)
	}
	k.mu.Unlock()
	if !watched {
		var list corev1.PodList
		if err := k.Client.List(ctx, &list, client.MatchingLabels{farmv1.LabelKind: "attempt"}); err != nil {
			return
		}
		seen := map[string]bool{}
		for i := range list.Items {
			pods = append(pods, &list.Items[i])
			seen[keyOf(&list.Items[i])] = true
		}
		// A pod deleted outright (never terminated by us) is no longer live
		// either; note it before starting new pods.
		k.mu.Lock()
		var gone []string
		for key := range k.started {
			if !seen[key] && !k.ended[key] {
				gone = append(gone, key)
			}
		}
		k.mu.Unlock()
		for _, key := range gone {
			k.gone(key)
		}
	}
	now := time.Now()
	for _, pod := range pods {
		k.offer(pod, work, now)
	}
}

// gone notes a pod that was deleted: it is no longer live on its rig.
func (k *Kubelet) gone(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.latest, key)
	if _, started := k.started[key]; !started || k.ended[key] {
		return
	}
	k.ended[key] = true
	for rig, live := range k.liveByRig {
		if live == key {
			delete(k.liveByRig, rig)
		}
	}
}

// offer hands pod to a worker if it needs a write now and no worker has it.
// pod may be shared (an informer's object): the worker drives a copy.
func (k *Kubelet) offer(pod *corev1.Pod, work chan<- *corev1.Pod, now time.Time) {
	key := keyOf(pod)
	k.mu.Lock()
	done, busy := k.ended[key], k.inFlight[key]
	_, seenBefore := k.observed[key]
	if !seenBefore {
		k.observed[key] = now
	}
	if done && pod.DeletionTimestamp == nil && k.watched {
		delete(k.latest, key) // nothing more to do unless it is deleted, which its next event says
	}
	k.mu.Unlock()
	if !seenBefore && k.Observe != nil {
		k.Observe(pod)
	}
	if busy || (done && pod.DeletionTimestamp == nil) || !k.needsWork(pod, now) {
		return // in hand, or nothing to do for it yet
	}
	k.mu.Lock()
	if k.inFlight[key] {
		k.mu.Unlock()
		return
	}
	k.inFlight[key] = true
	k.mu.Unlock()
	select {
	case work <- pod.DeepCopy():
	default: // every worker is busy and the queue is full: the next poll offers it again
		k.mu.Lock()
		delete(k.inFlight, key)
		k.mu.Unlock()
	}
}

// needsWork reports whether drive has something to do for pod now: start it,
// end it (due, or deleted), or note that it ended.
func (k *Kubelet) needsWork(pod *corev1.Pod, now time.Time) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	startedAt, running := k.runningSince(keyOf(pod))
	if !running {
		return true
	}
	e := k.Script(pod)
	return !e.Hang && now.Sub(startedAt) >= e.After
}

// runningSince reports whether the kubelet started the pod, and since when
// its Ending.After counts (its start, or with CountFromSeen its first sight).
func (k *Kubelet) runningSince(key string) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	startedAt, running := k.started[key]
	if seen, ok := k.observed[key]; ok && k.CountFromSeen {
		startedAt = seen
	}
	return startedAt, running
}

func (k *Kubelet) drive(ctx context.Context, pod *corev1.Pod) {
	key := keyOf(pod)
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		k.markEnded(key, rigOf(pod))
		if pod.DeletionTimestamp != nil {
			_ = k.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))
		}
		return
	}
	startedAt, running := k.runningSince(key)
	if !running {
		if pod.DeletionTimestamp != nil {
			if pod.Spec.NodeName != "" { // bound but never started: the kubelet ends it
				k.end(ctx, pod, Ending{ExitCode: 137, Reason: "ContainerCannotRun"})
			}
			return
		}
		if err := k.start(ctx, pod); err == nil {
			rig := rigOf(pod)
			k.mu.Lock()
			if other, busy := k.liveByRig[rig]; busy && other != key {
				k.violations = append(k.violations, fmt.Sprintf("rig %s: %s started while %s was live", rig, key, other))
			}
			k.liveByRig[rig] = key
			k.started[key] = time.Now()
			k.count++
			k.mu.Unlock()
		}
		return
	}
	e := k.Script(pod)
	switch {
	case pod.DeletionTimestamp != nil:
		k.end(ctx, pod, Ending{ExitCode: 143, Reason: "Error", Message: ""})
	case !e.Hang && time.Since(startedAt) >= e.After:
		k.end(ctx, pod, e)
	}
}

// start binds the pod to the node of its affinity and marks it Running.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) error {
	if k.EndOnly {
		return nil
	}
	if pod.Spec.NodeName == "" {
		node := affinityNode(pod)
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
			Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		if err := k.Client.SubResource("binding").Create(ctx, pod, b); err != nil && !apierrors.IsConflict(err) {
			return err
		}
		pod.Spec.NodeName = node
	}
	orig := pod.DeepCopy()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &now
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "loop", Ready: true, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	// A status patch, as kubelets send: it needs no fresh resourceVersion after the binding.
	return k.Client.Status().Patch(ctx, pod, client.MergeFrom(orig))
}

func (k *Kubelet) end(ctx context.Context, pod *corev1.Pod, e Ending) {
	orig := pod.DeepCopy()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	if e.ExitCode == 0 && e.PodReason == "" && !e.Disruption {
		pod.Status.Phase = corev1.PodSucceeded
	}
	pod.Status.Reason = e.PodReason
	if e.Disruption {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI",
			Message: "evicted by the test", LastTransitionTime: now,
		})
	}
	reason := e.Reason
	if reason == "" {
		reason = "Completed"
		if e.ExitCode != 0 {
			reason = "Error"
		}
	}
	start := now
	if pod.Status.StartTime != nil {
		start = *pod.Status.StartTime
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "loop", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: e.ExitCode, Reason: reason, Message: e.Message, StartedAt: start, FinishedAt: now,
		}},
	}}
	if err := k.Client.Status().Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
		return
	}
	k.markEnded(keyOf(pod), rigOf(pod))
}

func (k *Kubelet) markEnded(key, rig string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ended[key] {
		return
	}
	k.ended[key] = true
	if k.liveByRig[rig] == key {
		delete(k.liveByRig, rig)
	}
}

// keyOf is a pod's key in the kubelet's books: namespace/name.
func keyOf(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// rigOf is the rig a pod drives, namespace/rig.
func rigOf(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Labels[farmv1.LabelRig] }

func affinityNode(pod *corev1.Pod) string {
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
