package devicerig

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func (r *Reconciler) nodeState(ctx context.Context, name string) (bool, string, string) {
	var node corev1.Node
	if err := r.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return false, farmv1.ReasonNodeNotFound, fmt.Sprintf("node %s does not exist", name)
		}
		return false, farmv1.ReasonUnknown, err.Error()
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status != corev1.ConditionTrue {
			return false, farmv1.ReasonNodeNotReady, fmt.Sprintf("node %s is not Ready: %s", name, c.Message)
		}
		if why := cordoned(&node); why != "" {
			return false, farmv1.ReasonNodeCordoned, fmt.Sprintf("node %s is Ready but %s: no new session starts on it", name, why)
		}
		return true, farmv1.ReasonNodeReady, fmt.Sprintf("node %s is Ready", name)
	}
	return false, farmv1.ReasonNodeNotReady, fmt.Sprintf("node %s reports no Ready condition", name)
}

// cordoned says why a Ready node takes no new sessions: it is cordoned
// (kubectl cordon or drain), or it carries a NoExecute taint other than the
// rig taint loop pods tolerate. "" when it takes them.
func cordoned(node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return "cordoned (spec.unschedulable; kubectl uncordon ends it)"
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && t.Key != farmv1.TaintRig {
			return fmt.Sprintf("tainted %s:NoExecute", t.Key)
		}
	}
	return ""
}
