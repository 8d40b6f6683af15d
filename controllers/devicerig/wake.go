package devicerig

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// Wake-ups (docs/wake-ups.md). A rig whose spec.wakeUp is set has its
// watch route read at each probe while it is Ready and free. The route is
// the rig gateway's: on the rig host, the gateway polls PhysiClaw's own
// watch route every second while no run holds the rig (its watchdog
// compares frames a second apart and takes the camera, so the poll belongs
// beside it) and keeps a wake until a session takes the rig. A wake becomes
// an AgentRun from the rig's template, unless the rig's last wake-up run
// has not finished (at most one at a time) or was made less than
// minInterval ago (the wake then waits: the gateway still has it).

// wakeNameRoom is how much of the rig's name a wake-up run's name keeps:
// the run's name is at most 48 characters, "-wake-" and five generated
// characters included.
const wakeNameRoom = 48 - len("-wake-") - 5

// defaultWakeTrigger opens a wake-up run whose template names no trigger.
const defaultWakeTrigger = "The phone woke while it was idle: look at what arrived and deal with it. " +
	"If nothing is new, end the session IDLE."

// lastWake is the rig's last wake-up as this manager made it, or as the
// status records it.
func (r *Reconciler) lastWake(rig *farmv1.DeviceRig) *farmv1.WakeUpStatus {
	last := rig.Status.WakeUp
	if v, ok := r.woke.Load(client.ObjectKeyFromObject(rig)); ok {
		if mine := v.(*farmv1.WakeUpStatus); last == nil || mine.Time.After(last.Time.Time) || mine.Count > last.Count {
			last = mine
		}
	}
	return last
}

// wakeDue says whether a rate-limited wake of the rig may start its run now.
func (r *Reconciler) wakeDue(key types.NamespacedName, now time.Time) bool {
	v, ok := r.wakeAt.Load(key)
	return ok && !v.(time.Time).IsZero() && !now.Before(v.(time.Time))
}

// wakeUp reads the rig's watch route and starts a wake-up run when the
// phone woke; it sets st.WakeUp when it did. It says when to look again
// sooner than the next probe (zero: at the next probe).
func (r *Reconciler) wakeUp(ctx context.Context, rig *farmv1.DeviceRig, now time.Time) time.Time {
	w := rig.Spec.WakeUp
	last := r.lastWake(rig)
	if last != nil && last.Run != "" {
		var run farmv1.AgentRun
		err := r.Get(ctx, types.NamespacedName{Namespace: rig.Namespace, Name: last.Run}, &run)
		if err == nil && !run.Status.Phase.Finished() {
			return time.Time{} // at most one wake-up run at a time
		}
	}
	wake, err := r.watch(ctx, rig)
	if err != nil {
		log.FromContext(ctx).V(1).Info("watch route did not answer", "rig", rig.Name, "error", err.Error())
		return time.Time{}
	}
	if !wake.Wake {
		return time.Time{}
	}
	if last != nil {
		if next := last.Time.Add(w.MinInterval()); now.Before(next) {
			return next // rate-limited: the gateway keeps the wake
		}
	}
	reason := clip(strings.TrimSpace(wake.Reason), 1024)
	if reason == "" {
		reason = "the phone's screen changed"
	}
	run := wakeRun(rig, reason)
	if err := r.Create(ctx, run); err != nil {
		recorder{r.Recorder}.wakeUpFailed(rig, reason, err)
		wakeUps.WithLabelValues(rig.Namespace, rig.Name, "failed").Inc()
		return time.Time{}
	}
	count := int64(1)
	if last != nil {
		count = last.Count + 1
	}
	st := &farmv1.WakeUpStatus{Time: metav1.NewTime(now), Reason: reason, Run: run.Name, Count: count}
	r.woke.Store(client.ObjectKeyFromObject(rig), st)
	rig.Status.WakeUp = st
	recorder{r.Recorder}.wokeUp(rig, reason, run.Name)
	wakeUps.WithLabelValues(rig.Namespace, rig.Name, "started").Inc()
	log.FromContext(ctx).Info("the phone woke; started a run", "rig", rig.Name, "reason", reason, "run", run.Name)
	return time.Time{}
}

