package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/clawfarm/clawfarm/internal/rignode"
)

// These tests run rignode as a real process — this test binary with
// RIGNODE_TEST_MAIN=1 — so it can be SIGKILLed and SIGSTOPped as a rig host's
// agent would be, and its pods run this binary with RIGNODE_TEST_HELPER=1 as
// a session: one "turn" appended to a file every 50 ms, each turn a 4 KiB
// line on stdout (a pipe nobody drains fills up within a second).

const helperImage = "example.com/session"

// testMain runs in place of the tests when the binary plays rignode or a
// pod's program; ok is false when it plays neither.
func testMain() (code int, ok bool) {
	switch {
	case os.Getenv("RIGNODE_TEST_MAIN") == "1":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		return run(ctx, os.Args[1:]), true
	case os.Getenv("RIGNODE_TEST_HELPER") == "1":
		return session(os.Args[1:]), true
	}
	return 0, false
}

// session is `turns FILE N`: N turns, then the termination message, exit 0.
func session(args []string) int {
	if len(args) != 3 || args[0] != "turns" {
		fmt.Fprintln(os.Stderr, "usage: turns FILE N")
		return 2
	}
	n, _ := strconv.Atoi(args[2])
	line := strings.Repeat("x", 4096)
	for i := 1; i <= n; i++ {
		f, err := os.OpenFile(args[1], os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return 3
		}
		fmt.Fprintf(f, "%d %d\n", i, time.Now().UnixNano())
		_ = f.Close()
		fmt.Printf("turn %d %s\n", i, line)
		time.Sleep(50 * time.Millisecond)
	}
	_ = os.WriteFile(os.Getenv("TERM_LOG"), []byte(fmt.Sprintf("DONE after %d turns", n)), 0o644)
	return 0
}

// host is a rignode process the test can kill, pause and start again.
type host struct {
	t                *testing.T
	args             []string
	cmd              *exec.Cmd
	log              *bytes.Buffer
	cs               kubernetes.Interface
	nodeName, shared string
}

func startHost(t *testing.T) *host {
	t.Helper()
	cfg := apiServer(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A node of the test's own on the shared API server: no other test's pods are bound to it.
	node := "restart-" + strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	h := &host{t: t, cs: kubernetes.NewForConfigOrDie(cfg), nodeName: node, shared: filepath.Join(dir, "rig")}
	h.args = []string{
		"--kubeconfig", kubeconfig, "--node-name", h.nodeName, "--node-ip", "127.0.0.1",
		"--port", fmt.Sprint(port), "--address", "127.0.0.1", "--anonymous-auth",
		"--image-map", helperImage + "=" + self, "--root-dir", filepath.Join(dir, "root"),
	}
	h.start()
	t.Cleanup(func() {
		h.stop()
		// Sessions outlive rignode by design: end what a test left running.
		rignode.StopLeftovers(filepath.Join(dir, "root"), time.Second)
	})
	return h
}

func (h *host) start() {
	h.t.Helper()
	self, _ := os.Executable()
	h.log = &bytes.Buffer{}
	h.cmd = exec.Command(self, h.args...)
	h.cmd.Env = append(os.Environ(), "RIGNODE_TEST_MAIN=1")
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.waitNodeReady()
}

func (h *host) kill() {
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_ = h.cmd.Wait()
}

func (h *host) stop() {
	if h.cmd.ProcessState == nil {
		_ = h.cmd.Process.Signal(syscall.SIGCONT)
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		_ = h.cmd.Wait()
	}
}

func (h *host) waitNodeReady() {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n, err := h.cs.CoreV1().Nodes().Get(context.Background(), h.nodeName, metav1.GetOptions{})
		if err == nil && h.cmd.ProcessState == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && time.Since(c.LastHeartbeatTime.Time) < 5*time.Second {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("rignode did not report its node Ready:\n%s", h.log.String())
}

// sessionPod runs n turns, counting them in turnsFile (under the pod's
// hostPath volume, the rig's directory).
func (h *host) sessionPod(name string, n int) *corev1.Pod {
	h.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName: h.nodeName, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](5),
			Volumes: []corev1.Volume{{Name: "rig", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: h.shared, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}},
			Containers: []corev1.Container{{
				Name: "loop", Image: helperImage + ":v1", Args: []string{"turns", "/rig/" + name + ".turns", strconv.Itoa(n)},
				Env: []corev1.EnvVar{
					{Name: "RIGNODE_TEST_HELPER", Value: "1"},
					{Name: "TERM_LOG", Value: "/dev/termination-log"},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "rig", MountPath: "/rig"}},
			}},
		},
	}
	p, err := h.cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// turns is how many turns the pod's session has taken.
func (h *host) turns(name string) int {
	b, _ := os.ReadFile(filepath.Join(h.shared, name+".turns"))
	return bytes.Count(b, []byte("\n"))
}

