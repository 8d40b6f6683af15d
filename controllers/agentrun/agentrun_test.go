package agentrun_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// Every row of the sentinel table (README.md, docs/architecture.md), end to end on the API server.
// Every ending the engine raises (a content filter, the session's time) and a pod past its
// deadline is a counted STUCK with its exit reason, followed by a fresh attempt; only an input
// token budget spent is final.
func TestSentinelTable(t *testing.T) {
	t.Parallel()
	crash := fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 137, Reason: "OOMKilled"}
	// A pod the kubelet stopped at its activeDeadlineSeconds: the loop's SIGTERM ending, the pod's reason.
	deadline := stuckFor(contract.ReasonUserCancel, "stopped: the attempt was cancelled (SIGTERM)")
	deadline.PodReason = "DeadlineExceeded"
	done := ends(contract.Done, true, "done on 2", 50*time.Millisecond)
	cases := []struct {
		name     string
		script   func(*corev1.Pod) fakekubelet.Ending
		phase    farmv1.RunPhase
		reason   string
		sentinel string
		attempts int
		counted  int
		// exitReasons, when set, are the attempts' recorded exit reasons, in order.
		exitReasons []string
	}{
		{"done", byPod(nil, ends(contract.Done, true, "timer set", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 1, 1, nil},
		{"idle", byPod(nil, ends(contract.Idle, true, "nothing new", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonIdle, "IDLE", 1, 1, nil},
		{"fail", byPod(nil, ends(contract.Fail, true, "sold out", 50*time.Millisecond)), farmv1.RunFailed, farmv1.ReasonTaskFailed, "FAIL", 1, 1, nil},
		{"budget", byPod(nil, endsFor(contract.Stuck, contract.ReasonBudgetExhausted, "the input token budget is spent")), farmv1.RunFailed, farmv1.ReasonBudgetExhausted, "STUCK", 1, 1, nil},
		{"content-filter", byPod(map[string]fakekubelet.Ending{"content-filter-a1": stuckFor(contract.ReasonContentFilter, "stopped: the content filter blocked the reply")}, done),
			farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2, []string{"content_filter", "end_turn"}},
		{"session-time", byPod(map[string]fakekubelet.Ending{"session-time-a1": stuckFor(contract.ReasonSessionDeadline, "stopped: the session's time budget is spent")}, done),
			farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2, []string{"session_deadline", "end_turn"}},
		{"deadline", byPod(map[string]fakekubelet.Ending{"deadline-a1": deadline}, done),
			farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2, []string{"attempt_deadline", "end_turn"}},
		{"deadline-thrice", byPod(nil, deadline), farmv1.RunFailed, farmv1.ReasonAttemptsExhausted, "STUCK", 3, 3,
			[]string{"attempt_deadline", "attempt_deadline", "attempt_deadline"}},
		{"key-refused", byPod(nil, endsFor(contract.Stuck, contract.ReasonFatalError, "the provider refused the API key (401)")),
			farmv1.RunFailed, farmv1.ReasonNotRetryable, "STUCK", 1, 1, nil},
		{"badconfig", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 2}), farmv1.RunFailed, farmv1.ReasonInvalidConfig, "FAIL", 1, 1, nil},
		{"stuck-then-done", byPod(map[string]fakekubelet.Ending{"stuck-then-done-a1": ends(contract.Stuck, true, "lost", 50*time.Millisecond)},
			ends(contract.Done, true, "done on 2", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2, nil},
		{"stuck-thrice", byPod(nil, ends(contract.Stuck, true, "lost again", 50*time.Millisecond)), farmv1.RunFailed, farmv1.ReasonAttemptsExhausted, "STUCK", 3, 3, nil},
		{"oom-counts", byPod(map[string]fakekubelet.Ending{"oom-counts-a1": crash}, ends(contract.Done, true, "ok", 50*time.Millisecond)),
			farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 2, nil},
		{"infra-free", byPod(map[string]fakekubelet.Ending{"infra-free-a1": {After: 50 * time.Millisecond, ExitCode: 143, Disruption: true}},
			ends(contract.Done, true, "ok", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 1, nil},
		{"evicted-free", byPod(map[string]fakekubelet.Ending{"evicted-free-a1": {After: 50 * time.Millisecond, ExitCode: 137, PodReason: "Evicted"}},
			ends(contract.Done, true, "ok", 50*time.Millisecond)), farmv1.RunSucceeded, farmv1.ReasonDone, "DONE", 2, 1, nil},
		{"mismatch-code-wins", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 1,
			Message: `{"sentinel":"DONE","recap":"lies","exitReason":"end_turn","retryable":true}`}), farmv1.RunFailed, farmv1.ReasonTaskFailed, "FAIL", 1, 1, nil},
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
			for i, want := range c.exitReasons {
				a := run.Status.Attempts[i]
				if a.ExitReason != want || a.Outcome == farmv1.OutcomeBudget {
					t.Fatalf("attempt %d: exit reason %q, outcome %s; want %q", i+1, a.ExitReason, a.Outcome, want)
				}
				// A fresh attempt after an engine's ending or a deadline waits the
				// back-off like any STUCK (the suite's base is 2 s; status times
				// have whole seconds).
				if i > 0 {
					prev := run.Status.Attempts[i-1]
					if a.StartTime == nil || prev.FinishTime == nil || a.StartTime.Sub(prev.FinishTime.Time) < time.Second {
						t.Fatalf("attempt %d started %v, attempt %d ended %v: want the back-off between them", i+1, a.StartTime, i, prev.FinishTime)
					}
				}
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
	t.Parallel()
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
	t.Parallel()
	ns := namespace(t)
	rig := makeRig(t, ns, "rig", nil)
	scripts.set(ns, "shape", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "model-key", Labels: map[string]string{admission.LabelModelKey: "true"}},
		StringData: map[string]string{"key": "s3cret"}})
	run := newRun(ns, "shape", "rig")
	run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "key"}
	run.Spec.Skills = []farmv1.SkillSource{{ConfigMapName: "shopping"}}
	run.Spec.DenyTools = []string{"force_quit"}
	run.Spec.Model.API = farmv1.ModelAPIResponses
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
		"CLAWFARM_DENY_TOOLS": "force_quit", "CLAWFARM_CONTEXT_WINDOW": "128000", "CLAWFARM_MODEL_API": "responses",
		// The key the manager checked, pinned: the loop refuses another.
		"CLAWFARM_MODEL_KEY_SHA256": contract.KeySHA256("s3cret"),
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
	if want := "/var/lib/clawfarm/rigs/" + ns + "/rig"; hostPath != want {
		t.Fatalf("state volume hostPath %q, want %q (the namespace keeps same-named rigs apart)", hostPath, want)
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
	t.Parallel()
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

// Every transition of a run that is not routine leaves an Event, with a
// stable reason, in order: a counted STUCK, the next attempt, the end. A
// wait behind a busy rig and a first start (handed the rig, its pod
// created) have none: the phase, the RigLeased condition and
// status.attempts tell them.
func TestEventOnEveryTransition(t *testing.T) {
	t.Parallel()
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
	if c := condition(waitPhase(t, ns, "second", farmv1.RunQueued), farmv1.ConditionRigLeased); c == nil || c.Reason != farmv1.ReasonRigBusy {
		t.Fatalf("the queued run's RigLeased condition does not say why it waits: %+v", c)
	}
	release.Store(true)
	waitPhase(t, ns, "second", farmv1.RunSucceeded)

	want := map[string][]string{
		"first":  {farmv1.ReasonDone},
		"second": {farmv1.EventAttemptEnded, farmv1.ReasonRetrying, farmv1.EventAttemptStarted, farmv1.ReasonDone},
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

// A node that stops reporting may still run its pods: the attempt counts as
// alive and the rig stays held — no retry starts on the phone — until an
// operator marks the node out of service (or deletes it). Then the attempt is
// a free retry, which starts once the node is back.
func TestUnreachableNodeKeepsItsAttemptUntilMarkedGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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
	// Past the suite's NodeLostGrace (1 s) the status says so, and nothing else happens.
	waitRun(t, ns, "lost", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionSucceeded)
		return c != nil && strings.Contains(c.Message, "has not reported")
	})
	time.Sleep(2 * time.Second)
	run := getRun(t, ns, "lost")
	if len(run.Status.Attempts) != 0 || run.Status.Phase != farmv1.RunRunning || len(podsOf(t, ns, "lost")) != 1 {
		t.Fatalf("a pod on an unreachable node was given up: phase %s, attempts %+v, pods %d", run.Status.Phase, run.Status.Attempts, len(podsOf(t, ns, "lost")))
	}
	if h := leaseHolder(t, ns, "rig"); h != "lost" {
		t.Fatalf("the rig's Lease is held by %q while the attempt may run", h)
	}

	// The operator says the node is gone for good.
	var node corev1.Node
	if err := k8s.Get(ctx, types.NamespacedName{Name: rig.Spec.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if err := k8s.Update(ctx, &node); err != nil {
		t.Fatal(err)
	}
	run = waitRun(t, ns, "lost", func(r *farmv1.AgentRun) bool { return len(r.Status.Attempts) >= 1 })
	if a := run.Status.Attempts[0]; a.Outcome != farmv1.OutcomeInfrastructure || a.Counted {
		t.Fatalf("an attempt on a node marked gone must be a free retry: %+v", a)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Name: rig.Spec.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if err := k8s.Update(ctx, &node); err != nil {
		t.Fatal(err)
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
	waitPhase(t, ns, "restart", farmv1.RunSucceeded)
	time.Sleep(time.Second) // let any duplicate reconcile happen
	run := getRun(t, ns, "restart")
	if len(run.Status.Attempts) != 1 || run.Status.Usage == nil || run.Status.Usage.PromptTokens != 1000 {
		t.Fatalf("outcome recorded more than once or lost: attempts %+v usage %+v", run.Status.Attempts, run.Status.Usage)
	}
}

func TestDeletedRunReleasesItsRig(t *testing.T) {
	t.Parallel()
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

// A STUCK attempt is followed by a fresh one only after a back-off, visible
// in status.nextAttemptTime and the Succeeded condition (the suite's base is
// 2 s; status times have whole seconds).
func TestStuckBacksOffBeforeTheFreshAttempt(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "again", byPod(map[string]fakekubelet.Ending{"again-a1": ends(contract.Stuck, true, "lost in a menu", 50*time.Millisecond)},
		ends(contract.Done, true, "done", 50*time.Millisecond)))
	create(t, newRun(ns, "again", "rig"))
	backingOff := waitRun(t, ns, "again", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionSucceeded)
		return r.Status.Phase == farmv1.RunRetrying && r.Status.NextAttemptTime != nil && c != nil && strings.Contains(c.Message, "back-off")
	})
	next := backingOff.Status.NextAttemptTime.Time
	ended := backingOff.Status.Attempts[0].FinishTime.Time
	if d := next.Sub(ended); d < time.Second || d > 3*time.Second {
		t.Errorf("nextAttemptTime is %s after attempt 1 ended, want the 2 s back-off (±1 s of rounding)", d)
	}
	done := waitPhase(t, ns, "again", farmv1.RunSucceeded)
	if last := done.Status.Attempts[len(done.Status.Attempts)-1]; last.Pod != "again-a2" {
		t.Fatalf("the run ended with %s, want attempt 2", last.Pod)
	}
	if done.Status.NextAttemptTime != nil {
		t.Errorf("nextAttemptTime %v left in a finished run", done.Status.NextAttemptTime)
	}
	for _, p := range podsOf(t, ns, "again") {
		if p.Name == "again-a2" && p.CreationTimestamp.Time.Before(next) {
			t.Fatalf("attempt 2 started at %s, before nextAttemptTime %s", p.CreationTimestamp, next)
		}
	}
}
