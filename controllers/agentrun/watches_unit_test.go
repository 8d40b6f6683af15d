package agentrun

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// A run's own status write, seen again in its watch event, wakes no
// reconcile unless one waits to see it; anyone else's write does, and so
// does one the manager made in another run's reconcile.
func TestOwnStatusWriteEchoWakesOnlyAWaitingReconcile(t *testing.T) {
	r := &Reconciler{}
	now := time.Now()
	before := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: "u1", ResourceVersion: "4"}}
	written := before.DeepCopy()
	written.ResourceVersion, written.Status.Phase = "5", farmv1.RunRunning
	r.notes.wrote(written, now)
	update := func(old, run *farmv1.AgentRun) bool {
		return r.runUpdateNews(event.UpdateEvent{ObjectOld: old, ObjectNew: run})
	}

	if update(before, written) {
		t.Fatal("the echo of the manager's own write woke the run")
	}
	other := written.DeepCopy()
	other.ResourceVersion, other.Status.Phase = "6", farmv1.RunQueued
	if !update(written, other) {
		t.Fatal("a later write by someone else did not wake the run")
	}
	recreated := written.DeepCopy()
	recreated.UID = "u2"
	if !update(before, recreated) {
		t.Fatal("a write to another run of the same name was taken for an echo")
	}

	// A reconcile that read the run before the write reached the cache
	// waits for the echo: it wakes the run.
	if !r.notes.behindOwnWrite(before, now) {
		t.Fatal("the cache at resource version 4 is not behind the write at 5")
	}
	if !update(before, written) {
		t.Fatal("the echo a reconcile waits for did not wake the run")
	}

	// A write made in another run's reconcile (a session's run marking a
	// run it collected) is news to the run it wrote.
	collected := written.DeepCopy()
	collected.ResourceVersion, collected.Status.CollectedInto = "9", "session"
	r.notes.wroteAnother(collected, now)
	if !update(written, collected) {
		t.Fatal("a write by another run's reconcile did not wake the run it wrote")
	}
}

// A loop's heartbeat (turn, tokens, note, tool, updatedAt) wakes no
// reconcile; an approval request, a steer delivered, a first progress, a
// new spec or annotation, or any other status change does.
func TestHeartbeatWakesNoReconcile(t *testing.T) {
	r := &Reconciler{}
	old := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: "u", ResourceVersion: "7", Generation: 1},
		Status: farmv1.AgentRunStatus{Phase: farmv1.RunRunning, Attempt: 1,
			Progress: &farmv1.RunProgress{Attempt: 1, Turn: 3, Tokens: 900, LastNote: "opened Clock", LastTool: "tap", UpdatedAt: "2026-12-06T01:00:00Z"}},
	}
	beat := func() *farmv1.AgentRun {
		run := old.DeepCopy()
		run.ResourceVersion = "8"
		p := run.Status.Progress
		p.Turn, p.Tokens, p.LastNote, p.LastTool, p.UpdatedAt = 4, 1200, "read the alarm", "peek", "2026-12-06T01:00:02Z"
		return run
	}
	if r.runUpdateNews(event.UpdateEvent{ObjectOld: old, ObjectNew: beat()}) {
		t.Fatal("a heartbeat woke the run")
	}
	if notHeartbeat.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: beat()}) {
		t.Fatal("a heartbeat woke the runs that follow the run (its follow-up's parent, the runs joined to its session)")
	}
	for what, change := range map[string]func(*farmv1.AgentRun){
		"an approval request": func(run *farmv1.AgentRun) {
			run.Status.Progress.Approval = &farmv1.ApprovalRequest{ID: "a1", Tool: "tap"}
		},
		"a steer delivered": func(run *farmv1.AgentRun) { run.Status.Progress.Steered = 1 },
		"a new phase":       func(run *farmv1.AgentRun) { run.Status.Phase = farmv1.RunSucceeded },
		"a new spec":        func(run *farmv1.AgentRun) { run.Generation = 2 },
		"an annotation": func(run *farmv1.AgentRun) {
			run.Annotations = map[string]string{contract.AnnotationApproval: "Approve/a1"}
		},
		"a deletion": func(run *farmv1.AgentRun) {
			run.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		},
	} {
		run := beat()
		change(run)
		if !r.runUpdateNews(event.UpdateEvent{ObjectOld: old, ObjectNew: run}) {
			t.Errorf("a heartbeat with %s did not wake the run", what)
		}
		if !notHeartbeat.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: run}) {
			t.Errorf("a heartbeat with %s did not wake the runs that follow the run", what)
		}
	}
	first := old.DeepCopy()
	first.Status.Progress = nil
	if !r.runUpdateNews(event.UpdateEvent{ObjectOld: first, ObjectNew: beat()}) {
		t.Error("the first progress of a run did not wake it")
	}
}

// A rig's update wakes its queue and holder when it changes what the queue
// decides by: spec, labels, deletion, or whether the rig can serve. Its
// passing from Ready to InUse and back (its Lease's event wakes the queue)
// and a probe's time do not.
func TestRigUpdatesThatWakeTheQueue(t *testing.T) {
	old := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig", Generation: 1, Labels: map[string]string{"pool": "ios"}},
		Status:     farmv1.DeviceRigStatus{Phase: farmv1.RigReady, LastProbeTime: &metav1.Time{Time: time.Unix(100, 0)}},
	}
	wakes := func(change func(*farmv1.DeviceRig)) bool {
		rig := old.DeepCopy()
		change(rig)
		return rigUpdateNews(event.UpdateEvent{ObjectOld: old, ObjectNew: rig})
	}
	for what, change := range map[string]func(*farmv1.DeviceRig){
		"InUse":          func(rig *farmv1.DeviceRig) { rig.Status.Phase = farmv1.RigInUse },
		"a probe's time": func(rig *farmv1.DeviceRig) { rig.Status.LastProbeTime = &metav1.Time{Time: time.Unix(400, 0)} },
		"the same phase": func(*farmv1.DeviceRig) {},
	} {
		if wakes(change) {
			t.Errorf("a rig update of %s woke its queue", what)
		}
	}
	for what, change := range map[string]func(*farmv1.DeviceRig){
		"NotReady":    func(rig *farmv1.DeviceRig) { rig.Status.Phase = farmv1.RigNotReady },
		"Offline":     func(rig *farmv1.DeviceRig) { rig.Status.Phase = farmv1.RigOffline },
		"a new spec":  func(rig *farmv1.DeviceRig) { rig.Generation = 2 },
		"a new label": func(rig *farmv1.DeviceRig) { rig.Labels = map[string]string{"pool": "android"} },
		"a deletion":  func(rig *farmv1.DeviceRig) { rig.DeletionTimestamp = &metav1.Time{Time: time.Now()} },
	} {
		if !wakes(change) {
			t.Errorf("a rig update of %s did not wake its queue", what)
		}
	}
	back := old.DeepCopy()
	back.Status.Phase = farmv1.RigNotReady
	if !rigUpdateNews(event.UpdateEvent{ObjectOld: back, ObjectNew: old}) {
		t.Error("a rig Ready again did not wake its queue")
	}
}
