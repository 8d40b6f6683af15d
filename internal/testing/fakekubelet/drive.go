package fakekubelet

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// action is the next thing the kubelet must do for a pod.
type action int

const (
	none    action = iota
	bindTo         // bind it to a foreign node, whose own agent runs it
	start          // bind it, start its process, write Running
	running        // write Running (a first write failed)
	wait           // write its container's waiting state
	evict          // post an eviction for it
	report         // write how its process ended
	abandon        // a bound pod deleted before it started: write it Failed
	remove         // delete it with grace 0: its process is dead
)

// drive does what st needs, action after action, while it needs something.
func (k *Kubelet) drive(ctx context.Context, st *podState) {
	k.cut.RLock()
	defer k.cut.RUnlock()
	for range 4 {
		now := time.Now()
		k.settle(now, []*podState{st})
		a, pod, e := k.next(st, now)
		if a == none || !k.act(ctx, st, a, pod, e, now) {
			return
		}
	}
}

// next decides st's next action by its script; pod is a private copy of the
// pod to write with.
func (k *Kubelet) next(st *podState, now time.Time) (action, *corev1.Pod, Ending) {
	k.mu.Lock()
	pod := st.pod
	k.mu.Unlock()
	e := k.Script(pod)
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.decide(st, e, now)
	if a == none {
		return none, nil, e
	}
	return a, st.pod.DeepCopy(), e
}

// decide is next's rule; it holds k.mu.
func (k *Kubelet) decide(st *podState, e Ending, now time.Time) action {
	pod, p := st.pod, st.proc
	if st.gone {
		return none
	}
	if k.Foreign != nil && p == nil && k.Foreign(nodeOf(pod)) {
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			return bindTo
		}
		return none
	}
	if p != nil && p.live() && e.Evict == ByEvictionAPI && !st.evicted && pod.DeletionTimestamp == nil && !now.Before(p.clock.Add(e.After)) {
		return evict // the API evicts, whether or not the node hears it
	}
	node := nodeOf(pod)
	if p != nil {
		node = p.node
	}
	if k.cuts[node] != nil {
		return none // the kubelet can neither hear nor write
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	switch {
	case p == nil && (terminal || st.final):
		st.final = true
		if pod.DeletionTimestamp != nil && !st.removed {
			return remove
		}
		return none
	case p == nil && pod.DeletionTimestamp != nil:
		if pod.Spec.NodeName != "" {
			return abandon
		}
		return none // never bound: the API server lets it go by itself
	case p == nil && e.Waiting != "":
		if reason, _ := e.waitingNow("", st.waiting, st.waitingSince, now); reason != st.waiting {
			return wait
		}
		return none
	case p == nil:
		return start
	case p.live():
		if !st.running && !k.EndOnly {
			return running
		}
		return none
	case !st.final:
		return report
	case pod.DeletionTimestamp != nil && !st.removed:
		return remove
	}
	return none
}

