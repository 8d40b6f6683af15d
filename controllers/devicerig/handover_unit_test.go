package devicerig

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// A hand-over alone (InUse before and after, another run, nothing else)
// waits out HandOverRecordInterval since the last write; anything else is
// written at once.
func TestHandOverWaitsOnlyForAHandOver(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "ns", Name: "rig"}
	inUse := func(run string) *farmv1.DeviceRigStatus {
		return &farmv1.DeviceRigStatus{Phase: farmv1.RigInUse, CurrentRun: run, Health: &farmv1.RigHealth{Arm: true},
			Conditions: []metav1.Condition{{Type: farmv1.ConditionReady, Status: metav1.ConditionTrue, Reason: farmv1.ReasonRigReady, Message: "node ready, endpoint reachable, rig healthy"}}}
	}
	otherHealth := inUse("b")
	otherHealth.Health.Arm = false
	ready := inUse("")
	ready.Phase = farmv1.RigReady
	for _, c := range []struct {
		name     string
		interval time.Duration
		wroteAgo time.Duration // 0: never written by this manager
		before   *farmv1.DeviceRigStatus
		after    *farmv1.DeviceRigStatus
		wantWait time.Duration
	}{
		{"a hand-over 2 s after the last write", 0, 2 * time.Second, inUse("a"), inUse("b"), 8 * time.Second},
		{"a hand-over past the interval", 0, 11 * time.Second, inUse("a"), inUse("b"), -time.Second},
		{"a hand-over with a 1 s interval", time.Second, 500 * time.Millisecond, inUse("a"), inUse("b"), 500 * time.Millisecond},
		{"a manager that never wrote the rig", 0, 0, inUse("a"), inUse("b"), 0},
		{"intervals turned off", -1, 2 * time.Second, inUse("a"), inUse("b"), 0},
		{"the health moved too", 0, 2 * time.Second, inUse("a"), otherHealth, 0},
		{"the rig came free", 0, 2 * time.Second, inUse("a"), ready, 0},
		{"the rig was taken", 0, 2 * time.Second, ready, inUse("b"), 0},
		{"the same run", 0, 2 * time.Second, inUse("a"), inUse("a"), 0},
	} {
		r := &Reconciler{Config: Config{HandOverRecordInterval: c.interval}}
		if c.wroteAgo > 0 {
			r.written.Store(key, now.Add(-c.wroteAgo))
		}
		got := r.handOverWait(key, c.before, c.after, now)
		if (c.wantWait > 0) != (got > 0) || (c.wantWait > 0 && got != c.wantWait) {
			t.Errorf("%s: wait %v, want %v", c.name, got, max(c.wantWait, 0))
		}
	}
}
