package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// Some rigs sit on a node run by a real rignode process (bin/rignode, built
// by the test), whose attempt pods are real processes: this test binary,
// mapped as the loop image, plays a session (session below). rignode is
// SIGKILLed and started again, and paused (SIGSTOP) for a while, mid-session.
// The ground truth for "two sessions on one phone" there is a lock each
// session takes on its rig's state directory: a session that finds it taken
// writes the overlap down, and the report counts those.

const rignodeNode = "rignode-host"

// TestMain lets this binary play a loop pod's program when rignode runs it.
func TestMain(m *testing.M) {
	if os.Getenv(contract.SettingTerminationLog.Env) != "" && os.Getenv(contract.SettingRun.Env) != "" {
		os.Exit(session())
	}
	os.Exit(m.Run())
}

// session ends as its run's story says (the same stories as the fake
// kubelet's script), after 1–4 s, holding its rig's lock meanwhile.
func session() int {
	_, run, _ := strings.Cut(os.Getenv(contract.SettingRun.Env), "/")
	attempt := os.Getenv(contract.SettingAttempt.Env)
	dir := os.Getenv(contract.SettingStateDir.Env)
	lock, err := os.OpenFile(filepath.Join(dir, ".chaos-lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f, _ := os.OpenFile(filepath.Join(dir, ".chaos-overlaps"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		fmt.Fprintf(f, "%s attempt %s pod %s\n", run, attempt, os.Getenv("HOSTNAME"))
		_ = f.Close()
	}
	s := contract.Done
	switch story, _, _ := strings.Cut(run, "-"); {
	case strings.Contains(run, "-f"):
	case story == "fail":
		s = contract.Fail
	case story == "stuck" && attempt == "1":
		s = contract.Stuck
	case story == "wait":
		s = contract.Wait
	case story == "idle":
		s = contract.Idle
	}
	time.Sleep(time.Duration(1000+rand.IntN(3000)) * time.Millisecond)
	m := contract.TerminationMessage{Sentinel: s, Retryable: true, Recap: "chaos " + string(s), ExitReason: contract.ReasonEndTurn, Turns: 3}
	b, _ := m.Encode()
	if err := os.WriteFile(os.Getenv(contract.SettingTerminationLog.Env), b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return m.ExitCode()
}

// agent is the rignode process.
type agent struct {
	t       *testing.T
	bin     string
	args    []string
	root    string
	rigsDir string
	mu      sync.Mutex
	cmd     *exec.Cmd
	kills   int
	pauses  int
}

// startRignode builds bin/rignode and starts it as the node rignodeNode,
// the loop image mapped to this test binary.
func startRignode(t *testing.T, env *testenv.Env, dir string) *agent {
	t.Helper()
	bin := gobuild.Build(t, "../../cmd/rignode")
	kc, err := env.Kubeconfig("chaos-rignode")
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(dir, "rignode.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	a := &agent{t: t, bin: bin, root: filepath.Join(dir, "rignode-root"), rigsDir: filepath.Join(dir, "rigs")}
	a.args = []string{"--kubeconfig", kcPath, "--node-name", rignodeNode, "--node-ip", "127.0.0.1",
		"--port", strconv.Itoa(port), "--address", "127.0.0.1", "--anonymous-auth",
		"--image-map", "ghcr.io/clawfarm/loop=" + self, "--root-dir", a.root,
		"--register-with-taints", farmv1.TaintRig + "=true:NoSchedule"}
	a.start()
	return a
}

func (a *agent) start() {
	log, err := os.OpenFile(filepath.Join(filepath.Dir(a.root), "rignode.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		a.t.Fatal(err)
	}
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		a.t.Fatalf("start rignode: %v", err)
	}
	a.cmd = cmd
	go func() { _ = cmd.Wait(); log.Close() }()
}

// faults SIGKILLs rignode every killEvery and starts it again 5 s later,
// and once, pauseAt into the run, stops it (SIGSTOP) for pauseFor.
func (a *agent) faults(ctx context.Context, killEvery, pauseAt, pauseFor time.Duration) {
	begin := time.Now()
	paused := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(killEvery):
		}
		a.mu.Lock()
		if !paused && time.Since(begin) >= pauseAt {
			paused = true
			_ = a.cmd.Process.Signal(syscall.SIGSTOP)
			a.pauses++
			a.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(pauseFor):
			}
			a.mu.Lock()
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
			a.mu.Unlock()
			continue
		}
		_ = a.cmd.Process.Signal(syscall.SIGKILL)
		a.kills++
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		a.mu.Lock()
		a.start()
		a.mu.Unlock()
	}
}

// stop ends rignode and what it left running.
func (a *agent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	rignode.StopLeftovers(a.root, time.Second)
}

// overlaps are the sessions that found their rig's lock taken.
func (a *agent) overlaps() []string {
	files, _ := filepath.Glob(filepath.Join(a.rigsDir, "*", ".chaos-overlaps"))
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				out = append(out, filepath.Base(filepath.Dir(f))+": "+l)
			}
		}
	}
	return out
}

// makeRignodeRig registers rig i on the rignode node, its state in a host directory.
func makeRignodeRig(t *testing.T, env *testenv.Env, a *agent, i int) {
	t.Helper()
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rigName(i)},
		Spec: farmv1.DeviceRigSpec{NodeName: rignodeNode, Endpoint: farmv1.RigEndpoint{
			URL:       env.Health.URL + "/rigs/" + rigName(i) + "/mcp",
			HealthURL: env.Health.URL + "/rigs/" + rigName(i) + "/api/status",
		}},
	}
	rig.Spec.StateVolume.HostPath = filepath.Join(a.rigsDir, rigName(i))
	if err := env.Client.Create(context.Background(), rig); err != nil {
		t.Fatal(err)
	}
}

// logTail is the end of rignode's log.
func (a *agent) logTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(a.root), "rignode.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