// act does a, and reports whether it was done.
func (k *Kubelet) act(ctx context.Context, st *podState, a action, pod *corev1.Pod, e Ending, now time.Time) bool {
	switch a {
	case bindTo:
		return k.bind(ctx, pod, nodeOf(pod)) == nil
	case start:
		node := nodeOf(pod)
		if !k.EndOnly {
			if err := k.bind(ctx, pod, node); err != nil {
				return false
			}
		}
		k.begin(st, node, now)
		if k.EndOnly {
			return true
		}
		return k.act(ctx, st, running, pod, e, now)
	case running:
		k.mu.Lock()
		started := st.proc.start
		k.mu.Unlock()
		if err := k.writeRunning(ctx, pod, started); err != nil {
			return false
		}
		k.mu.Lock()
		st.running = true
		k.mu.Unlock()
	case wait:
		if !k.EndOnly {
			if err := k.bind(ctx, pod, nodeOf(pod)); err != nil {
				return false
			}
		}
		k.mu.Lock()
		written, since := st.waiting, st.waitingSince
		k.mu.Unlock()
		reason, message := e.waitingNow(pod.Spec.Containers[0].Image, written, since, now)
		if err := k.writeWaiting(ctx, pod, reason, message); err != nil {
			return false
		}
		k.mu.Lock()
		if st.waiting == "" {
			st.waitingSince = now
		}
		st.waiting = reason
		k.mu.Unlock()
	case evict:
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
		if err := k.Client.SubResource("eviction").Create(ctx, pod, ev); err != nil && !apierrors.IsNotFound(err) {
			return false
		}
		k.mu.Lock()
		st.evicted = true
		k.mu.Unlock()
	case report:
		k.mu.Lock()
		p := *st.proc
		k.mu.Unlock()
		if err := k.writeEnded(ctx, pod, p.start, p.end, p.exit); err != nil {
			return false
		}
		k.mu.Lock()
		st.final = true
		k.mu.Unlock()
	case abandon:
		// What a kubelet reports of a container it never ran.
		x := exit{code: 137, reason: "ContainerStatusUnknown", message: "The container could not be located when the pod was terminated"}
		if err := k.writeEnded(ctx, pod, time.Time{}, now, x); err != nil {
			return false
		}
		k.mu.Lock()
		st.final = true
		k.mu.Unlock()
	case remove:
		opts := []client.DeleteOption{client.GracePeriodSeconds(0)}
		if uid := pod.UID; uid != "" {
			opts = append(opts, client.Preconditions{UID: &uid})
		}
		if err := k.Client.Delete(ctx, pod, opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false
		}
		k.mu.Lock()
		st.removed = true
		k.mu.Unlock()
	}
	return true
}

// bind binds the pod to node, as the scheduler would.
func (k *Kubelet) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	if pod.Spec.NodeName != "" {
		return nil
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := k.Client.SubResource("binding").Create(ctx, pod, b); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	pod.Spec.NodeName = node
	return nil
}

// writeRunning marks the pod Running since start. A status patch, as
// kubelets send: it needs no fresh resourceVersion after the binding.
func (k *Kubelet) writeRunning(ctx context.Context, pod *corev1.Pod, start time.Time) error {
	orig := pod.DeepCopy()
	t := metav1.NewTime(start)
	c := pod.Spec.Containers[0]
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &t
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Ready: true, Image: c.Image,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}}}
	return k.Client.Status().Patch(ctx, pod, client.StrategicMergeFrom(orig))
}

// writeWaiting leaves the pod Pending, its container waiting for reason.
func (k *Kubelet) writeWaiting(ctx context.Context, pod *corev1.Pod, reason, message string) error {
	orig := pod.DeepCopy()
	c := pod.Spec.Containers[0]
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	return k.Client.Status().Patch(ctx, pod, client.StrategicMergeFrom(orig))
}

// writeEnded writes the pod's terminal status: its container ran from start
// (zero: never) and ended at end, as x says.
func (k *Kubelet) writeEnded(ctx context.Context, pod *corev1.Pod, start, end time.Time, x exit) error {
	orig := pod.DeepCopy()
	pod.Status.Phase = corev1.PodFailed
	if x.code == 0 && x.podReason == "" && x.disruption == "" {
		pod.Status.Phase = corev1.PodSucceeded
	}
	pod.Status.Reason, pod.Status.Message = x.podReason, x.podMessage
	if x.disruption != "" {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: string(x.disruption),
			Message: x.disruptionMessage, LastTransitionTime: metav1.NewTime(end),
		})
	}
	reason := x.reason
	if reason == "" {
		reason = "Completed"
		if x.code != 0 {
			reason = "Error"
		}
	}
	var started metav1.Time
	if !start.IsZero() {
		started = metav1.NewTime(start)
	}
	c := pod.Spec.Containers[0]
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: x.code, Reason: reason, Message: x.message, StartedAt: started, FinishedAt: metav1.NewTime(end),
		}}}}
	return k.Client.Status().Patch(ctx, pod, client.StrategicMergeFrom(orig))
}
