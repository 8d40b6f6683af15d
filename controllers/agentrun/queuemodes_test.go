package agentrun_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/lease"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// modeRun is a run of the given queue mode with a trigger of its own.
func modeRun(ns, name, rig string, mode farmv1.QueueMode) *farmv1.AgentRun {
	r := newRun(ns, name, rig)
	r.Spec.QueueMode = mode
	r.Spec.Trigger = "task of " + name
	return r
}

// gated scripts a run's pods to run until the gate opens, then end as e.
func gated(ns, name string, e fakekubelet.Ending) *atomic.Bool {
	gate := &atomic.Bool{}
	scripts.set(ns, name, func(*corev1.Pod) fakekubelet.Ending {
		if gate.Load() {
			return e
		}
		return fakekubelet.Ending{Hang: true}
	})
	return gate
}

// triggers records the opening message of every pod the scripts see.
type triggers struct {
	mu sync.Mutex
	m  map[string]string
}

func (tr *triggers) script(e fakekubelet.Ending) func(*corev1.Pod) fakekubelet.Ending {
	return func(p *corev1.Pod) fakekubelet.Ending {
		tr.mu.Lock()
		tr.m[p.Name] = envOf(p, contract.SettingTrigger.Env)
		tr.mu.Unlock()
		return e
	}
}

func (tr *triggers) of(pod string) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.m[pod]
}

func joinedCond(run *farmv1.AgentRun) *metav1.Condition {
	return condition(run, farmv1.ConditionJoined)
}

// Five collect runs waiting for one busy rig become one session when the
// rig is handed to the oldest: one pod, whose opening message numbers every
// trigger with its run's name; the other four name that run in
// status.collectedInto, never get a pod, and end with its outcome.
func TestFiveCollectRunsForABusyRigBecomeOneSession(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	busy := gated(ns, "busy", ends(contract.Done, true, "busy done", 0))
	create(t, newRun(ns, "busy", "rig"))
	waitPhase(t, ns, "busy", farmv1.RunRunning)

	tr := &triggers{m: map[string]string{}}
	scripts.set(ns, "c1", tr.script(ends(contract.Done, true, "all five tasks done", 100*time.Millisecond)))
	names := []string{"c1", "c2", "c3", "c4", "c5"}
	for _, n := range names {
		create(t, modeRun(ns, n, "rig", farmv1.QueueModeCollect))
	}
	// A collect run with another model does not join: its session differs.
	other := modeRun(ns, "c6", "rig", farmv1.QueueModeCollect)
	other.Spec.Model.Name = "sim/other"
	create(t, other)
	for _, n := range append(names, "c6") {
		waitPhase(t, ns, n, farmv1.RunQueued)
	}
	busy.Store(true)

	session := waitPhase(t, ns, "c1", farmv1.RunSucceeded)
	var joined []string
	for _, j := range session.Status.Joined {
		if j.Mode != farmv1.QueueModeCollect || j.Trigger != "task of "+j.Name {
			t.Fatalf("joined entry %+v", j)
		}
		joined = append(joined, j.Name)
	}
	if got := strings.Join(joined, " "); got != "c2 c3 c4 c5" {
		t.Fatalf("c1's session joined %q, want c2 c3 c4 c5 in queue order", got)
	}
	opening := tr.of("c1-a1")
	for i, n := range names {
		if want := fmt.Sprintf("%d. (run %s) task of %s", i+1, n, n); !strings.Contains(opening, want) {
			t.Fatalf("the opening message lacks %q:\n%s", want, opening)
		}
	}
	if strings.Contains(opening, "c6") {
		t.Fatalf("a run with another model joined:\n%s", opening)
	}
	for _, n := range names[1:] {
		run := waitPhase(t, ns, n, farmv1.RunSucceeded)
		if run.Status.CollectedInto != "c1" || run.Status.Rig != "rig" || run.Status.Sentinel != "DONE" || run.Status.Recap != "all five tasks done" {
			t.Fatalf("run %s: collectedInto %q, sentinel %q, recap %q", n, run.Status.CollectedInto, run.Status.Sentinel, run.Status.Recap)
		}
		if c := joinedCond(run); c == nil || c.Status != metav1.ConditionTrue || c.Reason != farmv1.ReasonCollected || !strings.Contains(c.Message, "run c1") {
			t.Fatalf("run %s Joined condition %+v", n, c)
		}
		if c := condition(run, farmv1.ConditionSucceeded); c == nil || c.Reason != farmv1.ReasonDone || !strings.Contains(c.Message, "run c1") {
			t.Fatalf("run %s Succeeded condition %+v", n, c)
		}
		wantFinished(t, run, metav1.ConditionTrue, string(farmv1.RunSucceeded))
		if p := podsOf(t, ns, n); len(p) != 0 {
			t.Fatalf("collected run %s got %d pods of its own", n, len(p))
		}
		if len(run.Status.Attempts) != 0 {
			t.Fatalf("collected run %s records attempts %+v", n, run.Status.Attempts)
		}
	}
	if p := podsOf(t, ns, "c1"); len(p) != 1 {
		t.Fatalf("the session has %d pods, want 1", len(p))
	}
	if ev := runEvents(t, ns)["c2"]; !strings.Contains(strings.Join(ev, " "), farmv1.ReasonCollected) {
		t.Fatalf("c2's events do not say it was collected: %v", ev)
	}
	// The run with another model gets a session of its own, after.
	if c6 := waitPhase(t, ns, "c6", farmv1.RunSucceeded); c6.Status.CollectedInto != "" || len(podsOf(t, ns, "c6")) != 1 {
		t.Fatalf("c6: collectedInto %q, pods %d", c6.Status.CollectedInto, len(podsOf(t, ns, "c6")))
	}
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("exclusivity violated: %v", v)
	}
}

