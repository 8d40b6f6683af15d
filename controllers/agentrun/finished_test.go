package agentrun_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// finishedAgrees is the Finished condition's rule, checked against one stored
// version of a run: a run whose status was written has Finished, True with
// the final phase as its reason once the phase is final, False with reason
// Waiting while it waits for its follow-up, False with reason InProgress
// otherwise, and its observedGeneration is the one the status was written at.
func finishedAgrees(run *farmv1.AgentRun) error {
	st := run.Status
	if (st.Phase == "" || st.Phase == farmv1.RunPending) && len(st.Conditions) == 0 {
		return nil // no status written yet: the phase is the schema's default
	}
	c := condition(run, farmv1.ConditionFinished)
	if c == nil {
		return fmt.Errorf("phase %s without a Finished condition", st.Phase)
	}
	want, reason := metav1.ConditionFalse, farmv1.ReasonInProgress
	switch {
	case st.Phase.Finished():
		want, reason = metav1.ConditionTrue, string(st.Phase)
	case st.Phase == farmv1.RunWaiting:
		reason = farmv1.ReasonWaiting
	}
	if c.Status != want || c.Reason != reason || c.Message == "" {
		return fmt.Errorf("phase %s with Finished %s/%s %q, want %s/%s and a message", st.Phase, c.Status, c.Reason, c.Message, want, reason)
	}
	if c.ObservedGeneration != st.ObservedGeneration {
		return fmt.Errorf("Finished at generation %d, status at %d", c.ObservedGeneration, st.ObservedGeneration)
	}
	return nil
}

// finishedWatch checks finishedAgrees on every version of every AgentRun the
// API server stores while the package's tests run, whatever the test: a
// final phase reached on a path the tests below do not name still fails the
// package when it is written without Finished.
type finishedWatch struct {
	mu       sync.Mutex
	broken   []string
	finished map[string]bool // runs seen in a final phase with Finished True
	cancel   context.CancelFunc
	done     chan struct{}
}

func watchFinished() *finishedWatch {
	ctx, cancel := context.WithCancel(context.Background())
	fw := &finishedWatch{finished: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	wc, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	go func() {
		defer close(fw.done)
		for ctx.Err() == nil {
			// A watch the API server closes is opened again; its replay of
			// the current state is checked again, harmlessly.
			w, err := wc.Watch(ctx, &farmv1.AgentRunList{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if run, ok := ev.Object.(*farmv1.AgentRun); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					fw.check(run)
				}
			}
			w.Stop()
		}
	}()
	return fw
}

func (fw *finishedWatch) check(run *farmv1.AgentRun) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	key := run.Namespace + "/" + run.Name
	if err := finishedAgrees(run); err != nil {
		fw.broken = append(fw.broken, fmt.Sprintf("AgentRun %s (resourceVersion %s): %v", key, run.ResourceVersion, err))
		return
	}
	if run.Status.Phase.Finished() {
		fw.finished[key] = true
	}
}

// stop ends the watch once the last writes have had time to arrive, and
// reports every version that broke the rule.
func (fw *finishedWatch) stop() []string {
	time.Sleep(500 * time.Millisecond)
	fw.cancel()
	<-fw.done
	fw.mu.Lock()
	defer fw.mu.Unlock()
	sort.Strings(fw.broken)
	return fw.broken
}

func (fw *finishedWatch) sawFinished(ns, name string) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.finished[ns+"/"+name]
}

// wantFinished checks the Finished condition of run as it is now.
func wantFinished(t *testing.T, run *farmv1.AgentRun, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := condition(run, farmv1.ConditionFinished)
	if c == nil || c.Status != status || c.Reason != reason || c.Message == "" || c.ObservedGeneration != run.Generation {
		t.Fatalf("phase %s: Finished %+v, want %s/%s with a message at generation %d", run.Status.Phase, c, status, reason, run.Generation)
	}
}

