package agentrun_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// Every row of the sentinel table of DESIGN.md, end to end on the API server.
func TestSentinelTable(t *testing.T) {
	crash := fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 137, Reason: "OOMKilled"}
	cases := []struct {
		name     string
		script   func(*corev1.Pod) fakekubelet.Ending
		phase    farmv1.RunPhase
		reason   string
		sentinel string
		attempts int
		counted  int
	}{
		{"done", byPod(nil, ends(contract.Done, true, "timer set", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 1, 1},
		{"idle", byPod(nil, ends(contract.Idle, true, "nothing new", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonIdle, "IDLE", 1, 1},
		{"fail", byPod(nil, ends(contract.Fail, true, "sold out", 50*time.Millisecond)), farmv1.RunFailed, farmv1.ReasonTaskFailed, "FAIL", 1, 1},
		{"budget", byPod(nil, endsFor(contract.Stuck, contract.ReasonBudgetExhausted, "out of time")), farmv1.RunFailed, farmv1.ReasonBudgetExhausted, "STUCK", 1, 1},
		{"key-refused", byPod(nil, endsFor(contract.Stuck, contract.ReasonFatalError, "the provider refused the API key (401)")),
			farmv1.RunFailed, farmv1.ReasonNotRetryable, "STUCK", 1, 1},
		{"badconfig", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 2}), farmv1.RunFailed, farmv1.ReasonInvalidConfig, "FAIL", 1, 1},
		{"stuck-then-done", byPod(map[string]fakekubelet.Ending{"stuck-then-done-a1": ends(contract.Stuck, true, "lost", 50*time.Millisecond)},
			ends(contract.Done, true, "done on 2", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2},
		{"stuck-thrice", byPod(nil, ends(contract.Stuck, true, "lost again", 50*time.Millisecond)), farmv1.RunFailed, farmv1.ReasonAttemptsExhausted, "STUCK", 3, 3},
		{"oom-counts", byPod(map[string]fakekubelet.Ending{"oom-counts-a1": crash}, ends(contract.Done, true, "ok", 50*time.Millisecond)),
			farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2},
		{"infra-free", byPod(map[string]fakekubelet.Ending{"infra-free-a1": {After: 50 * time.Millisecond, ExitCode: 143, Disruption: true}},
			ends(contract.Done, true, "ok", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 1},
		{"evicted-free", byPod(map[string]fakekubelet.Ending{"evicted-free-a1": {After: 50 * time.Millisecond, ExitCode: 137, PodReason: "Evicted"}},
			ends(contract.Done, true, "ok", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 1},
		{"mismatch-code-wins", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 1,
			Message: `{"sentinel":"DONE","recap":"lies","exitReason":"end_turn","retryable":true}`}), farmv1.RunFailed, farmv1.ReasonTaskFailed, "FAIL", 1, 1},
	}
	ns := namespace(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			makeRig(t, ns, "rig-"+c.name, nil)
			scripts.set(ns, c.name, c.script)
			create(t, newRun(ns, c.name, "rig-"+c.name))
			run := waitRun(t, ns, c.name, func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
			if run.Status.Phase != c.phase {
				t.Fatalf("phase %s, want %s (%+v)", run.Status.Phase, c.phase, run.Status.Conditions)
			}
			succ := condition(run, farmv1.ConditionSucceeded)
			if succ == nil || succ.Reason != c.reason || succ.ObservedGeneration != run.Generation {
				t.Fatalf("Succeeded condition %+v, want reason %s at generation %d", succ, c.reason, run.Generation)
			}
			if want := map[bool]metav1.ConditionStatus{true: "True", false: "False"}[c.phase == farmv1.RunSucceeded]; succ.Status != want {
				t.Fatalf("Succeeded is %s, want %s", succ.Status, want)
			}
			if run.Status.Sentinel != c.sentinel {
				t.Fatalf("sentinel %q, want %q", run.Status.Sentinel, c.sentinel)
			}
			if len(run.Status.Attempts) != c.attempts {
				t.Fatalf("%d attempt records, want %d: %+v", len(run.Status.Attempts), c.attempts, run.Status.Attempts)
			}
			counted := 0
			for _, a := range run.Status.Attempts {
				if a.Counted {
					counted++
				}
			}
			if counted != c.counted {
				t.Fatalf("%d counted attempts, want %d: %+v", counted, c.counted, run.Status.Attempts)
			}
			// The rig is released once the pods are done, and the pods keep no finalizer.
			eventually(t, "lease release", func() bool { return leaseHolder(t, ns, "rig-"+c.name) == "" })
			// The finalizer goes right after the outcome is written (the Lease may go first).
			eventually(t, "pods without finalizers", func() bool {
				for _, p := range podsOf(t, ns, c.name) {
					if len(p.Finalizers) != 0 {
						return false
					}
				}
				return true
			})
		})
	}
}

func TestInfraRetryResumesAndIsCapped(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "evict", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 143, Disruption: true}))
	run := newRun(ns, "evict", "rig")
	run.Spec.Limits.MaxInfraRetries = ptr.To[int32](2)
	create(t, run)
	got := waitPhase(t, ns, "evict", farmv1.RunFailed)
	if r := condition(got, farmv1.ConditionSucceeded).Reason; r != farmv1.ReasonInfraExhausted {
		t.Fatalf("reason %s, want %s", r, farmv1.ReasonInfraExhausted)
	}
	var names []string
	for _, a := range got.Status.Attempts {
		names = append(names, a.Pod)
		if a.Counted || a.Outcome != farmv1.OutcomeInfrastructure {
			t.Fatalf("an infrastructure failure was counted: %+v", a)
		}
	}
	if want := "evict-a1,evict-a1-r1,evict-a1-r2"; strings.Join(names, ",") != want {
		t.Fatalf("pods %v, want %s", names, want)
	}
	var pod corev1.Pod
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "evict-a1-r1"}, &pod); err != nil {
		t.Fatal(err)
	}
	if envOf(&pod, "CLAWFARM_RESUME") != "true" || envOf(&pod, "CLAWFARM_ATTEMPT") != "1" {
		t.Fatalf("an infrastructure retry must resume attempt 1: resume=%q attempt=%q", envOf(&pod, "CLAWFARM_RESUME"), envOf(&pod, "CLAWFARM_ATTEMPT"))
	}
}

