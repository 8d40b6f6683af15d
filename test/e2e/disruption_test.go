//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// Two runs for one rig run one after the other: the second waits in the
// queue until the first's pod has ended and the rig is released.
func TestTwoRunsOneRig(t *testing.T) {
	t.Parallel()
	setFaults(t, rigTwoRuns, slowTaps)
	first := newRun("e2e-two-1", rigTwoRuns, "timer", "Set a 5 minute timer in the Clock app and start it.")
	second := newRun("e2e-two-2", rigTwoRuns, "wifi-off", "Turn Wi-Fi off in Settings.")
	create(t, first)
	waitRun(t, first.Name, time.Minute, "Running", func(r *farmv1.AgentRun) bool { return r.Status.Phase == farmv1.RunRunning })
	create(t, second)
	// A run behind a busy rig reads Pending for its first 10 s and Queued
	// after that; a rig handed on sooner starts it without a Queued status.
	// So the second is seen Queued, or it left Pending because the first
	// ended within those 10 s — which the record below checks.
	seen := waitRun(t, second.Name, time.Minute, "Queued or started", func(r *farmv1.AgentRun) bool {
		return r.Status.Phase == farmv1.RunQueued || r.Status.Phase == farmv1.RunPending && r.Status.QueuedAt != nil ||
			r.Status.Phase != farmv1.RunPending && r.Status.Phase != ""
	})
	wasQueued := seen.Status.Phase == farmv1.RunQueued || seen.Status.Phase == farmv1.RunPending
	if pods := podsOf(t, second.Name); len(pods) != 0 && getRun(t, first.Name).Status.Phase == farmv1.RunRunning {
		t.Fatalf("%s has pod %s while %s still runs on the same rig", second.Name, pods[0].Name, first.Name)
	}
	a := waitFinished(t, first.Name, farmv1.RunSucceeded)
	b := waitFinished(t, second.Name, farmv1.RunSucceeded)
	if len(a.Status.Attempts) != 1 || len(b.Status.Attempts) != 1 {
		t.Fatalf("attempts: %s | %s; want one each", attemptsSummary(a), attemptsSummary(b))
	}
	aEnd, bStart := a.Status.Attempts[0].FinishTime, b.Status.Attempts[0].StartTime
	if aEnd == nil || bStart == nil || bStart.Before(aEnd) && aEnd.Sub(bStart.Time) >= time.Second {
		t.Fatalf("the second run's pod started at %v, before the first's was recorded finished at %v", bStart, aEnd)
	}
	if waited := aEnd.Sub(b.CreationTimestamp.Time); !wasQueued && waited > 15*time.Second {
		t.Fatalf("%s waited %s behind %s (created %v, first ended %v) and was never seen Queued; seen %s",
			second.Name, waited.Round(time.Second), first.Name, b.CreationTimestamp, aEnd, seen.Status.Phase)
	}
	if q := b.Status.QueuedAt; q == nil || !q.Equal(&b.CreationTimestamp) {
		t.Fatalf("%s queuedAt %v; it waited for the rig since it was created, %v", second.Name, q, b.CreationTimestamp)
	}
	st := rigState(t, rigTwoRuns)
	if !timerStarted(st) || st.WiFi {
		t.Fatalf("ground truth: timer %+v wifi %t; want both tasks done (timer runs, Wi-Fi off)", st.Timer, st.WiFi)
	}
	clearFaults(t, rigTwoRuns)
}