// Every way a run ends sets Finished True — success, failure, InvalidConfig
// from the loop or the kubelet, exhausted attempts and infrastructure
// retries, a queue timeout, the run's deadline, cancel while queued, running
// or waiting, and a WAIT ended by its follow-up (FollowedUp) or by no
// follow-up at all — and a Waiting run is not Finished. So
// `kubectl wait --for=condition=Finished` returns for every outcome, and not
// while a follow-up is still to come.
func TestFinishedOnEveryOutcome(t *testing.T) {
	t.Parallel()
	type when struct {
		phase farmv1.RunPhase
		// then acts on the run once it has reached phase, and before the
		// Finished condition is checked to be False there.
		then func(t *testing.T, ns, name string)
	}
	cases := []struct {
		name   string
		script func(*corev1.Pod) fakekubelet.Ending
		rig    bool
		edit   func(*farmv1.AgentRun)
		before *when
		phase  farmv1.RunPhase
		reason string // of Succeeded
	}{
		{name: "done", script: byPod(nil, ends(contract.Done, true, "ok", 50*time.Millisecond)), rig: true,
			phase: farmv1.RunSucceeded, reason: farmv1.ReasonDone},
		{name: "fail", script: byPod(nil, ends(contract.Fail, true, "sold out", 50*time.Millisecond)), rig: true,
			phase: farmv1.RunFailed, reason: farmv1.ReasonTaskFailed},
		{name: "badconfig", script: byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 2}), rig: true,
			phase: farmv1.RunFailed, reason: farmv1.ReasonInvalidConfig},
		{name: "missing-secret", script: byPod(nil, fakekubelet.MissingSecret("model-key")), rig: true,
			phase: farmv1.RunFailed, reason: farmv1.ReasonInvalidConfig},
		{name: "stuck-thrice", script: byPod(nil, ends(contract.Stuck, true, "lost", 50*time.Millisecond)), rig: true,
			before: &when{phase: farmv1.RunRetrying},
			phase:  farmv1.RunFailed, reason: farmv1.ReasonAttemptsExhausted},
		{name: "infra-exhausted", script: byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 143, Disruption: true}), rig: true,
			edit:  func(r *farmv1.AgentRun) { r.Spec.Limits.MaxInfraRetries = ptr.To[int32](1) },
			phase: farmv1.RunFailed, reason: farmv1.ReasonInfraExhausted},
		{name: "queue-timeout", edit: func(r *farmv1.AgentRun) { r.Spec.Limits.QueueTimeoutSeconds = ptr.To[int32](1) },
			phase: farmv1.RunFailed, reason: farmv1.ReasonQueueTimeout},
		{name: "deadline", script: byPod(nil, fakekubelet.Ending{Hang: true}), rig: true,
			edit:  func(r *farmv1.AgentRun) { r.Spec.Limits.RunTimeoutSeconds = 3 },
			phase: farmv1.RunFailed, reason: farmv1.ReasonDeadlineExceeded},
		{name: "cancel-queued", before: &when{farmv1.RunQueued, cancel},
			phase: farmv1.RunCancelled, reason: farmv1.ReasonCancelled},
		{name: "cancel-running", script: byPod(nil, fakekubelet.Ending{Hang: true}), rig: true,
			before: &when{farmv1.RunRunning, cancel},
			phase:  farmv1.RunCancelled, reason: farmv1.ReasonCancelled},
		{name: "cancel-waiting", script: byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)), rig: true,
			before: &when{farmv1.RunWaiting, cancel},
			phase:  farmv1.RunCancelled, reason: farmv1.ReasonCancelled},
		{name: "wait-no-followups", script: byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)), rig: true,
			edit:  func(r *farmv1.AgentRun) { r.Spec.FollowUp.MaxChain = ptr.To[int32](0) },
			phase: farmv1.RunSucceeded, reason: farmv1.ReasonWaiting},
		{name: "followed-up", script: byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)), rig: true,
			before: &when{farmv1.RunWaiting, func(t *testing.T, ns, name string) {
				// What the CronJob's Job does at the fire time: `manager followup`.
				req := cronJobRequest(t, ns, followup.WaitCronJobName(name), nil)
				if _, err := followup.Create(context.Background(), k8s, req, ""); err != nil {
					t.Fatal(err)
				}
			}},
			phase: farmv1.RunSucceeded, reason: farmv1.ReasonFollowedUp},
	}
	ns := namespace(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rig := "rig-" + c.name
			if c.rig {
				makeRig(t, ns, rig, nil)
			}
			if c.script != nil {
				scripts.set(ns, c.name, c.script)
			}
			run := newRun(ns, c.name, rig)
			if c.edit != nil {
				c.edit(run)
			}
			create(t, run)
			if b := c.before; b != nil {
				got := waitPhase(t, ns, c.name, b.phase)
				reason := farmv1.ReasonInProgress
				if b.phase == farmv1.RunWaiting {
					reason = farmv1.ReasonWaiting
					// Succeeded keeps its meaning: True while waiting.
					if s := condition(got, farmv1.ConditionSucceeded); s == nil || s.Status != metav1.ConditionTrue {
						t.Fatalf("Succeeded while waiting: %+v", s)
					}
				}
				wantFinished(t, got, metav1.ConditionFalse, reason)
				if b.then != nil {
					b.then(t, ns, c.name)
				}
			}
			got := waitRun(t, ns, c.name, func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
			if got.Status.Phase != c.phase {
				t.Fatalf("phase %s, want %s (%+v)", got.Status.Phase, c.phase, got.Status.Conditions)
			}
			if s := condition(got, farmv1.ConditionSucceeded); s == nil || s.Reason != c.reason {
				t.Fatalf("Succeeded %+v, want reason %s", s, c.reason)
			}
			wantFinished(t, got, metav1.ConditionTrue, string(c.phase))
			eventually(t, "the watch saw the run finished", func() bool { return finished.sawFinished(ns, c.name) })
		})
	}
}
