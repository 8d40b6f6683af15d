package agentrun

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// world is what a reconcile read of the run's surroundings. The
// sub-reconcilers read it and never change it; Reconcile alone makes a new
// one when a decision changes what the run holds (a rig given back, taken).
type world struct {
	now time.Time
	// pods are the run's attempt pods, oldest first.
	pods []*corev1.Pod
	// nodes says, per pod name, what the node of each pod that still has
	// its outcome finalizer can say for it (nodeOf).
	nodes map[string]nodeView
	// unreachable says, when set, that a live pod's node has not reported
	// for longer than Config.NodeLostGrace.
	unreachable string
	// held is the rig whose Lease the run holds ("" for none); rig is that
	// DeviceRig, nil when it was deleted.
	held string
	rig  *farmv1.DeviceRig
	// stop says why the run must stop now, or nil (stopReason).
	stop *stopCause
}

// nodeView is what a pod's node can say for it (nodeOf).
type nodeView struct{ gone, unreachable bool }

// afterRelease is the world once releaseRig has been asked to give the rig
// back: without the rig if it went.
func (w world) afterRelease(released bool) world {
	if released {
		w.held, w.rig = "", nil
	}
	return w
}

// holding is the world once the run holds rig.
func (w world) holding(rig *farmv1.DeviceRig) world {
	w.held, w.rig = rig.Name, rig
	return w
}

// observe reads the world the run lives in: its attempt pods (from the
// cache's index on the run label) and their nodes, the Lease it holds, and
// that rig. It also returns when the world is next worth reading again on
// its own (a node's grace, the run's deadline).
func (r *Reconciler) observe(ctx context.Context, run *farmv1.AgentRun, now time.Time) (world, time.Time, error) {
	w := world{now: now, nodes: map[string]nodeView{}}
	var deadline time.Time
	w.stop, deadline = stopReason(run, now)
	pods, err := r.podsOf(ctx, run)
	if err != nil {
		return w, deadline, err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	w.pods = pods
	wake := deadline
	for _, pod := range pods {
		if !controllerutil.ContainsFinalizer(pod, farmv1.FinalizerOutcome) {
			continue
		}
		v, unreachable, graceEnds := r.nodeOf(ctx, pod, now)
		w.nodes[pod.Name] = v
		if unreachable != "" {
			w.unreachable = unreachable
		}
		wake = earliest(wake, graceEnds)
	}
	held, err := r.heldRigs(ctx, run, now)
	if err != nil {
		return w, wake, err
	}
	if len(held) > 0 {
		w.held = held[0]
		var rig farmv1.DeviceRig
		err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: w.held}, &rig)
		switch {
		case err == nil:
			w.rig = &rig
		case !apierrors.IsNotFound(err):
			return w, wake, fmt.Errorf("get rig %s: %w", w.held, err)
		}
	}
	return w, wake, nil
}

// heldRigs lists the rigs whose Leases the run holds, as the cache shows
// them; and, while the cache does not show one yet, the rig this manager
// noted it took or was handed (notes.hold), confirmed on the API server.
func (r *Reconciler) heldRigs(ctx context.Context, run *farmv1.AgentRun, now time.Time) ([]string, error) {
	held, err := lease.HeldBy(ctx, r.Client, lease.HolderOf(run))
	if err != nil {
		return nil, err
	}
	noted, _ := r.notes.heldNote(run, now)
	switch {
	case noted == "":
		return held, nil
	case slices.Contains(held, noted):
		r.notes.unhold(run, noted) // the cache shows it: the queue reads the Lease from here on
		return held, nil
	case len(held) > 0:
		return held, nil
	}
	l, err := lease.Get(ctx, r.APIReader, run.Namespace, noted)
	if err != nil {
		return nil, err
	}
	if l != nil && l.DeletionTimestamp == nil {
		if _, uid := lease.HolderRun(l); uid == run.UID {
			return []string{noted}, nil
		}
	}
	r.notes.unhold(run, noted)
	return nil, nil
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
func (r *Reconciler) startedAt(run *farmv1.AgentRun, first *corev1.Pod) time.Time {
	if t := r.notes.podCreatedAt(client.ObjectKeyFromObject(run)); !t.IsZero() {
		return t
	}
	return first.CreationTimestamp.Time
}

// nodeOf tells what the pod's node can say for it: gone is true when the
// node object was deleted or an operator marked it out of service (the
// node.kubernetes.io/out-of-service taint); unreachable is true while the
// node is not Ready, so its kubelet cannot report what the pod does. A pod
// on an unreachable node counts as alive: the phone is on that node, and
// nothing else could use it anyway. Past Config.NodeLostGrace, lost says so
// for the run's status; before it, graceEnds is when it will.
func (r *Reconciler) nodeOf(ctx context.Context, pod *corev1.Pod, now time.Time) (v nodeView, lost string, graceEnds time.Time) {
	if pod.Spec.NodeName == "" || terminal(pod) {
		return v, "", graceEnds
	}
	var node corev1.Node
	if err := r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, &node); err != nil {
		v.gone = apierrors.IsNotFound(err) // another error (the cache cannot fail otherwise) says nothing of the node
		return v, "", graceEnds
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			v.gone = true
			return v, "", graceEnds
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			v.unreachable = true
			if since := c.LastTransitionTime.Time; now.Sub(since) >= r.Config.NodeLostGrace {
				lost = fmt.Sprintf("node %s has not reported since %s", node.Name, since.UTC().Format(time.RFC3339))
			} else {
				graceEnds = since.Add(r.Config.NodeLostGrace)
			}
			return v, lost, graceEnds
		}
	}
	return v, "", graceEnds
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