func TestAttemptPodShape(t *testing.T) {
	ns := namespace(t)
	rig := makeRig(t, ns, "rig", nil)
	scripts.set(ns, "shape", byPod(nil, fakekubelet.Ending{Hang: true}))
	run := newRun(ns, "shape", "rig")
	run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "key"}
	run.Spec.Skills = []farmv1.SkillSource{{ConfigMapName: "shopping"}}
	run.Spec.DenyTools = []string{"force_quit"}
	create(t, run)
	waitPhase(t, ns, "shape", farmv1.RunRunning)
	var pod corev1.Pod
	eventually(t, "pod shape-a1 bound", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "shape-a1"}, &pod) == nil && pod.Spec.NodeName != ""
	})
	got := getRun(t, ns, "shape")
	if ref := metav1.GetControllerOf(&pod); ref == nil || ref.UID != got.UID {
		t.Fatalf("pod is not owned by the run: %+v", pod.OwnerReferences)
	}
	if len(pod.Finalizers) != 1 || pod.Finalizers[0] != farmv1.FinalizerOutcome {
		t.Fatalf("finalizers %v", pod.Finalizers)
	}
	if pod.Spec.NodeName != rig.Spec.NodeName {
		t.Fatalf("pod on node %q, want %q", pod.Spec.NodeName, rig.Spec.NodeName)
	}
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if terms[0].MatchFields[0].Values[0] != rig.Spec.NodeName {
		t.Fatalf("affinity %+v", terms)
	}
	tolerates := false
	for _, tol := range pod.Spec.Tolerations {
		tolerates = tolerates || tol.Key == farmv1.TaintRig
	}
	if !tolerates || pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 3600+60 {
		t.Fatalf("tolerations %+v, deadline %v", pod.Spec.Tolerations, pod.Spec.ActiveDeadlineSeconds)
	}
	c := pod.Spec.Containers[0]
	if c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Fatalf("termination message %s %s", c.TerminationMessagePath, c.TerminationMessagePolicy)
	}
	want := map[string]string{
		"CLAWFARM_RUN": ns + "/shape", "CLAWFARM_ATTEMPT": "1", "CLAWFARM_RIG_ENDPOINT": rig.Spec.Endpoint.URL,
		"CLAWFARM_TRIGGER": run.Spec.Trigger, "CLAWFARM_MODEL_PROVIDER": "openai-compatible", "CLAWFARM_MODEL": "sim/timer",
		"CLAWFARM_MODEL_BASE_URL": "http://127.0.0.1:1/v1", "CLAWFARM_MAX_TURNS": "300", "CLAWFARM_SESSION_SECONDS": "3600",
		"CLAWFARM_STATE_DIR": contract.StateMountPath, "CLAWFARM_SKILLS_DIRS": contract.SkillsMountRoot + "/shopping",
		"CLAWFARM_DENY_TOOLS": "force_quit", "CLAWFARM_CONTEXT_WINDOW": "128000",
	}
	for k, v := range want {
		if got := envOf(&pod, k); got != v {
			t.Errorf("env %s = %q, want %q", k, got, v)
		}
	}
	var key *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "CLAWFARM_MODEL_API_KEY" {
			key = &c.Env[i]
		}
	}
	if key == nil || key.Value != "" || key.ValueFrom == nil || key.ValueFrom.SecretKeyRef.Name != "model-key" {
		t.Fatalf("the API key must come from the Secret reference only: %+v", key)
	}
	hostPath := ""
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPath = v.HostPath.Path
		}
	}
	if hostPath != "/var/lib/clawfarm/rigs/rig" {
		t.Fatalf("state volume hostPath %q", hostPath)
	}
	// Printer-column fields and the RigLeased condition while running.
	if got.Status.Rig != "rig" || got.Status.Attempt != 1 || !isTrueCond(got, farmv1.ConditionRigLeased) {
		t.Fatalf("status while running: %+v", got.Status)
	}
	if s := condition(got, farmv1.ConditionSucceeded); s == nil || s.Status != metav1.ConditionUnknown {
		t.Fatalf("Succeeded must be Unknown while running: %+v", s)
	}
	cancel(t, ns, "shape")
	waitPhase(t, ns, "shape", farmv1.RunCancelled)
}