// The manager killed (SIGKILL) while a run's pod runs: the restarted manager
// picks the run up from the API and records its outcome exactly once.
func TestManagerKilledMidRun(t *testing.T) {
	t.Parallel()
	setFaults(t, rigManagerKill, slowTaps)
	create(t, newRun("e2e-manager-kill", rigManagerKill, "timer", "Set a 5 minute timer in the Clock app and start it."))
	runningPod(t, "e2e-manager-kill-a1", time.Minute)
	pid := killManager(t)
	t.Logf("killed the manager (pid %d) while e2e-manager-kill-a1 runs", pid)
	if cluster.Manager == devcluster.ManagerHost {
		if err := cluster.StartHostManager(ctxFor(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	run := waitFinished(t, "e2e-manager-kill", farmv1.RunSucceeded)
	if len(run.Status.Attempts) != 1 || run.Status.Attempt != 1 || run.Status.Attempts[0].Sentinel != "DONE" {
		t.Fatalf("attempts %s (attempt %d); want the one DONE recorded once", attemptsSummary(run), run.Status.Attempt)
	}
	var events corev1.EventList
	if err := cluster.Client.List(ctxFor(t, 10*time.Second), &events, client.InNamespace(run.Namespace)); err != nil {
		t.Fatal(err)
	}
	finishedEvents := 0
	for _, e := range events.Items {
		if e.InvolvedObject.Name == run.Name && e.InvolvedObject.Kind == "AgentRun" && e.Reason == farmv1.ReasonDone {
			finishedEvents += int(max(e.Count, 1))
		}
	}
	if finishedEvents > 1 {
		t.Fatalf("%d %s events for the run; the outcome was recorded more than once", finishedEvents, farmv1.ReasonDone)
	}
	if st := rigState(t, rigManagerKill); !timerStarted(st) {
		t.Fatalf("ground truth: timer %+v, want running", st.Timer)
	}
	clearFaults(t, rigManagerKill)
}

// killManager SIGKILLs the manager process of this cluster and returns its pid.
func killManager(t *testing.T) int {
	t.Helper()
	if cluster.Manager == devcluster.ManagerHost {
		p := cluster.Proc("manager")
		p.Kill()
		return p.PID
	}
	if cluster.KubeletSystem {
		// A container of the operator's kubelet node: its process, as runc
		// reports it. The kubelet restarts the container.
		pod, err := cluster.ManagerPod(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == "manager" && cs.State.Running != nil {
				pid, err := cluster.ContainerPID(ctxFor(t, 10*time.Second), cs.ContainerID)
				if err != nil {
					t.Fatal(err)
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatalf("kill the manager (pid %d): %v", pid, err)
				}
				return pid
			}
		}
		t.Fatalf("the manager pod %s has no running manager container: %+v", pod.Name, pod.Status.ContainerStatuses)
	}
	// On rignode the chart's manager is a pod run as a host process, from
	// the manager image it unpacked under the node's root directory: find
	// it by that binary and this cluster's metrics port.
	bin := filepath.Join(cluster.Dir, "nodes", devcluster.SystemNode, "images", "roots") + "/"
	port := fmt.Sprintf("127.0.0.1:%d", cluster.Ports().ManagerMetrics)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 1 && strings.HasPrefix(args[0], bin) && strings.HasSuffix(args[0], "/usr/local/bin/manager") && strings.Contains(string(b), port) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill the manager (pid %d): %v", pid, err)
			}
			return pid
		}
	}
	t.Fatalf("no manager process of this cluster (%s with %s) found", bin, port)
	return 0
}

