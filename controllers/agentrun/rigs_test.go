package agentrun_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

func TestTwoRunsForOneRigRunOneAfterTheOther(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	first, second := newRun(ns, "first", "rig"), newRun(ns, "second", "rig")
	firstMayEnd := &atomic.Bool{} // the first session runs until the second is seen queued
	scripts.set(ns, "first", func(*corev1.Pod) fakekubelet.Ending {
		if firstMayEnd.Load() {
			return ends(contract.Done, true, "1", 0)
		}
		return fakekubelet.Ending{Hang: true}
	})
	create(t, first)
	waitPhase(t, ns, "first", farmv1.RunRunning)
	create(t, second)
	queued := waitPhase(t, ns, "second", farmv1.RunQueued)
	if c := condition(queued, farmv1.ConditionRigLeased); c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonRigBusy {
		t.Fatalf("RigLeased while queued: %+v", c)
	}
	firstMayEnd.Store(true)
	done := waitPhase(t, ns, "second", farmv1.RunSucceeded)
	firstDone := getRun(t, ns, "first")
	if !firstDone.Status.Attempts[0].FinishTime.Time.Before(done.Status.Attempts[0].StartTime.Time.Add(time.Second)) {
		t.Fatalf("second started before first finished")
	}
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("exclusivity violated: %v", v)
	}
}

// A rig given up while runs wait for it goes straight to the oldest of them:
// the Lease changes holder in one write and is never absent, and once nobody
// waits it is deleted.
func TestReleasedRigGoesStraightToTheNextRun(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	// Each run's pod runs until the test lets it end.
	gates := map[string]*atomic.Bool{}
	for _, name := range []string{"a", "b", "c", "d"} {
		gate := &atomic.Bool{}
		gates[name] = gate
		done := ends(contract.Done, true, name, 0)
		scripts.set(ns, name, func(*corev1.Pod) fakekubelet.Ending {
			if gate.Load() {
				return done
			}
			return fakekubelet.Ending{Hang: true}
		})
	}
	create(t, newRun(ns, "a", "rig"))
	waitPhase(t, ns, "a", farmv1.RunRunning)
	lease := getLease(t, ns, "rig")
	// The queue orders runs by creationTimestamp, which has one-second
	// resolution, then by name: b, c and d are created in that order, so b is
	// the oldest whether or not a second passes between them.
	create(t, newRun(ns, "b", "rig"))
	cancelled := newRun(ns, "c", "rig")
	cancelled.Spec.Cancel = true // a cancelled run never takes the rig
	create(t, cancelled)
	create(t, newRun(ns, "d", "rig"))
	waitPhase(t, ns, "c", farmv1.RunCancelled)
	waitPhase(t, ns, "d", farmv1.RunQueued)

	for i, step := range []struct{ from, to string }{{"a", "b"}, {"b", "d"}} {
		gates[step.from].Store(true)
		run := waitPhase(t, ns, step.to, farmv1.RunRunning)
		l := getLease(t, ns, "rig")
		if l.UID != lease.UID {
			t.Fatalf("run %s: the Lease was deleted and re-created (uid %s, was %s)", step.to, l.UID, lease.UID)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != string(run.UID) || l.Labels[farmv1.LabelRun] != step.to ||
			l.Labels[farmv1.LabelRunUID] != string(run.UID) {
			t.Fatalf("run %s runs, but the Lease names %v / %v", step.to, l.Spec.HolderIdentity, l.Labels)
		}
		if l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != int32(i+1) {
			t.Fatalf("run %s: leaseTransitions %v, want %d", step.to, l.Spec.LeaseTransitions, i+1)
		}
		prev := waitPhase(t, ns, step.from, farmv1.RunSucceeded)
		if c := condition(prev, farmv1.ConditionRigLeased); c == nil || c.Reason != farmv1.ReasonReleased ||
			!strings.Contains(c.Message, "released to run "+step.to) {
			t.Fatalf("%s's RigLeased condition does not say where the rig went: %+v", step.from, c)
		}
	}
	if c := getRun(t, ns, "c"); len(c.Status.Attempts) != 0 {
		t.Fatalf("the cancelled run ran: %+v", c.Status.Attempts)
	}
	gates["d"].Store(true)
	waitPhase(t, ns, "d", farmv1.RunSucceeded)
	eventually(t, "the Lease deleted once nobody waits", func() bool { return leaseHolder(t, ns, "rig") == "" })
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("exclusivity violated: %v", v)
	}
}

func TestUnreadyRigHoldsItsQueue(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	health.Set(ns+"-rig", false)
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	// The test reads the API server; the manager reads its cache, which may
	// still show the rig Ready for a moment (under the race detector, a long
	// one). The rule under test is the queue's, not the cache's lag.
	time.Sleep(time.Second)
	create(t, newRun(ns, "patient", "rig"))
	queued := waitPhase(t, ns, "patient", farmv1.RunQueued)
	if c := condition(queued, farmv1.ConditionRigLeased); c.Reason != farmv1.ReasonRigNotReady {
		t.Fatalf("RigLeased %+v", c)
	}
	time.Sleep(500 * time.Millisecond)
	if p := getRun(t, ns, "patient").Status.Phase; p != farmv1.RunQueued {
		t.Fatalf("run left the queue while its rig was not ready: %s", p)
	}
	health.Set(ns+"-rig", true)
	waitPhase(t, ns, "patient", farmv1.RunSucceeded)
}