func isTrueCond(run *farmv1.AgentRun, typ string) bool {
	c := condition(run, typ)
	return c != nil && c.Status == metav1.ConditionTrue
}

func cancel(t *testing.T, ns, name string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	if err := k8s.Patch(context.Background(), &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch); err != nil {
		t.Fatal(err)
	}
}

func TestCancelStopsThePodAndReleasesTheRig(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "long", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, newRun(ns, "long", "rig"))
	waitPhase(t, ns, "long", farmv1.RunRunning)
	eventually(t, "the loop running", func() bool {
		p := podsOf(t, ns, "long")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	if h := leaseHolder(t, ns, "rig"); h != "long" {
		t.Fatalf("lease holder %q, want long", h)
	}
	cancel(t, ns, "long")
	run := waitPhase(t, ns, "long", farmv1.RunCancelled)
	if c := condition(run, farmv1.ConditionSucceeded); c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonCancelled {
		t.Fatalf("Succeeded %+v", c)
	}
	if h := leaseHolder(t, ns, "rig"); h != "" {
		t.Fatalf("lease still held by %q after cancel", h)
	}
	if len(run.Status.Attempts) != 1 || run.Status.Attempts[0].Outcome != farmv1.OutcomeCancelled {
		t.Fatalf("attempts %+v", run.Status.Attempts)
	}
	// The spec is frozen, but cancel cannot be undone either.
	err := k8s.Patch(context.Background(), run, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":false}}`)))
	if err == nil || !strings.Contains(err.Error(), "cancel cannot be undone") {
		t.Fatalf("undoing cancel: %v", err)
	}
}

func TestTwoRunsForOneRigRunOneAfterTheOther(t *testing.T) {
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
	create(t, newRun(ns, "b", "rig"))
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second resolution: b is older than c and d
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

// Every transition of a run leaves an Event, with a stable reason, in order:
// queued behind a busy rig, handed the rig and started, a counted STUCK, the
// next attempt, the end.
func TestEventOnEveryTransition(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	release := &atomic.Bool{}
	done := ends(contract.Done, true, "first", 0)
	scripts.set(ns, "first", func(*corev1.Pod) fakekubelet.Ending {
		if release.Load() {
			return done
		}
		return fakekubelet.Ending{Hang: true}
	})
	scripts.set(ns, "second", byPod(map[string]fakekubelet.Ending{"second-a1": ends(contract.Stuck, true, "lost", 50*time.Millisecond)},
		ends(contract.Done, true, "done", 50*time.Millisecond)))
	create(t, newRun(ns, "first", "rig"))
	waitPhase(t, ns, "first", farmv1.RunRunning)
	create(t, newRun(ns, "second", "rig"))
	waitPhase(t, ns, "second", farmv1.RunQueued)
	release.Store(true)
	waitPhase(t, ns, "second", farmv1.RunSucceeded)

	want := map[string][]string{
		"first":  {farmv1.ReasonLeased, farmv1.ReasonDone},
		"second": {farmv1.ReasonQueued, farmv1.ReasonLeased, farmv1.EventAttemptEnded, farmv1.ReasonRetrying, farmv1.EventAttemptStarted, farmv1.ReasonDone},
	}
	same := func(got map[string][]string) bool {
		return fmt.Sprint(got["first"]) == fmt.Sprint(want["first"]) && fmt.Sprint(got["second"]) == fmt.Sprint(want["second"])
	}
	got := runEvents(t, ns)
	for deadline := time.Now().Add(20 * time.Second); !same(got) && time.Now().Before(deadline); got = runEvents(t, ns) {
		time.Sleep(100 * time.Millisecond) // Events are sent asynchronously
	}
	if !same(got) {
		t.Fatalf("events by run %v, want %v", got, want)
	}
}

// runEvents lists the Events about each run of ns, their reasons in the order
// they were recorded.
func runEvents(t *testing.T, ns string) map[string][]string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].EventTime.Before(&list.Items[j].EventTime) })
	out := map[string][]string{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "AgentRun" {
			out[e.Regarding.Name] = append(out[e.Regarding.Name], e.Reason)
		}
	}
	return out
}

