//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// These tests run on devcluster.KubeletNode: a real kubelet, containerd and
// runc, where the loop pods are containers and their security contexts are
// enforced — what rignode, which runs host processes, never shows.

// A DONE session in a container: the pod's own-state step gives the state
// directory (which the kubelet made root:root) to uid 65532, the loop runs
// as that user with no capabilities, no new privileges, the runtime's
// seccomp filter and a read-only root, and the timer really runs.
func TestKubeletNodeRunsTheLoopAsAContainer(t *testing.T) {
	t.Parallel()
	var node corev1.Node
	if err := cluster.Client.Get(ctxFor(t, 10*time.Second), client.ObjectKey{Name: devcluster.KubeletNode}, &node); err != nil {
		t.Fatal(err)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; rt != "containerd://2.4.2" {
		t.Fatalf("node %s runs %q, want containerd://2.4.2", node.Name, rt)
	}
	setFaults(t, rigKubeletDone, slowTaps)
	defer clearFaults(t, rigKubeletDone)
	create(t, newRun("e2e-kubelet-done", rigKubeletDone, "timer", "Set a 5 minute timer in the Clock app and start it."))
	pod := runningPod(t, "e2e-kubelet-done-a1", 2*time.Minute)
	if pod.Spec.NodeName != devcluster.KubeletNode || !pod.Spec.HostNetwork {
		t.Fatalf("pod on %s, hostNetwork %v; want %s's network", pod.Spec.NodeName, pod.Spec.HostNetwork, devcluster.KubeletNode)
	}
	if id := containerID(pod); !strings.HasPrefix(id, "containerd://") {
		t.Fatalf("the loop container is %q, not containerd's", id)
	}
	init := pod.Status.InitContainerStatuses
	if len(init) != 1 || init[0].Name != attempt.StateInitContainerName || init[0].State.Terminated == nil || init[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init containers %+v, want own-state ended 0", init)
	}

	pid, err := cluster.ContainerPID(ctxFor(t, 10*time.Second), containerID(pod))
	if err != nil {
		t.Fatal(err)
	}
	status := procStatus(t, pid)
	for field, want := range map[string]string{
		"Uid": "65532\t65532\t65532\t65532", "Gid": "65532\t65532\t65532\t65532",
		"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
	} {
		if got := status[field]; got != want {
			t.Errorf("the loop process (pid %d) %s: %q, want %q", pid, field, got, want)
		}
	}
	if opts := rootMountOptions(t, pid); !strings.Contains(","+opts+",", ",ro,") {
		t.Errorf("the loop's root file system is mounted %q, want read-only", opts)
	}

	run := waitFinished(t, "e2e-kubelet-done", farmv1.RunSucceeded)
	assertOneAttempt(t, run, pod.Name)
	if a := run.Status.Attempts[0]; a.Node != devcluster.KubeletNode || a.ExitCode == nil || *a.ExitCode != 0 {
		t.Fatalf("attempt on %s exit %v, want %s exit 0", a.Node, a.ExitCode, devcluster.KubeletNode)
	}
	fi, err := os.Stat(filepath.Join(cluster.Dir, "rigs", rig(rigKubeletDone)))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65532 || st.Gid != 65532 {
		t.Fatalf("the state directory belongs to %d:%d, want 65532:65532", st.Uid, st.Gid)
	}
	if st := rigState(t, rigKubeletDone); !timerStarted(st) {
		t.Fatalf("ground truth: timer %+v, want a running 300 s timer", st.Timer)
	}
	rigFree(t, rigKubeletDone)
}

// The kubelet SIGKILLed and started again, then containerd, while a session
// runs: the container goes on (its shim holds it), the phone stays held by
// the run, and the run ends DONE on its first attempt, from the same
// container — not a retry.
//
// It runs before the parallel tests, alone on the node: a container of
// another test that exits while containerd is down loses its exit code
// (the kubelet reports 255 and the pod Unknown; the operator still reads
// the sentinel from the termination message), which those tests' exact
// exit codes would not survive.
func TestKubeletAndContainerdRestartMidRun(t *testing.T) {
	// Taps of 10 s: the session lasts about 40 s, past both restarts.
	setFaults(t, rigKubeletRestart, `{"latency": {"tap": "200s", "peek": "60s"}}`)
	defer clearFaults(t, rigKubeletRestart)
	create(t, newRun("e2e-kubelet-restart", rigKubeletRestart, "wifi", "Turn Wi-Fi off in Settings."))
	pod := runningPod(t, "e2e-kubelet-restart-a1", 2*time.Minute)
	before := waitCalls(t, rigKubeletRestart, 0, 30*time.Second)
	pid, err := cluster.ContainerPID(ctxFor(t, 10*time.Second), containerID(pod))
	if err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"kubelet-" + devcluster.KubeletNode, "containerd-" + devcluster.KubeletNode} {
		cluster.Proc(name).Kill()
		during := waitCalls(t, rigKubeletRestart, before, 30*time.Second)
		t.Logf("killed %s after %d rig calls; %d calls while it was down", name, before, during-before)
		before = during
		if !leaseHeld(t, rigKubeletRestart) {
			t.Fatalf("with %s down the rig's Lease lost its holder", name)
		}
		restartSupervised(t, name)
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("the loop process %d is gone after %s's restart: %v", pid, name, err)
		}
	}
	run := waitFinished(t, "e2e-kubelet-restart", farmv1.RunSucceeded)
	assertOneAttempt(t, run, pod.Name)
	assertEndedAsStarted(t, pod)
	if st := rigState(t, rigKubeletRestart); st.WiFi {
		t.Fatal("ground truth: Wi-Fi is still on")
	}
	rigFree(t, rigKubeletRestart)
}

