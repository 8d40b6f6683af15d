package devicerig

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Every event the DeviceRig controller emits, as constructors. Reasons are stable.
type recorder struct{ events.EventRecorder }

func (r recorder) staleLeaseReleased(rig *farmv1.DeviceRig, run string) {
	r.Eventf(rig, nil, corev1.EventTypeWarning, farmv1.EventStaleLeaseReleased, "Release",
		"released the lease of run %s, which no longer exists", run)
}

// phase tells a change of the rig's health; NotReady and Offline are warnings.
func (r recorder) phase(rig *farmv1.DeviceRig, why string) {
	kind := corev1.EventTypeNormal
	if p := rig.Status.Phase; p == farmv1.RigNotReady || p == farmv1.RigOffline {
		kind = corev1.EventTypeWarning
	}
	r.Eventf(rig, nil, kind, farmv1.EventRigPhasePrefix+string(rig.Status.Phase), "Observe", "rig is %s: %s", rig.Status.Phase, why)
}