// A loop pod deleted while it runs: the attempt ends as infrastructure, a free
// retry <run>-a1-r1 continues it from its snapshot (CLAWFARM_RESUME=true), and
// the run succeeds still on attempt 1.
func TestPodDeletedMidRun(t *testing.T) {
	t.Parallel()
	setFaults(t, rigPodDelete, slowTaps)
	create(t, newRun("e2e-pod-delete", rigPodDelete, "timer", "Set a 5 minute timer in the Clock app and start it."))
	pod := runningPod(t, "e2e-pod-delete-a1", time.Minute)
	deadline := time.Now().Add(time.Minute)
	for rigState(t, rigPodDelete).Touches < 1 { // mid-session: the phone has been touched
		if time.Now().After(deadline) {
			t.Fatal("the session never touched the phone")
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := cluster.Client.Delete(ctxFor(t, 10*time.Second), pod); err != nil {
		t.Fatalf("delete %s: %v", pod.Name, err)
	}
	retry := runningPod(t, "e2e-pod-delete-a1-r1", 2*time.Minute)
	if got := envOf(retry, contract.SettingResume.Env); got != "true" {
		t.Fatalf("%s: %s=%q, want true (resume from the snapshot)", retry.Name, contract.SettingResume.Env, got)
	}
	if got := envOf(retry, contract.SettingAttempt.Env); got != "1" {
		t.Fatalf("%s: %s=%q, want 1 (a free retry is the same attempt)", retry.Name, contract.SettingAttempt.Env, got)
	}
	run := waitFinished(t, "e2e-pod-delete", farmv1.RunSucceeded)
	a := run.Status.Attempts
	if run.Status.Attempt != 1 || run.Status.InfraRetries != 1 || len(a) != 2 ||
		a[0].Outcome != farmv1.OutcomeInfrastructure || a[0].Counted || a[1].Pod != retry.Name || a[1].Sentinel != "DONE" {
		t.Fatalf("attempt %d infraRetries %d attempts %s; want a1 Infrastructure (free), then a1-r1 DONE",
			run.Status.Attempt, run.Status.InfraRetries, attemptsSummary(run))
	}
	if st := rigState(t, rigPodDelete); !timerStarted(st) {
		t.Fatalf("ground truth: timer %+v, want a running 300 s timer", st.Timer)
	}
	clearFaults(t, rigPodDelete)
}

// A rig that turns unready: a run for it waits (no pod, no lease) and goes on
// once the rig is Ready again.
func TestRigUnready(t *testing.T) {
	t.Parallel()
	setFaults(t, rigUnready, `{"health": {"ready": false}}`)
	waitRigPhase(t, rigUnready, farmv1.RigNotReady, time.Minute)
	create(t, newRun("e2e-unready", rigUnready, "timer", "Set a 5 minute timer in the Clock app and start it."))
	time.Sleep(8 * time.Second) // several probe periods and reconciles
	run := getRun(t, "e2e-unready")
	if run.Status.Phase != farmv1.RunQueued && run.Status.Phase != farmv1.RunPending {
		t.Fatalf("run on a NotReady rig is %s, want Queued", run.Status.Phase)
	}
	if pods := podsOf(t, run.Name); len(pods) != 0 {
		t.Fatalf("run on a NotReady rig has pod %s", pods[0].Name)
	}
	if st := rigState(t, rigUnready); st.Touches != 0 {
		t.Fatalf("ground truth: %d touches on a NotReady rig", st.Touches)
	}
	clearFaults(t, rigUnready)
	run = waitFinished(t, "e2e-unready", farmv1.RunSucceeded)
	if run.Status.Sentinel != "DONE" || len(run.Status.Attempts) != 1 {
		t.Fatalf("sentinel %q attempts %s, want one DONE", run.Status.Sentinel, attemptsSummary(run))
	}
	if st := rigState(t, rigUnready); !st.Timer.Running {
		t.Fatalf("ground truth: timer %+v, want running", st.Timer)
	}
}

// Cancel: spec.cancel stops the running pod; the run ends Cancelled and the
// rig is released.
func TestCancel(t *testing.T) {
	onEachHost(t, rigCancel, rigKubeletCancel, cancel)
}

func cancel(t *testing.T, rigCancel int, sfx string) {
	setFaults(t, rigCancel, crawlingTaps)
	create(t, newRun("e2e-cancel"+sfx, rigCancel, "timer", "Set a 5 minute timer in the Clock app and start it."))
	pod := runningPod(t, "e2e-cancel"+sfx+"-a1", time.Minute)
	// The loop patches its progress into the run (through the pod's service account).
	run := waitRun(t, "e2e-cancel"+sfx, time.Minute, "showing the loop's progress", func(r *farmv1.AgentRun) bool {
		return r.Status.Progress != nil && r.Status.Progress.Turn >= 1
	})
	// The rig's gateway lets the pod in and nobody else, on any rig.
	tok := rigToken(t, pod.Spec.ServiceAccountName, pod)
	if code, body := throughGateway(t, rigCancel, tok); code != http.StatusOK {
		t.Fatalf("the lease holder's pod through the gateway: %d %q", code, body)
	}
	strangersRefused(t, rigCancel, pod.Spec.ServiceAccountName, tok)
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))
	cancelled := time.Now()
	if err := cluster.Client.Patch(ctxFor(t, 10*time.Second), run, patch); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	sessionCut(t, rigCancel, pod, tok, cancelled)
	run = waitFinished(t, "e2e-cancel"+sfx, farmv1.RunCancelled)
	if succeededReason(run) != farmv1.ReasonCancelled {
		t.Fatalf("reason %q, want Cancelled", succeededReason(run))
	}
	deadline := time.Now().Add(time.Minute)
	for len(podsOf(t, "e2e-cancel"+sfx)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled run's pod is still there")
		}
		time.Sleep(500 * time.Millisecond)
	}
	clearFaults(t, rigCancel)
	rigFree(t, rigCancel)
	if st := rigState(t, rigCancel); timerStarted(st) {
		t.Fatalf("ground truth: the timer runs, but the session was cancelled before Start (timer %+v)", st.Timer)
	}
}

// leaseHeld reports whether the rig's Lease exists with a holder.
func leaseHeld(t *testing.T, rigIndex int) bool {
	t.Helper()
	var l coordinationv1.Lease
	err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: rig(rigIndex)}, &l)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
}
