package agentrun

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// observe reads the world the run lives in: its attempt pods (from the
// cache's index on the run label), the Lease it holds, and that rig.
func (s *step) observe(ctx context.Context) error {
	pods, err := s.r.podsOf(ctx, s.run)
	if err != nil {
		return err
	}
	s.pods = pods
	sort.Slice(s.pods, func(i, j int) bool { return s.pods[i].CreationTimestamp.Before(&s.pods[j].CreationTimestamp) })
	held, err := lease.HeldBy(ctx, s.r.Client, lease.HolderOf(s.run))
	if err != nil {
		return err
	}
	if len(held) > 0 {
		s.heldRig = held[0]
		var rig farmv1.DeviceRig
		err := s.r.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: s.heldRig}, &rig)
		switch {
		case err == nil:
			s.rig = &rig
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("get rig %s: %w", s.heldRig, err)
		}
	}
	return nil
}

// podsOf lists the run's attempt pods from the cache (through the run
// index), those the run controls.
func (r *Reconciler) podsOf(ctx context.Context, run *farmv1.AgentRun) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(run.Namespace), client.MatchingFields{podRunIndex: run.Name}); err != nil {
		return nil, fmt.Errorf("list attempt pods of run %s: %w", run.Name, err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; metav1.IsControlledBy(p, run) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// startedAt is when the run's first pod was created: as this manager noted
// it, or (after a restart) the pod's creation time.
func (s *step) startedAt(first *corev1.Pod) time.Time {
	if t := s.r.notes.podCreatedAt(client.ObjectKeyFromObject(s.run)); !t.IsZero() {
		return t
	}
	return first.CreationTimestamp.Time
}

// nodeOf tells what the pod's node can say for it: gone is true when the
// node object was deleted or an operator marked it out of service (the
// node.kubernetes.io/out-of-service taint); unreachable is true while the
// node is not Ready, so its kubelet cannot report what the pod does. A pod
// on an unreachable node counts as alive: the phone is on that node, and
// nothing else could use it anyway.
func (s *step) nodeOf(ctx context.Context, pod *corev1.Pod) (gone, unreachable bool) {
	if pod.Spec.NodeName == "" || terminal(pod) {
		return false, false
	}
	var node corev1.Node
	if err := s.r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, &node); err != nil {
		return apierrors.IsNotFound(err), false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true, false
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			if since := c.LastTransitionTime.Time; s.now.Sub(since) >= s.r.Config.NodeLostGrace {
				s.unreachable = fmt.Sprintf("node %s has not reported since %s", node.Name, since.UTC().Format(time.RFC3339))
			} else {
				s.wake(since.Add(s.r.Config.NodeLostGrace))
			}
			return false, true
		}
	}
	return false, false
}

// terminal reports whether the pod's containers have all ended for good.
func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podAttempt reads the attempt number and infrastructure retry of an attempt pod.
func podAttempt(pod *corev1.Pod) (n, retry int32) {
	a, _ := strconv.Atoi(pod.Labels[farmv1.LabelAttempt])
	r, _ := strconv.Atoi(pod.Annotations[farmv1.AnnotationRetry])
	return int32(a), int32(r)
}