// A steer run for a rig whose session runs is appended to the session's
// status.joined at once (the loop reads it at its next turn) and ends with
// the session's outcome, with no pod of its own.
func TestSteerRunJoinsTheRunningSession(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	holder := gated(ns, "holder", ends(contract.Done, true, "did both", 0))
	create(t, newRun(ns, "holder", "rig"))
	waitPhase(t, ns, "holder", farmv1.RunRunning)
	eventually(t, "the holder's loop running", func() bool {
		p := podsOf(t, ns, "holder")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	create(t, modeRun(ns, "steer", "rig", farmv1.QueueModeSteer))
	s := waitRun(t, ns, "steer", func(r *farmv1.AgentRun) bool { return r.Status.SteeredInto == "holder" })
	if s.Status.Phase != farmv1.RunRunning {
		t.Fatalf("steered run phase %s", s.Status.Phase)
	}
	if c := joinedCond(s); c == nil || c.Reason != farmv1.ReasonSteered || !strings.Contains(c.Message, "run holder") {
		t.Fatalf("Joined condition %+v", c)
	}
	h := waitRun(t, ns, "holder", func(r *farmv1.AgentRun) bool { return len(r.Status.Joined) == 1 })
	if j := h.Status.Joined[0]; j.Name != "steer" || j.Mode != farmv1.QueueModeSteer || j.Trigger != "task of steer" || j.Attempt != 1 {
		t.Fatalf("the holder's joined entry %+v", j)
	}
	// The loop delivers it and says so in its progress, as cmd/loop does.
	patchStatus(t, ns, "holder", `{"status":{"progress":{"attempt":1,"turn":3,"steered":1}}}`)
	holder.Store(true)
	done := waitPhase(t, ns, "steer", farmv1.RunSucceeded)
	if done.Status.Sentinel != "DONE" || done.Status.Recap != "did both" || done.Status.SteeredInto != "holder" {
		t.Fatalf("steer run status %+v", done.Status)
	}
	if p := podsOf(t, ns, "steer"); len(p) != 0 {
		t.Fatalf("the steer run got %d pods of its own", len(p))
	}
}

// A steer run that queued while its rig had no running session joins the
// session as soon as one runs there, without waiting for its turn.
func TestQueuedSteerRunJoinsASessionOnceItRuns(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	setMaintenance(t, ns, "rig", true)
	holder := gated(ns, "a-holder", ends(contract.Done, true, "did both", 0))
	create(t, newRun(ns, "a-holder", "rig"))
	create(t, modeRun(ns, "b-steer", "rig", farmv1.QueueModeSteer))
	waitPhase(t, ns, "a-holder", farmv1.RunQueued)
	waitPhase(t, ns, "b-steer", farmv1.RunQueued)
	// Out of maintenance: the holder takes the rig at once (it is InUse, not Ready, after).
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`))
	if err := k8s.Patch(context.Background(), &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rig"}}, patch); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "a-holder", farmv1.RunRunning)
	s := waitRun(t, ns, "b-steer", func(r *farmv1.AgentRun) bool { return r.Status.SteeredInto == "a-holder" })
	if s.Status.Phase != farmv1.RunRunning || s.Status.Rig != "rig" {
		t.Fatalf("steer run: phase %s rig %q", s.Status.Phase, s.Status.Rig)
	}
	patchStatus(t, ns, "a-holder", `{"status":{"progress":{"attempt":1,"turn":1,"steered":1}}}`)
	holder.Store(true)
	if done := waitPhase(t, ns, "b-steer", farmv1.RunSucceeded); done.Status.Recap != "did both" || len(podsOf(t, ns, "b-steer")) != 0 {
		t.Fatalf("steer run: recap %q, pods %d", done.Status.Recap, len(podsOf(t, ns, "b-steer")))
	}
}

// A steer run whose session ended before its loop read the message (the
// loop's count says so) goes back to the queue as a plain run and gets a
// session of its own.
func TestSteerRunWhoseSessionEndedFirstQueuesAgain(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	holder := gated(ns, "holder", ends(contract.Done, true, "holder only", 0))
	create(t, newRun(ns, "holder", "rig"))
	waitPhase(t, ns, "holder", farmv1.RunRunning)
	eventually(t, "the holder's loop running", func() bool {
		p := podsOf(t, ns, "holder")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	scripts.set(ns, "steer", byPod(nil, ends(contract.Done, true, "steer alone", 50*time.Millisecond)))
	create(t, modeRun(ns, "steer", "rig", farmv1.QueueModeSteer))
	waitRun(t, ns, "holder", func(r *farmv1.AgentRun) bool { return len(r.Status.Joined) == 1 })
	holder.Store(true) // ends with no steer message delivered
	waitPhase(t, ns, "holder", farmv1.RunSucceeded)
	s := waitPhase(t, ns, "steer", farmv1.RunSucceeded)
	if s.Status.SteeredInto != "" || s.Status.Recap != "steer alone" || len(podsOf(t, ns, "steer")) != 1 {
		t.Fatalf("steer run: steeredInto %q recap %q pods %d", s.Status.SteeredInto, s.Status.Recap, len(podsOf(t, ns, "steer")))
	}
	if c := joinedCond(s); c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonSteerUndelivered {
		t.Fatalf("Joined condition %+v", c)
	}
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("exclusivity violated: %v", v)
	}
}

// Queue runs keep FIFO among collect and steer runs: each starts in the
// order it was created, one session after the other; the collect run that
// takes the rig takes the later collect run along, and the steer run joins
// the session running when it came.
func TestMixedModesKeepFIFOForQueueRuns(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	first := gated(ns, "a0", ends(contract.Done, true, "a0", 0))
	create(t, newRun(ns, "a0", "rig"))
	waitPhase(t, ns, "a0", farmv1.RunRunning)
	eventually(t, "a0's loop running", func() bool {
		p := podsOf(t, ns, "a0")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	// The queue orders runs by creationTimestamp, which has one-second
	// resolution, then by name: the runs are created in the order of their
	// names, so that order is the queue's whether or not a second passes.
	order := []struct {
		name string
		mode farmv1.QueueMode
	}{{"b-q1", farmv1.QueueModeQueue}, {"c-c1", farmv1.QueueModeCollect}, {"d-q2", farmv1.QueueModeQueue},
		{"e-c2", farmv1.QueueModeCollect}, {"f-s1", farmv1.QueueModeSteer}, {"g-q3", farmv1.QueueModeQueue}}
	var mu sync.Mutex
	var started []string // the order the kubelet first saw each session's pod
	seen := map[string]bool{}
	for _, o := range order {
		name := o.name
		scripts.set(ns, name, func(p *corev1.Pod) fakekubelet.Ending {
			mu.Lock()
			defer mu.Unlock()
			if !seen[p.Name] {
				seen[p.Name] = true
				started = append(started, name)
			}
			return ends(contract.Done, true, name, 100*time.Millisecond)
		})
		create(t, modeRun(ns, name, "rig", o.mode))
	}
	waitRun(t, ns, "f-s1", func(r *farmv1.AgentRun) bool { return r.Status.SteeredInto == "a0" })
	for _, n := range []string{"b-q1", "c-c1", "d-q2", "e-c2", "g-q3"} {
		waitPhase(t, ns, n, farmv1.RunQueued)
	}
	patchStatus(t, ns, "a0", `{"status":{"progress":{"attempt":1,"turn":2,"steered":1}}}`)
	first.Store(true)
	for _, n := range []string{"b-q1", "c-c1", "d-q2", "g-q3"} {
		if run := waitPhase(t, ns, n, farmv1.RunSucceeded); len(run.Status.Attempts) != 1 {
			t.Fatalf("%s: attempts %+v", n, run.Status.Attempts)
		}
	}
	mu.Lock()
	got := strings.Join(started, " ")
	mu.Unlock()
	if got != "b-q1 c-c1 d-q2 g-q3" {
		t.Fatalf("sessions started in the order %q, want b-q1 c-c1 d-q2 g-q3", got)
	}
	if c2 := waitPhase(t, ns, "e-c2", farmv1.RunSucceeded); c2.Status.CollectedInto != "c-c1" {
		t.Fatalf("e-c2 collected into %q, want c-c1", c2.Status.CollectedInto)
	}
	if s1 := waitPhase(t, ns, "f-s1", farmv1.RunSucceeded); s1.Status.SteeredInto != "a0" || len(podsOf(t, ns, "f-s1")) != 0 {
		t.Fatalf("f-s1 steered into %q with %d pods", s1.Status.SteeredInto, len(podsOf(t, ns, "f-s1")))
	}
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("exclusivity violated: %v", v)
	}
}

// A manager that stops between the writes of a collection loses nothing and
// runs nothing twice: with the session's joined list written but the
// collected run not yet marked, or marked but no pod made yet, the next
// manager marks what is left, makes the one pod with every trigger, and the
// collected run ends with the session, never alone.
func TestCollectSurvivesAManagerStopBetweenItsWrites(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig-a", nil)
	makeRig(t, ns, "rig-b", nil)
	tr := &triggers{m: map[string]string{}}
	stopMgr()
	<-mgrDone
	restarted := false
	defer func() {
		if !restarted {
			stopMgr, mgrDone = startManager()
		}
	}()
	ctx := context.Background()
	for _, c := range []struct {
		rig, session, joiner string
		marked               bool
	}{{"rig-a", "sa", "ja", false}, {"rig-b", "sb", "jb", true}} {
		scripts.set(ns, c.session, tr.script(ends(contract.Done, true, "both of "+c.session, 50*time.Millisecond)))
		s, j := modeRun(ns, c.session, c.rig, farmv1.QueueModeCollect), modeRun(ns, c.joiner, c.rig, farmv1.QueueModeCollect)
		create(t, s)
		create(t, j)
		// What the stopped manager had done: the session's run holds the
		// rig and lists the joiner (and, for rig-b, marked it).
		if err := leaseFor(ctx, c.rig, s); err != nil {
			t.Fatal(err)
		}
		s.Status.Phase = farmv1.RunQueued
		inProgress(s)
		s.Status.Joined = []farmv1.JoinedRun{{Name: c.joiner, Mode: farmv1.QueueModeCollect, Trigger: j.Spec.Trigger, Attempt: 1}}
		if err := k8s.Status().Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		if c.marked {
			j.Status.Phase, j.Status.CollectedInto = farmv1.RunRunning, c.session
			inProgress(j)
			if err := k8s.Status().Update(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
	}
	stopMgr, mgrDone = startManager()
	restarted = true
	for _, c := range []struct{ session, joiner string }{{"sa", "ja"}, {"sb", "jb"}} {
		waitPhase(t, ns, c.session, farmv1.RunSucceeded)
		j := waitPhase(t, ns, c.joiner, farmv1.RunSucceeded)
		if j.Status.CollectedInto != c.session || j.Status.Recap != "both of "+c.session || len(podsOf(t, ns, c.joiner)) != 0 {
			t.Fatalf("%s: collectedInto %q recap %q pods %d", c.joiner, j.Status.CollectedInto, j.Status.Recap, len(podsOf(t, ns, c.joiner)))
		}
		opening := tr.of(c.session + "-a1")
		if !strings.Contains(opening, "1. (run "+c.session+")") || !strings.Contains(opening, "2. (run "+c.joiner+") task of "+c.joiner) {
			t.Fatalf("%s's opening message:\n%s", c.session, opening)
		}
	}
}

// inProgress gives a status written by hand the Finished condition every
// status write of the manager carries.
func inProgress(run *farmv1.AgentRun) {
	run.Status.ObservedGeneration = run.Generation
	conditions.False(&run.Status.Conditions, run.Generation, farmv1.ConditionFinished, farmv1.ReasonInProgress, "the run is "+string(run.Status.Phase))
}

// leaseFor takes the rig's Lease for run, as the manager does.
func leaseFor(ctx context.Context, rig string, run *farmv1.AgentRun) error {
	res, err := lease.Acquire(ctx, k8s, rig, lease.HolderOf(run))
	if err == nil && !res.Acquired {
		err = fmt.Errorf("rig %s is held by %s", rig, res.HeldBy)
	}
	return err
}

func patchStatus(t *testing.T, ns, name, patch string) {
	t.Helper()
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8s.Status().Patch(context.Background(), run, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// A collected run cancelled while its session runs ends Cancelled alone:
// the session goes on, and its outcome does not change the cancelled run.
func TestCancelledCollectedRunEndsAlone(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	busy := gated(ns, "busy", ends(contract.Done, true, "busy done", 0))
	create(t, newRun(ns, "busy", "rig"))
	waitPhase(t, ns, "busy", farmv1.RunRunning)
	session := gated(ns, "c1", ends(contract.Done, true, "c1 done", 0))
	create(t, modeRun(ns, "c1", "rig", farmv1.QueueModeCollect))
	create(t, modeRun(ns, "c2", "rig", farmv1.QueueModeCollect))
	waitPhase(t, ns, "c2", farmv1.RunQueued)
	busy.Store(true)
	waitRun(t, ns, "c2", func(r *farmv1.AgentRun) bool { return r.Status.CollectedInto == "c1" })
	waitPhase(t, ns, "c1", farmv1.RunRunning)
	cancel(t, ns, "c2")
	c2 := waitPhase(t, ns, "c2", farmv1.RunCancelled)
	if c1 := getRun(t, ns, "c1"); c1.Status.Phase != farmv1.RunRunning {
		t.Fatalf("the session ended with the cancelled run: %s", c1.Status.Phase)
	}
	session.Store(true)
	waitPhase(t, ns, "c1", farmv1.RunSucceeded)
	time.Sleep(500 * time.Millisecond) // the session's end reaches its followers
	if after := getRun(t, ns, "c2"); after.Status.Phase != farmv1.RunCancelled || after.Status.Sentinel != c2.Status.Sentinel {
		t.Fatalf("the cancelled run took the session's outcome: %s %q", after.Status.Phase, after.Status.Sentinel)
	}
}

// A manager that stops between a steer run's two writes — the run marked
// steeredInto, the holder not yet listing it — loses nothing: the next
// manager appends it while the session runs, and the run ends with it.
func TestSteerSurvivesAManagerStopBetweenItsWrites(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	holder := gated(ns, "holder", ends(contract.Done, true, "did both", 0))
	create(t, newRun(ns, "holder", "rig"))
	waitPhase(t, ns, "holder", farmv1.RunRunning)
	eventually(t, "the holder's loop running", func() bool {
		p := podsOf(t, ns, "holder")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	stopMgr()
	<-mgrDone
	restarted := false
	defer func() {
		if !restarted {
			stopMgr, mgrDone = startManager()
		}
	}()
	s := modeRun(ns, "steer", "rig", farmv1.QueueModeSteer)
	create(t, s)
	s.Status.Phase, s.Status.SteeredInto = farmv1.RunRunning, "holder"
	inProgress(s)
	if err := k8s.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	stopMgr, mgrDone = startManager()
	restarted = true
	h := waitRun(t, ns, "holder", func(r *farmv1.AgentRun) bool { return len(r.Status.Joined) == 1 })
	if j := h.Status.Joined[0]; j.Name != "steer" || j.Mode != farmv1.QueueModeSteer {
		t.Fatalf("joined %+v", j)
	}
	patchStatus(t, ns, "holder", `{"status":{"progress":{"attempt":1,"turn":3,"steered":1}}}`)
	holder.Store(true)
	if done := waitPhase(t, ns, "steer", farmv1.RunSucceeded); done.Status.Recap != "did both" || len(podsOf(t, ns, "steer")) != 0 {
		t.Fatalf("steer run: recap %q, pods %d", done.Status.Recap, len(podsOf(t, ns, "steer")))
	}
}

// A steer run whose session ends with WAIT ends with it, and names the
// session's follow-up as where its task goes on: the follow-up's trigger
// carries the steer message too.
func TestSteerRunOfAWaitingSessionNamesItsFollowUp(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Wait, Retryable: true, Recap: "asked Ana for the code", ExitReason: contract.ReasonEndTurn,
		FollowUp: &contract.FollowUp{AfterMinutes: 20, Context: "read Ana's reply"}}
	b, _ := m.Encode()
	holder := gated(ns, "holder", fakekubelet.Ending{ExitCode: 10, Message: string(b)})
	create(t, newRun(ns, "holder", "rig"))
	eventually(t, "the holder's loop running", func() bool {
		p := podsOf(t, ns, "holder")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	create(t, modeRun(ns, "steer", "rig", farmv1.QueueModeSteer))
	waitRun(t, ns, "holder", func(r *farmv1.AgentRun) bool { return len(r.Status.Joined) == 1 })
	patchStatus(t, ns, "holder", `{"status":{"progress":{"attempt":1,"turn":3,"steered":1}}}`)
	holder.Store(true)

	waitPhase(t, ns, "steer", farmv1.RunWaiting)
	if s := getRun(t, ns, "steer"); s.Status.FollowUp != nil {
		t.Fatalf("a waiting steer run records the session's follow-up %+v before it exists", s.Status.FollowUp)
	}
	var cj batchv1.CronJob
	eventually(t, "CronJob holder-fu", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "holder-fu"}, &cj) == nil
	})
	req, err := followup.DecodeRequest(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(req.Run.Spec.Trigger, "task of steer") {
		t.Fatalf("the session's follow-up does not carry the steer message:\n%s", req.Run.Spec.Trigger)
	}
	scripts.set(ns, "holder-f1", byPod(nil, ends(contract.Done, true, "got the code", 50*time.Millisecond)))
	if _, err := followup.Create(context.Background(), k8s, req, ""); err != nil {
		t.Fatal(err)
	}
	s := waitPhase(t, ns, "steer", farmv1.RunSucceeded)
	if s.Status.Sentinel != "WAIT" || s.Status.FollowUp == nil || s.Status.FollowUp.Run != "holder-f1" || s.Status.FollowUp.CronJob != "" {
		t.Fatalf("steer run: sentinel %q, followUp %+v; want WAIT and follow-up run holder-f1 without the session's CronJob",
			s.Status.Sentinel, s.Status.FollowUp)
	}
	if c := condition(s, farmv1.ConditionFollowUpScheduled); c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != farmv1.ReasonFollowUpCreated || !strings.Contains(c.Message, "holder-f1") {
		t.Fatalf("steer run FollowUpScheduled %+v", c)
	}
	waitPhase(t, ns, "holder-f1", farmv1.RunSucceeded)
}
