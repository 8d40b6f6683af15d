//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// The rigs of the suite: one per test that runs in parallel, so each test
// owns its phone's ground truth.
const (
	rigDone = iota
	rigFail
	rigIdle
	rigStuckOnce
	rigStuckAlways
	rigWait
	rigTwoRuns
	rigManagerKill
	rigPodDelete
	rigUnready
	rigCancel
	rigHostKill
	rigHostPause
	rigBadImage
	rigLiveTrace
	rigApproval
	// Six rigs of one capped model account: see account_test.go.
	rigCap0
	rigCap1
	rigCap2
	rigCap3
	rigCap4
	rigCap5
	// On the kubelet node (containerd): see kubelet_test.go.
	rigKubeletDone
	rigKubeletRestart
	rigKubeletBadImage
	rigKubeletOOM
	// The kubelet node's twins of rignode rigs, for tests that run on
	// both (onEachHost).
	rigKubeletFail
	rigKubeletIdle
	rigKubeletStuckAlways
	rigKubeletWait
	rigKubeletCancel
	rigKubeletApproval
	rigCount
)

// kubeletRigs sit on devcluster.KubeletNode, a node run by a real kubelet
// and containerd; the others on rignode hosts.
var kubeletRigs = []int{rigKubeletDone, rigKubeletRestart, rigKubeletBadImage, rigKubeletOOM,
	rigKubeletFail, rigKubeletIdle, rigKubeletStuckAlways, rigKubeletWait, rigKubeletCancel, rigKubeletApproval}

// onEachHost runs a test on a rignode rig host (the loop a host process)
// and on the kubelet node (the loop a container under containerd), each on
// a rig of its own, in parallel. The test's rig parameter takes the name of
// the rignode rig's constant; the kubelet case's run names end in -k.
func onEachHost(t *testing.T, rignodeRig, kubeletRig int, test func(t *testing.T, rig int, sfx string)) {
	t.Parallel()
	for _, h := range []struct {
		name string
		rig  int
		sfx  string
	}{{"rignode", rignodeRig, ""}, {"kubelet", kubeletRig, "-k"}} {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			test(t, h.rig, h.sfx)
		})
	}
}

// slowTaps makes every touch take 5 s (100 s of rig time × rigsim's 0.05
// time scale), so a timer session lasts about 25 s: long enough to interfere with.
const slowTaps = `{"latency": {"tap": "100s", "peek": "60s"}}`

// crawlingTaps makes every touch take 30 s, so the four taps before a timer's
// Start take two minutes: a cancel has that long to land even while another
// test restarts the manager. The engine cuts a tap in flight at a cancel after
// its safe-point grace (25 s), so the pod still goes within the test's minute.
const crawlingTaps = `{"latency": {"tap": "600s", "peek": "60s"}}`

const runTimeout = 4 * time.Minute

func rig(i int) string { return devcluster.RigName(i) }

// newRun is an AgentRun on rig i played by modelsim scenario sim/<scenario>.
func newRun(name string, rigIndex int, scenario, trigger string) *farmv1.AgentRun {
	run := &farmv1.AgentRun{}
	run.Namespace, run.Name = devcluster.RunNamespace, name
	run.Spec.RigRef = &farmv1.RigReference{Name: rig(rigIndex)}
	run.Spec.Trigger = trigger
	run.Spec.Model = farmv1.ModelSpec{
		Provider: "openai-compatible", Name: "sim/" + scenario, BaseURL: cluster.ModelBaseURL(),
		APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: devcluster.ModelSecret}, Key: "api-key"},
	}
	run.Spec.Limits.AttemptTimeoutSeconds = 300
	return run
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func create(t *testing.T, run *farmv1.AgentRun) {
	t.Helper()
	if err := cluster.Client.Create(ctxFor(t, 30*time.Second), run); err != nil {
		t.Fatalf("create AgentRun %s: %v", run.Name, err)
	}
}

func getRun(t *testing.T, name string) *farmv1.AgentRun {
	t.Helper()
	var run farmv1.AgentRun
	if err := cluster.Client.Get(ctxFor(t, 30*time.Second), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: name}, &run); err != nil {
		t.Fatalf("get AgentRun %s: %v", name, err)
	}
	return &run
}

