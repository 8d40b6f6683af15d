package devicerig

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// phase is the rig's phase from its conditions, and InUse while holder
// (the run its Lease names, "" for none) holds it.
func (r *Reconciler) phase(rig *farmv1.DeviceRig, holder string) farmv1.RigPhase {
	st := &rig.Status
	switch {
	case rig.Spec.Unschedulable:
		return farmv1.RigMaintenance
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionNodeReady):
		if c := conditions.Get(st.Conditions, farmv1.ConditionNodeReady); c != nil && c.Reason == farmv1.ReasonNodeCordoned {
			return farmv1.RigNotReady // the node runs, and the sessions on it go on: only new ones wait
		}
		return farmv1.RigOffline
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionEndpointReachable),
		!conditions.IsTrue(st.Conditions, farmv1.ConditionCalibrated),
		st.Health == nil || !healthy(st.Health):
		return farmv1.RigNotReady
	case holder != "":
		return farmv1.RigInUse
	}
	return farmv1.RigReady
}

// healthy: a rig is usable only when arm, camera, bridge, calibrated,
// origin_pinned and ready are all true (docs/rig-contract.md); layout_learned
// is recorded in the status but not required.
func healthy(h *farmv1.RigHealth) bool {
	return h.Arm && h.Camera && h.Bridge && h.Calibrated && h.OriginPinned && h.Ready
}

func readyReason(rig *farmv1.DeviceRig) string {
	st := &rig.Status
	switch {
	case rig.Spec.Unschedulable:
		return farmv1.ReasonMaintenance
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionNodeReady):
		return conditions.Get(st.Conditions, farmv1.ConditionNodeReady).Reason
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionEndpointReachable):
		return farmv1.ReasonProbeFailed
	case !conditions.IsTrue(st.Conditions, farmv1.ConditionCalibrated):
		return farmv1.ReasonNotCalibrated
	}
	return farmv1.ReasonHealthNotReady
}

func readyMessage(rig *farmv1.DeviceRig, holder string) string {
	st := &rig.Status
	if rig.Spec.Unschedulable {
		return "spec.unschedulable is true (maintenance)"
	}
	for _, t := range []string{farmv1.ConditionNodeReady, farmv1.ConditionEndpointReachable, farmv1.ConditionCalibrated} {
		if c := conditions.Get(st.Conditions, t); c != nil && c.Status != metav1.ConditionTrue {
			return c.Message
		}
	}
	if h := st.Health; h != nil && !healthy(h) {
		return fmt.Sprintf("health: arm=%v camera=%v bridge=%v calibrated=%v origin_pinned=%v ready=%v",
			h.Arm, h.Camera, h.Bridge, h.Calibrated, h.OriginPinned, h.Ready)
	}
	if holder != "" {
		return "in use by run " + holder
	}
	return "ready"
}

func status(ok bool) metav1.ConditionStatus {
	if ok {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

func due(last *metav1.Time, now time.Time, every time.Duration) bool {
	return last == nil || !now.Before(last.Add(every))
}

// health folds InUse into Ready: a rig in use is a healthy rig.
func health(p farmv1.RigPhase) farmv1.RigPhase {
	if p == farmv1.RigInUse {
		return farmv1.RigReady
	}
	return p
}
