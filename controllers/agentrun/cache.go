package agentrun

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// CacheOptions keeps the manager's cache to what is its own: with
// namespaces, those only (the run namespaces, --watch-namespaces); and of
// the pods, Leases and CronJobs there, only the ones the operator labels —
// attempt pods, rig Leases and model-account slot Leases carry
// farm.clawfarm.dev/run, its CronJobs /kind. With a shard (--shard, a selector on farm.clawfarm.dev/pool; nil or
// empty: no sharding), only the AgentRuns and DeviceRigs it matches, and of
// those pods, Leases and CronJobs too only the ones it matches: they carry
// their run's pool (farmv1.CarryPool), so another shard's objects are never
// cached, and so never reconciled or even enqueued. What the controllers
// read around the cache goes to the API server.
//
// The cache drops every object's managedFields: the operator never reads
// them, and they were half the cost of the deep copy each cached Get makes
// (a profile of bench-scale: the Leases its queue reads, one Get per rig).
// An update of an object without them leaves the server's as they are. It
// drops a Node's image list too (up to 50 images with their names on a real
// node, most of its size): the operator reads a node's conditions, taints
// and cordon, once per live attempt pod at every reconcile, and never
// writes a Node.
func CacheOptions(namespaces []string, shard labels.Selector) cache.Options {
	if shard != nil && shard.Empty() {
		shard = nil
	}
	has := func(key string) cache.ByObject {
		r, err := labels.NewRequirement(key, selection.Exists, nil) // "has the label"
		if err != nil {
			panic(err) // the keys are constants
		}
		sel := labels.NewSelector()
		if shard != nil {
			sel = shard.DeepCopySelector()
		}
		return cache.ByObject{Label: sel.Add(*r)}
	}
	o := cache.Options{DefaultTransform: stripUnread, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:           has(farmv1.LabelRun),
		&coordinationv1.Lease{}: has(farmv1.LabelRun), // rig Leases and model-account slots
		&batchv1.CronJob{}:      has(farmv1.LabelKind),
	}}
	if shard != nil {
		o.ByObject[&farmv1.AgentRun{}] = cache.ByObject{Label: shard}
		o.ByObject[&farmv1.DeviceRig{}] = cache.ByObject{Label: shard}
	}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range namespaces {
			o.DefaultNamespaces[n] = cache.Config{}
		}
	}
	return o
}

// stripManagedFields is controller-runtime's transform, made once: the
// cache calls stripUnread for every object it stores.
var stripManagedFields = cache.TransformStripManagedFields()

// stripUnread drops from a cached object what the operator never reads:
// managedFields, and a Node's image list.
func stripUnread(in any) (any, error) {
	out, err := stripManagedFields(in)
	if node, ok := out.(*corev1.Node); ok && err == nil {
		node.Status.Images = nil
	}
	return out, err
}

// ParseShard reads a shard selector (--shard): labels.Parse syntax, every
// requirement on farm.clawfarm.dev/pool, the one label the operator carries
// from a run to what it makes for it. Empty: no sharding (nil).
func ParseShard(s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, err
	}
	reqs, _ := sel.Requirements()
	if len(reqs) == 0 {
		return nil, nil
	}
	for _, r := range reqs {
		if r.Key() != farmv1.LabelPool {
			return nil, fmt.Errorf("requirement %q is on label %s: a shard selects by %s only, the label the operator puts on everything it makes for a run (e.g. %s in (a,b))",
				r.String(), r.Key(), farmv1.LabelPool, farmv1.LabelPool)
		}
	}
	return sel, nil
}
