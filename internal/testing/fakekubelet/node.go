package fakekubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// partition is a node cut off from the API server.
type partition struct {
	unknownAt time.Time // when its Ready condition turns Unknown; zero: never, or done
}

// PartitionNode cuts node off from the API server, as a lost network does:
// its kubelet stops heartbeating, hears nothing more of its pods (no new
// pod starts there, a deletion sends no signal) and writes nothing for them,
// while the processes already running there go on by their scripts.
//
// The node's Ready condition turns Unknown (reason NodeStatusUnknown), as
// the node lifecycle controller writes once the node's grace period has
// passed without a heartbeat: at once when unknownAfter is 0, unknownAfter
// later (if still cut off) when positive, never when negative.
func (k *Kubelet) PartitionNode(ctx context.Context, node string, unknownAfter time.Duration) error {
	k.init()
	k.cut.Lock()
	k.mu.Lock()
	c := k.cuts[node]
	if c == nil {
		c = &partition{}
		k.cuts[node] = c
	}
	if unknownAfter > 0 {
		c.unknownAt = time.Now().Add(unknownAfter)
	}
	k.mu.Unlock()
	k.cut.Unlock()
	if unknownAfter != 0 {
		return nil
	}
	k.nodeMu.Lock()
	defer k.nodeMu.Unlock()
	return k.setReady(ctx, node, corev1.ConditionUnknown)
}

// HealNode brings node back: its Ready condition turns True, then its
// kubelet catches up with the API before it starts anything new. A process
// whose pod is gone is killed (SIGTERM, SIGKILL 2 s later, as a kubelet
// kills containers of pods it no longer finds); one whose pod was deleted
// meanwhile gets SIGTERM, and SIGKILL at the deletion's deadline or, if that
// has passed, 2 s later. Each pod's true state is written by the next poll:
// ended with its exit code and message if its process ended meanwhile,
// Running otherwise.
func (k *Kubelet) HealNode(ctx context.Context, node string) error {
	k.init()
	k.nodeMu.Lock()
	defer k.nodeMu.Unlock()
	if err := k.setReady(ctx, node, corev1.ConditionTrue); err != nil {
		return err
	}
	now := time.Now()
	k.mu.Lock()
	delete(k.cuts, node)
	var sts []*podState
	for _, st := range k.running {
		if st.proc.node == node {
			st.proc.signal(st, now)
			sts = append(sts, st)
		}
	}
	k.mu.Unlock()
	k.settle(now, sts)
	return nil
}

// flipDue turns Unknown the Ready condition of each node cut off past its
// unknownAfter.
func (k *Kubelet) flipDue(ctx context.Context, now time.Time) {
	k.mu.Lock()
	var due []string
	for node, c := range k.cuts {
		if !c.unknownAt.IsZero() && !now.Before(c.unknownAt) {
			due = append(due, node)
		}
	}
	k.mu.Unlock()
	for _, node := range due {
		k.nodeMu.Lock()
		k.mu.Lock()
		c := k.cuts[node]
		still := c != nil && !c.unknownAt.IsZero()
		k.mu.Unlock()
		if still && k.setReady(ctx, node, corev1.ConditionUnknown) == nil {
			k.mu.Lock()
			c.unknownAt = time.Time{}
			k.mu.Unlock()
		}
		k.nodeMu.Unlock()
	}
}

// setReady sets node's Ready condition: True as its kubelet posts it, or
// Unknown as the node lifecycle controller writes it.
func (k *Kubelet) setReady(ctx context.Context, node string, status corev1.ConditionStatus) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := k.Client.Get(ctx, types.NamespacedName{Name: node}, &n); err != nil {
			return err
		}
		now := metav1.Now()
		ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: now, LastTransitionTime: now,
			Reason: "KubeletReady", Message: "kubelet is posting ready status"}
		if status == corev1.ConditionUnknown {
			ready.Reason, ready.Message = "NodeStatusUnknown", "Kubelet stopped posting node status."
		}
		found := false
		for i, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady {
				continue
			}
			found = true
			if status == corev1.ConditionUnknown {
				ready.LastHeartbeatTime = c.LastHeartbeatTime // no heartbeat came
			}
			if c.Status == status {
				ready.LastTransitionTime = c.LastTransitionTime
			}
			n.Status.Conditions[i] = ready
		}
		if !found {
			n.Status.Conditions = append(n.Status.Conditions, ready)
		}
		return k.Client.Status().Update(ctx, &n)
	})
	if err != nil {
		return fmt.Errorf("set node %s Ready=%s: %w", node, status, err)
	}
	return nil
}

// PartitionedNodes is how many nodes are cut off now.
func (k *Kubelet) PartitionedNodes() int {
	k.init()
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.cuts)
}