func getLease(t *testing.T, ns, rig string) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: rig}, &l); err != nil {
		t.Fatalf("lease of rig %s: %v", rig, err)
	}
	return &l
}

func TestWaitSchedulesAFollowUpCronJob(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Wait, Retryable: true, Recap: "asked Ana for the code", ExitReason: contract.ReasonEndTurn,
		FollowUp: &contract.FollowUp{AfterMinutes: 20, Context: "read Ana's reply"}}
	b, _ := m.Encode()
	scripts.set(ns, "ask", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 10, Message: string(b)}))
	create(t, newRun(ns, "ask", "rig"))
	run := waitPhase(t, ns, "ask", farmv1.RunWaiting)
	fu := run.Status.FollowUp
	if fu == nil || fu.Run != "ask-f1" || fu.Chain != 1 || fu.CronJob != "ask-fu" {
		t.Fatalf("followUp status %+v", fu)
	}
	finish := run.Status.Attempts[0].FinishTime.Time
	if d := fu.FireTime.Sub(finish); d < 20*time.Minute || d > 21*time.Minute {
		t.Fatalf("fire time %s is %s after the finish, want 20 minutes (rounded up to the minute)", fu.FireTime, d)
	}
	if c := condition(run, farmv1.ConditionSucceeded); c.Status != metav1.ConditionTrue || c.Reason != farmv1.ReasonWaiting {
		t.Fatalf("Succeeded while waiting: %+v", c)
	}
	eventually(t, "rig released while waiting", func() bool { return leaseHolder(t, ns, "rig") == "" })

	var cj batchv1.CronJob
	eventually(t, "CronJob ask-fu", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "ask-fu"}, &cj) == nil
	})
	ft := fu.FireTime.UTC()
	if want := fmt.Sprintf("%d %d %d %d *", ft.Minute(), ft.Hour(), ft.Day(), int(ft.Month())); cj.Spec.Schedule != want {
		t.Errorf("schedule %q, want %q", cj.Spec.Schedule, want)
	}
	if cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Etc/UTC" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
		cj.Spec.StartingDeadlineSeconds == nil || *cj.Spec.StartingDeadlineSeconds != followup.StartingDeadlineSeconds ||
		*cj.Spec.SuccessfulJobsHistoryLimit != 1 || *cj.Spec.FailedJobsHistoryLimit != 1 {
		t.Errorf("CronJob spec %+v", cj.Spec)
	}
	if ref := metav1.GetControllerOf(&cj); ref == nil || ref.UID != run.UID {
		t.Errorf("CronJob owner %+v", cj.OwnerReferences)
	}
	ctr := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	if ctr.Image != "manager:test" || ctr.Args[0] != "followup" {
		t.Errorf("job container %+v", ctr)
	}
	req, err := followup.DecodeRequest(ctr.Env[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if req.Run.Name != "ask-f1" || !strings.Contains(req.Run.Spec.Trigger, "asked Ana for the code") ||
		!strings.Contains(req.Run.Spec.Trigger, "read Ana's reply") || !strings.Contains(req.Run.Spec.Trigger, "Set a 5 minute timer") {
		t.Fatalf("follow-up request %s: %q", req.Run.Name, req.Run.Spec.Trigger)
	}

	// The Job runs `manager followup`: twice is the same as once.
	for i := 0; i < 2; i++ {
		if name, err := followup.Create(context.Background(), k8s, req, ""); err != nil || name != "ask-f1" {
			t.Fatalf("followup.Create #%d = %q, %v", i+1, name, err)
		}
	}
	scripts.set(ns, "ask-f1", byPod(nil, ends(contract.Done, true, "got the code", 50*time.Millisecond)))
	parent := waitPhase(t, ns, "ask", farmv1.RunSucceeded)
	if c := condition(parent, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonFollowedUp {
		t.Fatalf("parent Succeeded %+v", c)
	}
	eventually(t, "CronJob deleted once the follow-up exists", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "ask-fu"}, &cj)
		return apierrors.IsNotFound(err) || (err == nil && cj.DeletionTimestamp != nil)
	})
	child := waitPhase(t, ns, "ask-f1", farmv1.RunSucceeded)
	if child.Labels[farmv1.LabelChainRoot] != "ask" || child.Labels[farmv1.LabelParent] != "ask" {
		t.Fatalf("child labels %v", child.Labels)
	}
}