// An image the registry does not have, pulled by containerd: the own-state
// step (which runs the loop's image first) waits ErrImagePull with
// containerd's "not found", and the run fails InvalidConfig with that
// message after one attempt.
func TestKubeletMissingImageFailsInvalidConfig(t *testing.T) {
	t.Parallel()
	image := cluster.RegistryHost() + "/clawfarm/no-such-image:v0"
	run := newRun("e2e-kubelet-bad-image", rigKubeletBadImage, "timer", "Set a 5 minute timer in the Clock app and start it.")
	run.Spec.Pod = &farmv1.PodOverrides{Image: image}
	create(t, run)
	r := waitFinished(t, "e2e-kubelet-bad-image", farmv1.RunFailed)
	msg := ""
	for _, c := range r.Status.Conditions {
		if c.Type == farmv1.ConditionSucceeded {
			msg = c.Message
		}
	}
	if succeededReason(r) != farmv1.ReasonInvalidConfig || !strings.Contains(msg, image) || !strings.Contains(msg, "not found") ||
		!strings.Contains(msg, "failed to pull and unpack image") {
		t.Fatalf("reason %q message %q; want InvalidConfig with containerd's answer for %s", succeededReason(r), msg, image)
	}
	if r.Status.Attempt != 1 {
		t.Fatalf("%d attempts: a configuration error is not retried", r.Status.Attempt)
	}
	t.Logf("run: %s", msg)
	rigFree(t, rigKubeletBadImage)
}

