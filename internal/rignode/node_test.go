package rignode_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeRegistersWithLabelsTaintsCapacityAndLease(t *testing.T) {
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels["farm.clawfarm.dev/rig-host"] != "true" || n.Labels["kubernetes.io/hostname"] != nodeName || n.Labels["type"] != "virtual-kubelet" {
		t.Errorf("labels %v", n.Labels)
	}
	// NodeRestriction (on in every kubeadm-made cluster) refuses a node that
	// sets labels under kubernetes.io or k8s.io other than the kubelet's own.
	kubeletLabels := map[string]bool{"kubernetes.io/hostname": true, corev1.LabelOSStable: true, corev1.LabelArchStable: true,
		corev1.LabelInstanceTypeStable: true, corev1.LabelTopologyRegion: true, corev1.LabelTopologyZone: true}
	for k := range n.Labels {
		domain, _, _ := strings.Cut(k, "/")
		restricted := domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || domain == "k8s.io" || strings.HasSuffix(domain, ".k8s.io")
		if restricted && !kubeletLabels[k] && !strings.HasPrefix(k, "kubelet.kubernetes.io/") && !strings.HasPrefix(k, "node.kubernetes.io/") {
			t.Errorf("label %s: NodeRestriction refuses a node that sets it", k)
		}
	}
	// The API server adds node.kubernetes.io/not-ready on creation (the node
	// lifecycle controller, absent in envtest, removes it): look for ours.
	found := false
	for _, taint := range n.Spec.Taints {
		found = found || taint.Key == "farm.clawfarm.dev/rig" && taint.Value == "true" && taint.Effect == corev1.TaintEffectNoSchedule
	}
	if !found {
		t.Errorf("taints %v lack farm.clawfarm.dev/rig=true:NoSchedule", n.Spec.Taints)
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("pod capacity %s", q.String())
	}
	if _, ok := n.Status.Allocatable[corev1.ResourceMemory]; !ok {
		t.Errorf("no allocatable memory: %v", n.Status.Allocatable)
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(nodePort) {
		t.Errorf("kubelet port %d, want %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port, nodePort)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("node not Ready: %+v", n.Status.Conditions)
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Type != corev1.NodeInternalIP || n.Status.Addresses[0].Address != "127.0.0.1" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}

	// The lease is the heartbeat the node lifecycle controller reads; it is renewed.
	var lease *coordinationv1.Lease
	for wait := time.Now().Add(30 * time.Second); ; {
		lease, err = cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("node lease: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != nodeName || lease.Spec.RenewTime == nil {
		t.Fatalf("lease %+v", lease.Spec)
	}
	first := lease.Spec.RenewTime.Time
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.RenewTime.After(first) {
			return
		}
	}
	t.Fatalf("node lease not renewed since %s", first)
}
