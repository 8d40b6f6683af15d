package agentrun

import (
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// CacheOptions keeps the manager's cache to what is its own: with
// namespaces, those only (the run namespaces, --watch-namespaces); and of
// the pods, Leases and CronJobs there, only the ones the operator labels —
// attempt pods carry farm.clawfarm.dev/run, rig Leases /rig, its CronJobs
// /kind. What the controllers read around the cache goes to the API server.
func CacheOptions(namespaces []string) cache.Options {
	has := func(key string) cache.ByObject {
		sel, _ := labels.Parse(key) // a key alone: "has the label"
		return cache.ByObject{Label: sel}
	}
	o := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:           has(farmv1.LabelRun),
		&coordinationv1.Lease{}: has(farmv1.LabelRig),
		&batchv1.CronJob{}:      has(farmv1.LabelKind),
	}}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range namespaces {
			o.DefaultNamespaces[n] = cache.Config{}
		}
	}
	return o
}