// waitRun polls the run until cond holds, failing the test (with the run's
// status) after timeout.
func waitRun(t *testing.T, name string, timeout time.Duration, what string, cond func(*farmv1.AgentRun) bool) *farmv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var run farmv1.AgentRun
	for {
		err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: name}, &run)
		if err == nil && cond(&run) {
			return &run
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("get %s: %v", name, err)
		}
		if time.Now().After(deadline) {
			st, _ := json.MarshalIndent(run.Status, "", "  ")
			t.Fatalf("run %s: not %s after %s; status:\n%s", name, what, timeout, st)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func finished(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() }

// waitFinished waits for a final phase and checks it is the one wanted.
func waitFinished(t *testing.T, name string, phase farmv1.RunPhase) *farmv1.AgentRun {
	t.Helper()
	run := waitRun(t, name, runTimeout, "finished", finished)
	if run.Status.Phase != phase {
		st, _ := json.MarshalIndent(run.Status, "", "  ")
		t.Fatalf("run %s finished %s, want %s; status:\n%s", name, run.Status.Phase, phase, st)
	}
	return run
}

// succeededReason is the reason of the run's Succeeded condition.
func succeededReason(r *farmv1.AgentRun) string {
	if c := meta.FindStatusCondition(r.Status.Conditions, farmv1.ConditionSucceeded); c != nil {
		return c.Reason
	}
	return ""
}

// runningPod waits until the run's attempt pod of that name is Running on its rig's node.
func runningPod(t *testing.T, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var pod corev1.Pod
	for {
		err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: name}, &pod)
		if err == nil && pod.Status.Phase == corev1.PodRunning {
			var r farmv1.DeviceRig
			if err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: pod.Labels[farmv1.LabelRig]}, &r); err != nil {
				t.Fatalf("the rig of pod %s: %v", name, err)
			}
			if pod.Spec.NodeName != r.Spec.NodeName || r.Spec.NodeName == devcluster.SystemNode {
				t.Fatalf("pod %s runs on %q, want its rig %s's node %s, a rig host", name, pod.Spec.NodeName, r.Name, r.Spec.NodeName)
			}
			return &pod
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not Running after %s (phase %q, err %v)", name, timeout, pod.Status.Phase, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// rigState is the phone's ground truth from rigsim.
func rigState(t *testing.T, rigIndex int) phone.State {
	t.Helper()
	return simState(t, rigIndex).State
}

// simState is rigsim's GET /api/sim/state: the phone and the session ledger.
func simState(t *testing.T, rigIndex int) rigsim.SimState {
	t.Helper()
	resp, err := http.Get(cluster.RigURL(rigIndex) + "/api/sim/state")
	if err != nil {
		t.Fatalf("rigsim state of %s: %v", rig(rigIndex), err)
	}
	defer resp.Body.Close()
	var st rigsim.SimState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("rigsim state of %s: %v", rig(rigIndex), err)
	}
	return st
}

func setFaults(t *testing.T, rigIndex int, faults string) {
	t.Helper()
	if err := cluster.SetRigFaults(ctxFor(t, 10*time.Second), rig(rigIndex), faults); err != nil {
		t.Fatal(err)
	}
}

func clearFaults(t *testing.T, rigIndex int) {
	t.Helper()
	if err := cluster.ClearRigFaults(ctxFor(t, 10*time.Second), rig(rigIndex)); err != nil {
		t.Fatal(err)
	}
}

// waitRigPhase waits until the DeviceRig reports phase.
func waitRigPhase(t *testing.T, rigIndex int, phase farmv1.RigPhase, timeout time.Duration) *farmv1.DeviceRig {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var r farmv1.DeviceRig
	for {
		err := cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: devcluster.RunNamespace, Name: rig(rigIndex)}, &r)
		if err == nil && r.Status.Phase == phase {
			return &r
		}
		if time.Now().After(deadline) {
			t.Fatalf("rig %s not %s after %s (phase %q, err %v)", rig(rigIndex), phase, timeout, r.Status.Phase, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// attemptsSummary is "pod:outcome(counted)" per attempt, for messages.
func attemptsSummary(r *farmv1.AgentRun) string {
	var parts []string
	for _, a := range r.Status.Attempts {
		parts = append(parts, fmt.Sprintf("%s:%s/%s(counted=%t)", a.Pod, a.Outcome, a.Sentinel, a.Counted))
	}
	return strings.Join(parts, " ")
}

// podsOf lists the attempt pods of a run.
func podsOf(t *testing.T, run string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := cluster.Client.List(ctxFor(t, 30*time.Second), &pods, client.InNamespace(devcluster.RunNamespace),
		client.MatchingLabels{farmv1.LabelRun: run}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func envOf(pod *corev1.Pod, name string) string {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// timerStarted is the ground truth of the timer scenario: a 5-minute timer was
// started (with slowed taps the phone's clock runs fast, so it may have fired).
func timerStarted(st phone.State) bool {
	return st.Timer.DurationSeconds == 300 && (st.Timer.Running || st.Timer.Fired)
}
