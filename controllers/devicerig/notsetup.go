package devicerig

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
)

// A loop whose rig answered "hardware not set up" ends its attempt at once
// with exit reason rig_not_ready (docs/rig-contract.md, "A rig that is not
// set up"). The rig's status may still say Ready: its last probe came before.
// So the rig is probed at once, whatever its probe interval, and the time of
// that probe is recorded even when the answer changes nothing: the run that
// holds the rig waits for a probe after its attempt ended before it starts
// the next one.

// probeAsked says from when a probe answers the run holding the rig, when
// that run found it not set up after the rig's last probe, and zero when no
// run asks. The probe is made then (attempt.ProbeAnswersFrom: a probe in the
// second the attempt finished would not count).
func (r *Reconciler) probeAsked(ctx context.Context, rig *farmv1.DeviceRig, holder string, lastProbe time.Time) time.Time {
	if holder == "" {
		return time.Time{}
	}
	var run farmv1.AgentRun
	if err := r.Get(ctx, types.NamespacedName{Namespace: rig.Namespace, Name: holder}, &run); err != nil {
		return time.Time{}
	}
	at := attempt.RigNotSetUpAt(&run)
	if at.IsZero() || run.Status.Rig != rig.Name {
		return time.Time{}
	}
	if from := attempt.ProbeAnswersFrom(at); lastProbe.Before(from) {
		return from
	}
	return time.Time{}
}

// notSetUpEvents wakes a rig when the run holding it records an attempt that
// ended with the rig not set up.
func notSetUpEvents() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*farmv1.AgentRun)
			run, okNew := e.ObjectNew.(*farmv1.AgentRun)
			if !okOld || !okNew || run.Status.Rig == "" {
				return
			}
			if at := attempt.RigNotSetUpAt(run); !at.IsZero() && !at.Equal(attempt.RigNotSetUpAt(old)) {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: run.Namespace, Name: run.Status.Rig}})
			}
		},
	}
}
