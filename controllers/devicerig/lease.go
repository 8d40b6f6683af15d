package devicerig

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/lease"
)

// staleLease reports whether a rig's Lease names a run that is gone: no run
// of that name and UID exists, and no pod of it is alive. A cache that lags
// a brand-new run would call its Lease stale, so a miss in the cache is
// confirmed against the API server before anything is released.
func (r *Reconciler) staleLease(ctx context.Context, namespace, run string, uid types.UID) (bool, error) {
	var ar farmv1.AgentRun
	key := types.NamespacedName{Namespace: namespace, Name: run}
	if err := r.Get(ctx, key, &ar); err == nil && ar.UID == uid {
		return false, nil
	}
	switch err := r.APIReader.Get(ctx, key, &ar); {
	case err == nil && ar.UID == uid:
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{farmv1.LabelRun: run}); err != nil {
		return false, err
	}
	for i := range pods.Items {
		if p := pods.Items[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			return false, nil
		}
	}
	return true, nil
}

// holder reads the rig's Lease and says which run holds the rig ("" for
// none). A Lease whose run is gone, with no pod of it alive, is released on
// the way, with an Event.
func (r *Reconciler) holder(ctx context.Context, rig *farmv1.DeviceRig) (string, error) {
	l, err := lease.Get(ctx, r.Client, rig.Namespace, rig.Name)
	if err != nil || l == nil || !lease.IsRigLease(l) {
		return "", err
	}
	name, uid := lease.HolderRun(l)
	stale, err := r.staleLease(ctx, rig.Namespace, name, uid)
	if err != nil || !stale {
		return name, err
	}
	if err := lease.ReleaseStale(ctx, r.Client, l); err != nil {
		return "", err
	}
	recorder{r.Recorder}.staleLeaseReleased(rig, name)
	log.FromContext(ctx).V(1).Info("released a stale lease", "rig", rig.Name, "run", name, "reason", farmv1.EventStaleLeaseReleased)
	return "", nil
}
