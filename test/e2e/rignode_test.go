//go:build e2e

package e2e

import (
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// These tests take a rig host's node agent away: their rigs each sit on a
// rig host of their own (the suite's OwnHosts), so the other tests' sessions,
// on the shared rig host, run on meanwhile.

// The rig host's rignode SIGKILLed mid-session and started again: the
// session runs on while no rignode runs (rigsim keeps receiving its calls),
// the new rignode takes the running pod up (it serves its log while it
// runs), and the run ends with the scenario's sentinel on its first attempt,
// from the same process — not a retry.
func TestRignodeKilledMidRun(t *testing.T) {
	t.Parallel()
	// Taps of 10 s: the session lasts about 40 s, past rignode's restart.
	setFaults(t, rigHostKill, `{"latency": {"tap": "200s", "peek": "60s"}}`)
	defer clearFaults(t, rigHostKill)
	create(t, newRun("e2e-rignode-kill", rigHostKill, "wifi", "Turn Wi-Fi off in Settings."))
	pod := runningPod(t, "e2e-rignode-kill-a1", time.Minute)
	before := waitCalls(t, rigHostKill, 0, 30*time.Second)

	name := "rignode-" + cluster.RigHost(rigHostKill)
	cluster.Proc(name).Kill()
	t.Logf("killed %s after %d rig calls", name, before)
	during := waitCalls(t, rigHostKill, before, 20*time.Second)
	t.Logf("%d rig calls while %s was down", during-before, name)
	if _, err := cluster.Restart(name); err != nil {
		t.Fatal(err)
	}

	// The new rignode knows the pod — it serves its log — while it still runs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cluster.Kubectl(ctxFor(t, 10*time.Second), nil, "logs", "-n", pod.Namespace, pod.Name, "--tail=1")
		p := runningPod(t, pod.Name, time.Second)
		if err == nil && containerID(p) == containerID(pod) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted rignode did not take up the running pod: logs: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	run := waitFinished(t, "e2e-rignode-kill", farmv1.RunSucceeded)
	assertOneAttempt(t, run, pod.Name)
	assertEndedAsStarted(t, pod)
	if st := rigState(t, rigHostKill); st.WiFi {
		t.Fatal("ground truth: Wi-Fi is still on")
	}
}

// The rig host's rignode paused (SIGSTOP) for two minutes: the session's
// calls keep coming during the pause, the node's NotReady spell costs the
// run nothing, and it ends DONE on its first attempt.
func TestRignodePausedMidRun(t *testing.T) {
	t.Parallel()
	// Taps of 40 s: the session outlasts the two-minute pause. (The Wi-Fi
	// task, not the timer: a 5-minute timer on the phone's fast clock would
	// ring out between two such taps.)
	setFaults(t, rigHostPause, `{"latency": {"tap": "800s", "peek": "60s"}}`)
	defer clearFaults(t, rigHostPause)
	create(t, newRun("e2e-rignode-pause", rigHostPause, "wifi", "Turn Wi-Fi off in Settings."))
	pod := runningPod(t, "e2e-rignode-pause-a1", time.Minute)
	before := waitCalls(t, rigHostPause, 0, 30*time.Second)

	p := cluster.Proc("rignode-" + cluster.RigHost(rigHostPause))
	if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(p.PID, syscall.SIGCONT)
		}
	}
	defer resume()
	paused := time.Now()
	during := waitCalls(t, rigHostPause, before+1, 2*time.Minute) // two calls at least: the session is not held up
	time.Sleep(time.Until(paused.Add(2 * time.Minute)))
	resume()
	t.Logf("%d rig calls in the first %s of the pause", during-before, time.Since(paused).Round(time.Second))

	run := waitFinished(t, "e2e-rignode-pause", farmv1.RunSucceeded)
	assertOneAttempt(t, run, pod.Name)
	if st := rigState(t, rigHostPause); st.WiFi {
		t.Fatal("ground truth: Wi-Fi is still on")
	}
}

// sessionCalls counts the calls rigsim's ledger has recorded on the rig.
func sessionCalls(t *testing.T, rigIndex int) int {
	t.Helper()
	st := simState(t, rigIndex)
	if len(st.Overlaps) > 0 {
		t.Fatalf("rigsim saw two sessions at once on %s: %+v", rig(rigIndex), st.Overlaps)
	}
	n := 0
	for _, s := range st.Sessions {
		n += s.Calls
	}
	return n
}

// waitCalls waits until the rig has recorded more than n calls, and returns how many.
func waitCalls(t *testing.T, rigIndex, n int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if got := sessionCalls(t, rigIndex); got > n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("rig %s: no call past %d in %s", rig(rigIndex), n, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func containerID(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

// assertEndedAsStarted checks that the pod, if it is still there, ended as
// the container it started with, never restarted.
func assertEndedAsStarted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	var ended corev1.Pod
	if err := cluster.Client.Get(ctxFor(t, 5*time.Second), client.ObjectKeyFromObject(pod), &ended); err == nil {
		if cs := ended.Status.ContainerStatuses; len(cs) == 1 && (cs[0].ContainerID != containerID(pod) || cs[0].RestartCount != 0) {
			t.Fatalf("the pod ended as container %q (restarts %d), want the one it started with, %q", cs[0].ContainerID, cs[0].RestartCount, containerID(pod))
		}
	}
}

// assertOneAttempt checks the run succeeded DONE on its first pod, with no
// retry pod ever made.
func assertOneAttempt(t *testing.T, run *farmv1.AgentRun, pod string) {
	t.Helper()
	if len(run.Status.Attempts) != 1 || run.Status.Attempts[0].Pod != pod || run.Status.Attempts[0].Sentinel != "DONE" {
		t.Fatalf("attempts %s; want the one DONE of %s", attemptsSummary(run), pod)
	}
	var pods corev1.PodList
	if err := cluster.Client.List(ctxFor(t, 10*time.Second), &pods, client.InNamespace(run.Namespace), client.MatchingLabels{farmv1.LabelRun: run.Name}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Name != pod {
			t.Errorf("pod %s exists beside %s: the session was retried", p.Name, pod)
		}
	}
}
