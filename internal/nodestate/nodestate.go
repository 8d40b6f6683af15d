// Package nodestate tells which changes of a Node matter to the operator:
// whether it is Ready (and why not), cordoned, or tainted.
package nodestate

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Changed lets through a node's creation and deletion, and an update only
// when its Ready condition (status, message, transition time),
// spec.unschedulable or its taints changed. A kubelet's heartbeats, image
// lists and resource reports pass nothing on: on a farm of many rigs per
// node, each would otherwise wake every rig and run on that node.
var Changed = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*corev1.Node)
	cur, okNew := e.ObjectNew.(*corev1.Node)
	if !okOld || !okNew {
		return true
	}
	return ready(old) != ready(cur) || old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints)
}}

type readyState struct {
	status, message string
	since           int64
}

func ready(n *corev1.Node) readyState {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return readyState{string(c.Status), c.Message, c.LastTransitionTime.Unix()}
		}
	}
	return readyState{}
}
