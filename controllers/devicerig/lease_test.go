package devicerig

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// A Lease is stale only when the API server agrees its run is gone and no
// pod of it is alive: a cache that has not seen a brand-new run (or its pod)
// must not free the phone under it.
func TestStaleLeaseAsksTheAPIServer(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = farmv1.AddToScheme(scheme)
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "new", UID: "u1"}}
	livePod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "old-a1", Labels: map[string]string{farmv1.LabelRun: "old"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	endedPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "done-a1", Labels: map[string]string{farmv1.LabelRun: "done"}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	emptyCache := fake.NewClientBuilder().WithScheme(scheme).Build()
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(run, livePod, endedPod).Build()
	r := &Reconciler{Client: emptyCache, APIReader: api}

	for _, tc := range []struct {
		name, run string
		uid       string
		want      bool
	}{
		{"the run exists, the cache has not seen it", "new", "u1", false},
		{"a run of that name with another UID, no pod", "new", "u0", true},
		{"the run is gone but its pod still runs", "old", "u2", false},
		{"the run is gone and its pod ended", "done", "u3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stale, err := r.staleLease(context.Background(), "farm", tc.run, types.UID(tc.uid))
			if err != nil || stale != tc.want {
				t.Fatalf("staleLease(%s, %s) = %v, %v; want %v", tc.run, tc.uid, stale, err, tc.want)
			}
		})
	}
}