// A pod on the node's own pod network (the sandbox image alone, not the
// host's network) has the bridge's subnet and no route beyond it, and the
// machine forwards nothing: whatever a pod sends cannot leave the machine.
func TestKubeletPodNetworkHasNoRouteOut(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = devcluster.RunNamespace, "e2e-pod-network"
	pod.Spec = corev1.PodSpec{
		NodeName:    devcluster.KubeletNode,
		Tolerations: []corev1.Toleration{{Key: farmv1.TaintRig, Operator: corev1.TolerationOpExists}},
		Containers:  []corev1.Container{{Name: "pause", Image: cluster.SandboxImage()}},
	}
	if err := cluster.Client.Create(ctxFor(t, 10*time.Second), pod); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Client.Delete(ctxFor(t, 10*time.Second), pod) }()
	deadline := time.Now().Add(time.Minute)
	for pod.Status.Phase != corev1.PodRunning {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s is %s after a minute", pod.Name, pod.Status.Phase)
		}
		time.Sleep(250 * time.Millisecond)
		if err := cluster.Client.Get(ctxFor(t, 5*time.Second), client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(pod.Status.PodIP, "10.244.") {
		t.Fatalf("pod IP %q, want one of the node's bridge (10.244.x.0/24)", pod.Status.PodIP)
	}
	pid, err := cluster.ContainerPID(ctxFor(t, 10*time.Second), containerID(pod))
	if err != nil {
		t.Fatal(err)
	}
	routes, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/route", pid))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(routes)), "\n")[1:]
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 7 && (f[1] == "00000000" || f[2] != "00000000") {
			t.Errorf("the pod has a route beyond its bridge: %s", l)
		}
	}
	if len(lines) != 1 {
		t.Errorf("the pod's routes %q, want its bridge's subnet alone", lines)
	}
	if fwd, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err != nil || strings.TrimSpace(string(fwd)) != "0" {
		t.Errorf("ip_forward = %q (%v): the machine forwards pods' packets", fwd, err)
	}
}

// restartSupervised starts a killed component again as systemd's
// Restart=always would: once more when it exits within its first seconds
// (a kubelet started the instant its runtime lost a client has been seen to
// find the CRI socket refusing it), up to five times.
func restartSupervised(t *testing.T, name string) {
	t.Helper()
	for try := 1; ; try++ {
		p, err := cluster.Restart(name)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		gone, err := p.Exited()
		if !gone {
			return
		}
		if try == 5 {
			t.Fatalf("%s exits at every start (%v): %s", name, err, p.Tail(5))
		}
		t.Logf("%s exited %v right after its start; starting it again", name, err)
	}
}

// procStatus is /proc/<pid>/status as field → value.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// rootMountOptions are the mount options of the process's root directory.
func rootMountOptions(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == "/" {
			return f[5]
		}
	}
	t.Fatalf("no / in the mounts of pid %d", pid)
	return ""
}

// oomLimit is a memory limit the own-state step fits in and the loop does
// not: the loop's container uses about 8 MB once its session runs (its
// cgroup's memory.max_usage_in_bytes), runc's init and own-state less than 6.
const oomLimit = "6Mi"

// A loop container killed by its memory limit (the kernel's OOM killer,
// which only a real node's cgroups apply): the attempt is a counted STUCK
// whose message says so, and the run goes on to a fresh attempt, which meets
// the same limit.
func TestKubeletOOMKilledLoopCountsStuck(t *testing.T) {
	t.Parallel()
	run := newRun("e2e-kubelet-oom", rigKubeletOOM, "timer", "Set a 5 minute timer in the Clock app and start it.")
	run.Spec.Limits.MaxAttempts = 2
	run.Spec.Pod = &farmv1.PodOverrides{Resources: &corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(oomLimit)},
	}}
	create(t, run)
	r := waitFinished(t, "e2e-kubelet-oom", farmv1.RunFailed)
	if succeededReason(r) != farmv1.ReasonAttemptsExhausted || len(r.Status.Attempts) != 2 {
		t.Fatalf("reason %q attempts %s; want AttemptsExhausted after 2", succeededReason(r), attemptsSummary(r))
	}
	for _, a := range r.Status.Attempts {
		if a.Sentinel != "STUCK" || !a.Counted || a.Outcome != string(farmv1.OutcomeStuck) || a.ExitCode == nil || *a.ExitCode != 137 ||
			!strings.Contains(a.Message, "out of memory") || a.Node != devcluster.KubeletNode {
			t.Fatalf("attempt %d: sentinel %q outcome %s counted %v exit %v on %s, message %q; want a counted STUCK, exit 137, out of memory, on %s",
				a.Attempt, a.Sentinel, a.Outcome, a.Counted, a.ExitCode, a.Node, a.Message, devcluster.KubeletNode)
		}
	}
	t.Logf("attempt 1: %s", r.Status.Attempts[0].Message)
	rigFree(t, rigKubeletOOM)
}
