package chaos

import (
	"context"
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
	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// Some rigs sit on a node run by a real rignode process (bin/rignode, built
// by the test), whose attempt pods are real processes: the session program
// (test/chaos/session), mapped as the loop image, plays a session. rignode
// is SIGKILLed and started again, and paused (SIGSTOP) for a while,
// mid-session. The ground truth for "two sessions on one phone" there is a
// lock each session takes on its rig's state directory: a session that
// finds it taken writes the overlap down, and the report counts those.

const rignodeNode = "rignode-host"

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
// the loop image mapped to the session program.
func startRignode(t *testing.T, env *testenv.Env, dir string, img *loopImage) *agent {
	t.Helper()
	bin := gobuild.Build(t, "../../cmd/rignode")
	kcPath := kubeconfigFile(t, env, "chaos-rignode", filepath.Join(dir, "rignode.kubeconfig"))
	a := &agent{t: t, bin: bin, root: filepath.Join(dir, "rignode-root"), rigsDir: filepath.Join(dir, "rigs")}
	a.args = []string{"--kubeconfig", kcPath, "--node-name", rignodeNode, "--node-ip", "127.0.0.1",
		"--port", strconv.Itoa(testenv.FreePort(t)), "--address", "127.0.0.1", "--anonymous-auth",
		"--image-map", img.repository() + "=" + img.bin, "--root-dir", a.root,
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

// makeRignodeRig registers rig i on the rignode node, its state in a host directory.
func makeRignodeRig(t *testing.T, env *testenv.Env, a *agent, g *rigGate, i int) {
	t.Helper()
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rigName(i)},
		Spec: farmv1.DeviceRigSpec{NodeName: rignodeNode, Endpoint: farmv1.RigEndpoint{
			URL:       g.rigURL(i) + "/mcp",
			HealthURL: g.rigURL(i) + "/api/status",
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