func TestMissedCronJobFallbackAndChainLimit(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	wait := ends(contract.Wait, true, "waiting", 50*time.Millisecond)
	scripts.set(ns, "chain", byPod(nil, wait))
	scripts.set(ns, "chain-f1", byPod(nil, wait))
	run := newRun(ns, "chain", "rig")
	run.Spec.FollowUp.MaxChain = ptr.To[int32](1)
	create(t, run)
	waitPhase(t, ns, "chain", farmv1.RunWaiting)
	// Hold the follow-up in the queue while the clock is moved, so its pods
	// are not judged by the moved clock.
	setMaintenance(t, ns, "rig", true)
	// No CronJob controller runs here: once the fire time plus the starting
	// deadline has passed, the controller creates the follow-up itself.
	jump := 16*time.Minute + followup.StartingDeadlineSeconds*time.Second + followup.FallbackSlack
	clk.Advance(jump)
	touch(t, ns, "chain")
	parent := waitPhase(t, ns, "chain", farmv1.RunSucceeded)
	clk.Advance(-jump)
	setMaintenance(t, ns, "rig", false)
	if c := condition(parent, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonFollowedUp {
		t.Fatalf("parent %+v", c)
	}
	// The follow-up waits too, but the chain is full: no third run.
	child := waitRun(t, ns, "chain-f1", func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
	if c := condition(child, farmv1.ConditionFollowUpScheduled); c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonChainLimitReached {
		t.Fatalf("FollowUpScheduled of the last link: %+v; status %+v", c, child.Status)
	}
	var f2 farmv1.AgentRun
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "chain-f2"}, &f2); !apierrors.IsNotFound(err) {
		t.Fatalf("chain-f2 exists past maxChain 1: %v", err)
	}
}

