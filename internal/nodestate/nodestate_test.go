package nodestate

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// A node's heartbeats wake nothing; what the operator reads of the node does.
func TestHeartbeatsAreNotChanges(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.Now()}}}}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		wake   bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
			n.Status.Images = []corev1.ContainerImage{{Names: []string{"loop"}}}
			n.ResourceVersion = "2"
		}, false},
		{"not ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"ready again, later", func(n *corev1.Node) {
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(time.Hour))
		}, true},
		{"ready message", func(n *corev1.Node) { n.Status.Conditions[0].Message = "PLEG is not healthy" }, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"tainted", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute}}
		}, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := Changed.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.wake {
			t.Errorf("%s: passed on %v, want %v", tc.name, got, tc.wake)
		}
	}
	if !Changed.Create(event.CreateEvent{Object: base}) || !Changed.Delete(event.DeleteEvent{Object: base}) {
		t.Error("a node's creation and deletion must pass")
	}
}
