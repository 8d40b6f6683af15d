package main

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// clusterScoped are the resources of the manager's rules that have no
// namespace: a RoleBinding cannot grant them, so the chart's
// <release>-manager-cluster ClusterRole does.
var clusterScoped = map[string]bool{"nodes": true, "tokenreviews": true, "subjectaccessreviews": true}

// By default the manager reaches only the run namespaces and its own: it
// watches those (--watch-namespaces) and its rules are bound there by
// RoleBindings; cluster-wide it gets only the cluster-scoped rules, which
// are exactly those of config/rbac/role.yaml. manager.clusterWide puts the
// ClusterRoleBinding back.
func TestChartManagerReachesOnlyItsNamespaces(t *testing.T) {
	t.Parallel()
	objs := renderChart(t, "--set", "runs.namespaces={team-a,team-b}")
	if f := chartManagerFlags(t, managerDeployment(t, objs)); *f.watchNamespaces != "team-a,team-b" {
		t.Errorf("--watch-namespaces=%q, want the run namespaces", *f.watchNamespaces)
	}
	if find(objs, "ClusterRoleBinding", "", "t-clawfarm-manager") != nil {
		t.Error("the manager's rules are bound cluster-wide")
	}
	for _, ns := range []string{"team-a", "team-b", "farm"} {
		rb := find(objs, "RoleBinding", ns, "t-clawfarm-manager")
		if rb == nil || dig(rb, "roleRef", "name") != "t-clawfarm-manager" {
			t.Errorf("namespace %s: RoleBinding %v, want one to t-clawfarm-manager", ns, rb)
		}
	}
	b, err := os.ReadFile("../../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, r := range decodeAll(t, b)[0]["rules"].([]any) {
		res := dig(r, "resources").([]any)
		scoped := clusterScoped[res[0].(string)]
		for _, x := range res {
			if clusterScoped[x.(string)] != scoped {
				t.Fatalf("rule %v mixes namespaced and cluster-scoped resources", r)
			}
		}
		if scoped {
			want = append(want, r)
		}
	}
	cr := find(objs, "ClusterRole", "", "t-clawfarm-manager-cluster")
	if cr == nil || !reflect.DeepEqual(cr["rules"], want) {
		t.Errorf("t-clawfarm-manager-cluster's rules %v, want config/rbac/role.yaml's cluster-scoped ones %v (charts/clawfarm/files/cluster-role-rules.yaml)", cr["rules"], want)
	}
	if crb := find(objs, "ClusterRoleBinding", "", "t-clawfarm-manager-cluster"); crb == nil {
		t.Error("no ClusterRoleBinding for the cluster-scoped rules")
	}

	wide := renderChart(t, "--set", "manager.clusterWide=true")
	if f := chartManagerFlags(t, managerDeployment(t, wide)); *f.watchNamespaces != "" {
		t.Errorf("manager.clusterWide: --watch-namespaces=%q, want every namespace", *f.watchNamespaces)
	}
	if find(wide, "ClusterRoleBinding", "", "t-clawfarm-manager") == nil || find(wide, "RoleBinding", "farm", "t-clawfarm-manager") != nil {
		t.Error("manager.clusterWide: want the ClusterRoleBinding and no RoleBindings")
	}
}

// The manager caches only the run namespaces, and there only the pods,
// Leases and CronJobs it labels.
func TestCacheOptions(t *testing.T) {
	t.Parallel()
	f := newManagerFlags()
	if err := f.parse([]string{"--watch-namespaces=team-a, team-b"}); err != nil {
		t.Fatal(err)
	}
	o := f.cacheOptions()
	var ns []string
	for n := range o.DefaultNamespaces {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	if !slices.Equal(ns, []string{"team-a", "team-b"}) {
		t.Errorf("namespaces %v", ns)
	}
	mine := map[string]labels.Set{
		"pod":     {farmv1.LabelRun: "r", farmv1.LabelKind: "attempt"},
		"lease":   {farmv1.LabelRig: "rig", farmv1.LabelRun: "r"},
		"cronjob": {farmv1.LabelKind: farmv1.KindFollowUp},
	}
	for obj, by := range o.ByObject {
		var kind string
		switch obj.(type) {
		case *corev1.Pod:
			kind = "pod"
		case *coordinationv1.Lease:
			kind = "lease"
		case *batchv1.CronJob:
			kind = "cronjob"
		}
		if by.Label == nil || !by.Label.Matches(mine[kind]) || by.Label.Matches(labels.Set{"app": "other"}) {
			t.Errorf("%s cache selector %v: want the manager's own %ss only", kind, by.Label, kind)
		}
	}
	if len(o.ByObject) != 3 {
		t.Errorf("%d selected kinds, want pods, Leases and CronJobs", len(o.ByObject))
	}
	// Nothing reads managedFields: the cache keeps none, so its deep copies
	// do not copy them.
	l := &coordinationv1.Lease{}
	l.Name, l.ManagedFields = "rig", []metav1.ManagedFieldsEntry{{Manager: "clawfarm-manager", Operation: metav1.ManagedFieldsOperationUpdate}}
	if o.DefaultTransform == nil {
		t.Fatal("no DefaultTransform: the cache keeps every object's managedFields")
	}
	got, err := o.DefaultTransform(l)
	if err != nil || got.(*coordinationv1.Lease).ManagedFields != nil || got.(*coordinationv1.Lease).Name != "rig" {
		t.Errorf("the cache's transform of a Lease: %+v, %v; want it without managedFields, its name kept", got, err)
	}
	// Nor a Node's image list; its conditions, taints and cordon stay.
	n := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: corev1.TaintNodeOutOfService}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images: []corev1.ContainerImage{{Names: []string{"registry.example/loop:v1"}, SizeBytes: 1 << 20}}}}
	n.ManagedFields = l.ManagedFields
	if got, err := o.DefaultTransform(n); err != nil {
		t.Errorf("the cache's transform of a Node: %v", err)
	} else if node := got.(*corev1.Node); node.Status.Images != nil || node.ManagedFields != nil || len(node.Status.Conditions) != 1 || !node.Spec.Unschedulable || len(node.Spec.Taints) != 1 {
		t.Errorf("the cache's transform of a Node: %+v; want it without images and managedFields, its conditions, cordon and taints kept", node)
	}
	if err := newManagerFlags().parse([]string{"--watch-namespaces=Team_A"}); err == nil || !strings.Contains(err.Error(), "not a namespace name") {
		t.Errorf("a bad namespace: %v", err)
	}
	if o := newManagerFlags().cacheOptions(); o.DefaultNamespaces != nil {
		t.Errorf("without --watch-namespaces: %v, want every namespace", o.DefaultNamespaces)
	}
}