// wakeRun is the AgentRun a wake with this reason starts on the rig.
func wakeRun(rig *farmv1.DeviceRig, reason string) *farmv1.AgentRun {
	t := rig.Spec.WakeUp.Template
	labels := map[string]string{}
	for k, v := range t.Metadata.Labels {
		labels[k] = v
	}
	labels[farmv1.LabelKind] = farmv1.KindWakeUp
	labels[farmv1.LabelRig] = rig.Name
	labels = farmv1.CarryPool(labels, rig.Labels)
	var annotations map[string]string
	if len(t.Metadata.Annotations) > 0 {
		annotations = map[string]string{}
		for k, v := range t.Metadata.Annotations {
			annotations[k] = v
		}
	}
	trigger := t.Spec.Trigger
	if strings.TrimSpace(trigger) == "" {
		trigger = defaultWakeTrigger
	}
	s := t.Spec
	run := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    rig.Namespace,
			GenerateName: clip(strings.TrimRight(rig.Name, "-."), wakeNameRoom) + "-wake-",
			Labels:       labels,
			Annotations:  annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: farmv1.GroupVersion.String(), Kind: "DeviceRig",
				Name: rig.Name, UID: rig.UID}},
		},
		Spec: farmv1.AgentRunSpec{
			RigRef:             &farmv1.RigReference{Name: rig.Name},
			Trigger:            trigger + "\n\nThe phone woke: " + reason + ".",
			QueueMode:          s.QueueMode,
			Model:              s.Model,
			Limits:             s.Limits,
			Skills:             s.Skills,
			Bootstrap:          s.Bootstrap,
			SystemPromptAppend: s.SystemPromptAppend,
			DenyTools:          s.DenyTools,
			FollowUp:           s.FollowUp,
			Pod:                s.Pod,

			TTLSecondsAfterFinished: s.TTLSecondsAfterFinished,
		},
	}
	return run
}

// watchURL is where the rig says it woke: spec.wakeUp.watchURL, else the
// health URL with its /api/status replaced by /api/phone/watch (on a rig
// gateway, the gateway's route for the rig), else /api/phone/watch on the
// endpoint's host.
func watchURL(rig *farmv1.DeviceRig) string {
	if u := rig.Spec.WakeUp.WatchURL; u != "" {
		return u
	}
	if h := healthURL(rig); strings.HasSuffix(h, contract.RigStatusPath) {
		return strings.TrimSuffix(h, contract.RigStatusPath) + contract.RigWatchPath
	}
	u, err := url.Parse(rig.Spec.Endpoint.URL)
	if err != nil {
		return rig.Spec.Endpoint.URL
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: contract.RigWatchPath}).String()
}

// watch asks the rig's watch route, with the probe's client and its limits.
func (r *Reconciler) watch(ctx context.Context, rig *farmv1.DeviceRig) (contract.RigWake, error) {
	var wake contract.RigWake
	ctx, cancel := context.WithTimeout(ctx, r.Config.ProbeTimeout)
	defer cancel()
	u := watchURL(rig)
	if err := sameHost(u, rig.Spec.Endpoint.URL); err != nil {
		return wake, fmt.Errorf("watch URL %q: %w", u, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return wake, fmt.Errorf("watch URL %q: %w", u, err)
	}
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return wake, err
	}
	defer resp.Body.Close()
	return contract.ReadRigWake(resp, u)
}

func (r recorder) wokeUp(rig *farmv1.DeviceRig, reason, run string) {
	r.Eventf(rig, nil, corev1.EventTypeNormal, farmv1.EventWokeUp, "WakeUp", "the phone woke (%s); started run %s", reason, run)
}

func (r recorder) wakeUpFailed(rig *farmv1.DeviceRig, reason string, err error) {
	what := err.Error()
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		what = "spec.wakeUp.template makes no valid AgentRun: " + what
	}
	r.Eventf(rig, nil, corev1.EventTypeWarning, farmv1.EventWakeUpFailed, "WakeUp", "the phone woke (%s) but no run was started: %s", reason, what)
}