func (h *host) waitPod(name, what string, timeout time.Duration, ok func(*corev1.Pod) bool) *corev1.Pod {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	var p *corev1.Pod
	for time.Now().Before(deadline) {
		var err error
		if p, err = h.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); err == nil && ok(p) {
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("pod %s: not %s within %s; last status %+v\nrignode:\n%s", name, what, timeout, p.Status, h.log.String())
	return nil
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
}

// waitTurns waits until the session has taken more than n turns.
func (h *host) waitTurns(name string, n int, timeout time.Duration, while string) int {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if got := h.turns(name); got > n {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("pod %s: no turn after turn %d for %s %s", name, n, timeout, while)
	return 0
}

// A rignode SIGKILLed mid-session and started again: the session runs on
// while no rignode runs, the new rignode reports it Running (the same
// process: same container ID and start time) and then reports how it ended,
// with its termination message — not a restart, not a failure.
func TestSessionOutlivesRignodeKill(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	h.sessionPod("kill", 160) // 8 s of turns
	before := h.waitPod("kill", "Running", 30*time.Second, running)
	cs0 := before.Status.ContainerStatuses[0]
	h.waitTurns("kill", 5, 10*time.Second, "after it started")

	h.kill()
	n := h.turns("kill")
	h.waitTurns("kill", n+10, 5*time.Second, "while rignode was down")
	h.start()

	after := h.waitPod("kill", "Running again after rignode's restart", 30*time.Second, func(p *corev1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].ContainerID == cs0.ContainerID
	})
	if got := after.Status.ContainerStatuses[0]; !got.State.Running.StartedAt.Equal(&cs0.State.Running.StartedAt) || got.RestartCount != 0 {
		t.Errorf("after the restart the container is %+v, want the same run (started %s, no restart)", got, cs0.State.Running.StartedAt)
	}
	n = h.turns("kill")
	h.waitTurns("kill", n, 5*time.Second, "after rignode came back")

	done := h.waitPod("kill", "Succeeded", 30*time.Second, func(p *corev1.Pod) bool {
		return p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending
	})
	term := done.Status.ContainerStatuses[0].State.Terminated
	if done.Status.Phase != corev1.PodSucceeded || term == nil || term.ExitCode != 0 || term.Message != "DONE after 160 turns" || done.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("pod ended %s with %+v, want Succeeded, exit 0, \"DONE after 160 turns\", no restart", done.Status.Phase, term)
	}
	if got := h.turns("kill"); got != 160 {
		t.Errorf("the session took %d turns, want all 160 in one run", got)
	}
	// The log written while no rignode ran is there, from the first turn.
	logs, err := h.cs.CoreV1().Pods("default").GetLogs("kill", &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(logs, []byte("\n")); lines != 160 || !bytes.HasPrefix(logs, []byte("turn 1 ")) {
		t.Errorf("kubectl logs: %d lines starting %.10q, want 160 from turn 1", lines, logs)
	}
}

// A rignode that stalls (SIGSTOP) does not stall its sessions: nothing it
// should read fills up while it is stopped.
func TestSessionRunsOnWhileRignodePaused(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	h.sessionPod("pause", 200) // 10 s of turns
	h.waitPod("pause", "Running", 30*time.Second, running)
	h.waitTurns("pause", 3, 10*time.Second, "after it started")
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	n := h.turns("pause")
	// 60 turns of 4 KiB lines: 240 KiB, well past a pipe's 64 KiB.
	got := h.waitTurns("pause", n+60, 6*time.Second, "while rignode was stopped")
	_ = h.cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("turns while rignode was stopped: %d", got-n)
	done := h.waitPod("pause", "Succeeded", 30*time.Second, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	if done.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %+v", done.Status.Phase, done.Status.ContainerStatuses)
	}
}

// A pod deleted while rignode was away: the restarted rignode stops its
// process (it has no pod to run for), and a new pod for the same rig starts
// only once that process is gone.
func TestRestartStopsProcessesOfDeletedPods(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	h.sessionPod("old", 100000)
	h.waitPod("old", "Running", 30*time.Second, running)
	h.waitTurns("old", 3, 10*time.Second, "after it started")
	h.kill()
	if err := h.cs.CoreV1().Pods("default").Delete(context.Background(), "old", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.sessionPod("new", 20)
	h.waitPod("new", "Succeeded", 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	oldEnd := lastTurnAt(t, filepath.Join(h.shared, "old.turns"))
	newStart := firstTurnAt(t, filepath.Join(h.shared, "new.turns"))
	if !newStart.After(oldEnd) {
		t.Fatalf("the new pod's first turn (%s) came before the old pod's last (%s): two sessions on one rig", newStart, oldEnd)
	}
	n := h.turns("old")
	time.Sleep(300 * time.Millisecond)
	if h.turns("old") != n {
		t.Fatal("the deleted pod's session still runs")
	}
}

func turnTimes(t *testing.T, file string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			out = append(out, time.Unix(0, ns))
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s records no turn", file)
	}
	return out
}

func firstTurnAt(t *testing.T, file string) time.Time { return turnTimes(t, file)[0] }
func lastTurnAt(t *testing.T, file string) time.Time {
	ts := turnTimes(t, file)
	return ts[len(ts)-1]
}

// A pod created and deleted while no rignode ran (a finalizer keeps it, as
// the operator's does): the restarted rignode never starts it and reports it
// Failed, so whoever waits for it to end is not left waiting.
func TestPodDeletedBeforeItStartedIsReportedEnded(t *testing.T) {
	t.Parallel()
	h := startHost(t)
	h.kill()
	pod := h.sessionPod("never", 20)
	patch := []byte(`{"metadata":{"finalizers":["test.clawfarm.dev/keep"]}}`)
	if _, err := h.cs.CoreV1().Pods("default").Patch(context.Background(), "never", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.cs.CoreV1().Pods("default").Delete(context.Background(), "never", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.start()
	p := h.waitPod("never", "Failed", 30*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if h.turns("never") != 0 {
		t.Fatalf("the deleted pod's session ran %d turns", h.turns("never"))
	}
	t.Logf("reported: %s: %s", p.Status.Reason, p.Status.Message)
	_, _ = h.cs.CoreV1().Pods("default").Patch(context.Background(), pod.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
}
