package devicerig

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
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

// healthy: a rig is usable when the rig server says it is ready, with its arm
// and camera connected (docs/rig-contract.md, "Health route"); calibrated and
// origin_pinned are the Calibrated condition's. bridge gates nothing: it is
// false whenever the phone's bridge page is in the background, during every
// task too. layout_learned is recorded, not required.
func healthy(h *farmv1.RigHealth) bool {
	return h.Arm && h.Camera && h.Ready
}

// notSetUp says what a person must do for a rig whose health is not
// healthy: the first of arm, camera, the set-up steps it has not done, and
// the rig's own ready.
func notSetUp(h *farmv1.RigHealth) string {
	switch {
	case !h.Arm:
		return "the rig reports no stylus arm (arm=false): connect the arm and run the rig's set-up (/setup)"
	case !h.Camera:
		return "the rig reports no camera (camera=false): connect the camera and run the rig's set-up (/setup)"
	}
	for _, s := range contract.SetUpSteps {
		if !slices.Contains(h.StepsDone, s.Key) {
			return fmt.Sprintf("set-up step %s is not done: %s on the rig's /setup page (done: %s)", s.Key, s.Todo, doneList(h.StepsDone))
		}
	}
	return "the rig has not declared itself ready (ready=false) though every set-up step is done: finish the set-up on its /setup page, or restart its server with --warm-start"
}

func doneList(steps []string) string {
	if len(steps) == 0 {
		return "none"
	}
	return strings.Join(steps, ", ")
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
	case st.Health != nil && !healthy(st.Health):
		return farmv1.ReasonNotSetUp
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
		return notSetUp(h)
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