func setMaintenance(t *testing.T, ns, name string, on bool) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)))
	if err := k8s.Patch(context.Background(), &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch); err != nil {
		t.Fatal(err)
	}
	want := farmv1.RigMaintenance
	if !on {
		want = farmv1.RigReady
	}
	waitRig(t, ns, name, func(r *farmv1.DeviceRig) bool { return r.Status.Phase == want })
}

func touch(t *testing.T, ns, name string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test/touch":"%d"}}}`, time.Now().UnixNano())))
	if err := k8s.Patch(context.Background(), &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch); err != nil {
		t.Fatal(err)
	}
}

func TestAgentJobsBecomeCronJobs(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "set up reminders", ExitReason: contract.ReasonEndTurn,
		Jobs: []contract.Job{
			{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants", Context: "balcony"},
			{Op: contract.JobCreate, ID: "bad", Kind: contract.JobOneTime, Schedule: "every day"},
		}}
	b, _ := m.Encode()
	scripts.set(ns, "jobs", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 0, Message: string(b)}))
	create(t, newRun(ns, "jobs", "rig"))
	run := waitPhase(t, ns, "jobs", farmv1.RunSucceeded)
	var cj batchv1.CronJob
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "water")}, &cj); err != nil {
		t.Fatal(err)
	}
	if cj.Spec.Schedule != "0 9 * * *" || cj.Labels[farmv1.LabelRig] != "rig" || cj.Labels[farmv1.LabelJobID] != "water" {
		t.Fatalf("agent job CronJob %+v %v", cj.Spec.Schedule, cj.Labels)
	}
	req, err := followup.DecodeRequest(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env[0].Value)
	if err != nil || !req.NameFromJob || req.Run.Spec.RigRef.Name != "rig" || !strings.Contains(req.Run.Spec.Trigger, "water plants") {
		t.Fatalf("agent job request %+v, %v", req, err)
	}
	var bad *farmv1.AgentJobStatus
	for i := range run.Status.Jobs {
		if run.Status.Jobs[i].ID == "bad" {
			bad = &run.Status.Jobs[i]
		}
	}
	if bad == nil || !strings.Contains(bad.Message, "not a 5-field cron") {
		t.Fatalf("a bad schedule must be reported, not materialised: %+v", run.Status.Jobs)
	}
	// finish_job(cancel) in a later run removes it.
	m2 := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Jobs: []contract.Job{{Op: contract.JobFinish, ID: "water", Status: "cancel"}}}
	b2, _ := m2.Encode()
	scripts.set(ns, "jobs2", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 0, Message: string(b2)}))
	create(t, newRun(ns, "jobs2", "rig"))
	waitPhase(t, ns, "jobs2", farmv1.RunSucceeded)
	eventually(t, "agent job CronJob removed", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "water")}, &cj)
		return apierrors.IsNotFound(err) || cj.DeletionTimestamp != nil
	})
}