func TestSelectorPicksAReadyFreeRig(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "a", map[string]string{"pool": "ios"})
	makeRig(t, ns, "b", map[string]string{"pool": "ios"})
	makeRig(t, ns, "c", map[string]string{"pool": "android"})
	rig := &farmv1.DeviceRig{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "a"}, rig); err != nil {
		t.Fatal(err)
	}
	// A patch, as `kubectl patch` sends: the rig controller writes status meanwhile.
	patch := client.MergeFrom(rig.DeepCopy())
	rig.Spec.Unschedulable = true
	if err := k8s.Patch(context.Background(), rig, patch); err != nil {
		t.Fatal(err)
	}
	waitRig(t, ns, "a", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigMaintenance })
	run := newRun(ns, "sel", "")
	run.Spec.RigRef, run.Spec.RigSelector = nil, &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "ios"}}
	create(t, run)
	done := waitPhase(t, ns, "sel", farmv1.RunSucceeded)
	if done.Status.Rig != "b" {
		t.Fatalf("ran on %q, want b (a is in maintenance, c does not match)", done.Status.Rig)
	}
	none := newRun(ns, "nomatch", "")
	none.Spec.RigRef, none.Spec.RigSelector = nil, &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "windows"}}
	create(t, none)
	q := waitPhase(t, ns, "nomatch", farmv1.RunQueued)
	if c := condition(q, farmv1.ConditionRigLeased); c.Reason != farmv1.ReasonNoMatchingRig {
		t.Fatalf("RigLeased %+v", c)
	}
	// A wait that someone must end gets an Event, unlike one behind a busy rig.
	eventually(t, "a Queued Event for the run no rig matches", func() bool {
		return slices.Contains(runEvents(t, ns)["nomatch"], farmv1.ReasonQueued)
	})
}

func TestQueueTimeoutAndTTL(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	run := newRun(ns, "lonely", "missing-rig")
	run.Spec.Limits.QueueTimeoutSeconds = ptr.To[int32](1)
	run.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
	create(t, run)
	// Queued says why (the rig does not exist); with a 1 s timeout a slow
	// poll may only see the run once it has failed, and the condition stays.
	waitRun(t, ns, "lonely", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionRigLeased)
		return c != nil && c.Reason == farmv1.ReasonRigNotFound && (r.Status.Phase == farmv1.RunQueued || r.Status.Phase == farmv1.RunFailed)
	})
	failed := waitPhase(t, ns, "lonely", farmv1.RunFailed)
	if c := condition(failed, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonQueueTimeout {
		t.Fatalf("Succeeded %+v", c)
	}
	eventually(t, "run deleted after its TTL", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "lonely"}, &farmv1.AgentRun{})
		return apierrors.IsNotFound(err)
	})
}

func getLease(t *testing.T, ns, rig string) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rig}, &l); err != nil {
		t.Fatalf("lease of rig %s: %v", rig, err)
	}
	return &l
}

// A run keeps a rig that is not Ready only for a while: past the grace (the
// suite's is 3 s) it gives the phone back, queues again, and a selector run
// takes another Ready rig for its fresh attempt.
func TestRunGivesBackARigThatStaysNotReady(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "a", map[string]string{"pool": "ios"})
	makeRig(t, ns, "b", map[string]string{"pool": "ios"})
	run := newRun(ns, "move", "")
	run.Spec.RigRef, run.Spec.RigSelector = nil, &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "ios"}}
	scripts.set(ns, "move", byPod(map[string]fakekubelet.Ending{"move-a1": ends(contract.Stuck, true, "the phone froze", 3*time.Second)},
		ends(contract.Done, true, "done", 50*time.Millisecond)))
	create(t, run)
	waitRun(t, ns, "move", func(r *farmv1.AgentRun) bool { return r.Status.Phase == farmv1.RunRunning && r.Status.Rig == "a" })
	health.Set(ns+"-a", false) // rig a goes NotReady while attempt 1 runs, and stays so
	waitRig(t, ns, "a", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	done := waitPhase(t, ns, "move", farmv1.RunSucceeded)
	last := done.Status.Attempts[len(done.Status.Attempts)-1]
	if last.Pod != "move-a2" || done.Status.Rig != "b" {
		t.Fatalf("attempt 2 ran as %s on rig %q, want move-a2 on b (a stayed NotReady)", last.Pod, done.Status.Rig)
	}
	if h := leaseHolder(t, ns, "a"); h != "" {
		t.Fatalf("rig a is still held by %q", h)
	}
}