func TestUnreadyRigHoldsItsQueue(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	health.Set(ns+"-rig", false)
	waitRig(t, ns, "rig", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
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
}

func TestQueueTimeoutAndTTL(t *testing.T) {
	ns := namespace(t)
	run := newRun(ns, "lonely", "missing-rig")
	run.Spec.Limits.QueueTimeoutSeconds = ptr.To[int32](1)
	run.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
	create(t, run)
	q := waitPhase(t, ns, "lonely", farmv1.RunQueued)
	if c := condition(q, farmv1.ConditionRigLeased); c.Reason != farmv1.ReasonRigNotFound {
		t.Fatalf("RigLeased %+v", c)
	}
	failed := waitPhase(t, ns, "lonely", farmv1.RunFailed)
	if c := condition(failed, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonQueueTimeout {
		t.Fatalf("Succeeded %+v", c)
	}
	eventually(t, "run deleted after its TTL", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "lonely"}, &farmv1.AgentRun{})
		return apierrors.IsNotFound(err)
	})
}

func TestLostNodeIsAFreeRetry(t *testing.T) {
	ns := namespace(t)
	rig := makeRig(t, ns, "rig", nil)
	scripts.set(ns, "lost", byPod(map[string]fakekubelet.Ending{"lost-a1": {Hang: true}}, ends(contract.Done, true, "ok", 50*time.Millisecond)))
	create(t, newRun(ns, "lost", "rig"))
	waitPhase(t, ns, "lost", farmv1.RunRunning)
	eventually(t, "pod running", func() bool {
		p := podsOf(t, ns, "lost")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	setNodeReady(t, rig.Spec.NodeName, false)
	run := waitRun(t, ns, "lost", func(r *farmv1.AgentRun) bool { return len(r.Status.Attempts) >= 1 })
	if a := run.Status.Attempts[0]; a.Outcome != farmv1.OutcomeInfrastructure || a.Counted {
		t.Fatalf("lost node must be a free retry: %+v", a)
	}
	setNodeReady(t, rig.Spec.NodeName, true)
	done := waitPhase(t, ns, "lost", farmv1.RunSucceeded)
	if done.Status.Attempts[len(done.Status.Attempts)-1].Pod != "lost-a1-r1" {
		t.Fatalf("attempts %+v", done.Status.Attempts)
	}
}

func TestManagerRestartLosesNothingAndCountsOnce(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	gate := make(chan struct{})
	scripts.set(ns, "restart", func(p *corev1.Pod) fakekubelet.Ending {
		select {
		case <-gate:
			return ends(contract.Done, true, "finished while the manager was down", 0)
		default:
			return fakekubelet.Ending{Hang: true}
		}
	})
	create(t, newRun(ns, "restart", "rig"))
	waitPhase(t, ns, "restart", farmv1.RunRunning)
	stopMgr()
	<-mgrDone
	close(gate)
	eventually(t, "pod ends while the manager is down", func() bool {
		p := podsOf(t, ns, "restart")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodSucceeded
	})
	stopMgr, mgrDone = startManager()
	run := waitPhase(t, ns, "restart", farmv1.RunSucceeded)
	time.Sleep(time.Second) // let any duplicate reconcile happen
	run = getRun(t, ns, "restart")
	if len(run.Status.Attempts) != 1 || run.Status.Usage == nil || run.Status.Usage.PromptTokens != 1000 {
		t.Fatalf("outcome recorded more than once or lost: attempts %+v usage %+v", run.Status.Attempts, run.Status.Usage)
	}
}

func TestDeletedRunReleasesItsRig(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "doomed", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, newRun(ns, "doomed", "rig"))
	waitPhase(t, ns, "doomed", farmv1.RunRunning)
	run := getRun(t, ns, "doomed")
	if err := k8s.Delete(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	// envtest runs no garbage collector: delete the pods the way it would.
	for _, p := range podsOf(t, ns, "doomed") {
		_ = k8s.Delete(context.Background(), &p)
	}
	eventually(t, "lease of a deleted run released", func() bool { return leaseHolder(t, ns, "rig") == "" })
	eventually(t, "pods gone", func() bool { return len(podsOf(t, ns, "doomed")) == 0 })
	create(t, newRun(ns, "next", "rig"))
	waitPhase(t, ns, "next", farmv1.RunSucceeded)
}
