package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// More rigs sit on a node run by a real kubelet and containerd (the dev
// cluster's KubeletHost, on this test's API server), their loop pods real
// containers under runc: an image of the session program, pulled by digest
// from a registry the test starts. The kubelet and containerd are
// SIGKILLed in turn and started again 5 s later — their containers run on
// in their shims meanwhile, as on a real host — and the kubelet is paused
// once for a while. The ground truth for double sessions is the lock in
// each rig's state directory, as on rignode.

const kubeletNode = "kubelet-host"

// What `make test` names the kubelet host's tools with.
const (
	envNodeBins = "CLAWFARM_NODE_BINS" // hack/build-node.sh --print: containerd, its shim, ctr, CNI plugins, pause
	envRunc     = "RUNC"               // hack/install-runc.sh --print
	envRegistry = "CLAWFARM_REGISTRY"  // hack/build-registry.sh --print
)

// sessionUser is the session image's user, the loop image's.
const sessionUser = 65532

// loopImage is the session program, as a host binary (rignode maps the
// loop image to it) and as an image in the test's registry.
type loopImage struct {
	bin, ref, pause, registry string
	proc                      *devcluster.Proc
}

// repository is the image's name without its digest (rignode's image map key).
func (l *loopImage) repository() string { r, _, _ := strings.Cut(l.ref, "@"); return r }

// startImages builds the session program static, starts a registry on
// loopback and pushes the session and sandbox images there.
func startImages(t *testing.T, ctx context.Context, dir string) *loopImage {
	t.Helper()
	testenv.Needs(t, envNodeBins, envRunc, envRegistry)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "the kubelet host runs containerd and a kubelet, which need root")
	}
	tools := nodeTools(t)
	img := &loopImage{bin: gobuild.Build(t, "./session", "CGO_ENABLED=0"), registry: "127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))}
	var err error
	if img.proc, err = devcluster.StartRegistry(ctx, os.Getenv(envRegistry), filepath.Join(dir, "registry"), img.registry, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.proc.Stop(5 * time.Second) })
	if img.ref, err = devcluster.PushBinary(ctx, img.registry+"/clawfarm/chaos-loop:dev", img.bin, fmt.Sprintf("%d:%d", sessionUser, sessionUser)); err != nil {
		t.Fatal(err)
	}
	if img.pause, err = devcluster.PushPause(ctx, img.registry, tools); err != nil {
		t.Fatal(err)
	}
	return img
}

// nodeTools are the kubelet host's binaries, as `make test` names them.
func nodeTools(t *testing.T) devcluster.NodeTools {
	t.Helper()
	tools := devcluster.NodeTools{Kubelet: filepath.Join(os.Getenv(testenv.Assets), "kubelet"), Bins: os.Getenv(envNodeBins), Runc: os.Getenv(envRunc)}
	for _, f := range []string{tools.Kubelet, filepath.Join(tools.Bins, "containerd"), filepath.Join(tools.Bins, "containerd-shim-runc-v2"),
		filepath.Join(tools.Bins, "pause"), tools.Runc} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the kubelet host's tools: %v; run `make k8s node`", err)
		}
	}
	return tools
}

// kubeletHost is the real node and its faults.
type kubeletHost struct {
	t       *testing.T
	host    *devcluster.KubeletHost
	rigsDir string

	mu                                    sync.Mutex
	stopped                               bool
	kubeletKills, containerdKills, pauses int
	runtimeOf                             map[string]string // pod → the runtime of its container
}

// startKubeletHost starts containerd and a kubelet as the node kubeletNode,
// joined with an administrator's kubeconfig (envtest runs no Node
// authorizer), and waits for it to be Ready.
func startKubeletHost(t *testing.T, ctx context.Context, env *testenv.Env, dir string, img *loopImage) *kubeletHost {
	t.Helper()
	kcPath := kubeconfigFile(t, env, "chaos-kubelet", filepath.Join(dir, "kubelet.kubeconfig"))
	k := &kubeletHost{t: t, runtimeOf: map[string]string{}, rigsDir: filepath.Join(dir, "kubelet-rigs"), host: &devcluster.KubeletHost{
		Name: kubeletNode, Dir: filepath.Join(dir, "nodes", kubeletNode), Kubeconfig: kcPath, Tools: nodeTools(t),
		Pause: img.pause, Registry: img.registry, Port: testenv.FreePort(t),
		Taint: farmv1.TaintRig + "=true:NoSchedule", Labels: "clawfarm.dev/chaos=kubelet", Client: env.Client,
	}}
	if err := k.host.Start(ctx); err != nil {
		k.host.Stop(t.Logf)
		t.Fatalf("the kubelet host: %v", err)
	}
	return k
}

// faults SIGKILLs the kubelet and containerd in turn every killEvery, each
// started again 5 s later, and once, pauseAt into the run, stops the
// kubelet (SIGSTOP) for pauseFor.
func (k *kubeletHost) faults(ctx context.Context, killEvery, pauseAt, pauseFor time.Duration) {
	begin := time.Now()
	paused := false
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for i := 0; sleep(killEvery); i++ {
		if !paused && time.Since(begin) >= pauseAt {
			paused = true
			k.signal(k.host.Kubelet(), syscall.SIGSTOP, &k.pauses)
			sleep(pauseFor)
			k.signal(k.host.Kubelet(), syscall.SIGCONT, nil)
			continue
		}
		what, proc, count, restart := "kubelet", k.host.Kubelet(), &k.kubeletKills, func() error { return k.host.StartKubelet() }
		if i%2 == 1 {
			what, proc, count, restart = "containerd", k.host.Containerd(), &k.containerdKills, func() error { return k.host.StartContainerd(context.Background()) }
		}
		k.signal(proc, syscall.SIGKILL, count)
		sleep(5 * time.Second)
		k.mu.Lock()
		if !k.stopped {
			if err := restart(); err != nil {
				k.t.Errorf("restart the kubelet host's %s: %v", what, err)
			}
		}
		k.mu.Unlock()
	}
}

// signal sends sig to p (not its group: containerd's shims are its
// children and must outlive it) and counts it; a SIGKILL waits for p to go.
func (k *kubeletHost) signal(p *devcluster.Proc, sig syscall.Signal, count *int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	if sig == syscall.SIGKILL {
		p.Kill()
	} else {
		_ = syscall.Kill(p.PID, sig)
	}
	if count != nil {
		*count++
	}
}

// stop stops the node and its containers and fails the test if anything
// of it is left: processes, mounts, cgroups, log links.
func (k *kubeletHost) stop() {
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	k.host.Stop(k.t.Logf)
	if left := k.host.Leftovers(); len(left) > 0 {
		k.t.Errorf("the kubelet host left %s", strings.Join(left, "; "))
	}
}

// makeKubeletRig registers rig i on the kubelet host: host-network loop
// pods, as a Linux rig host's phone server listens on its loopback, and a
// state directory the rig's admin gave the loop's user.
func makeKubeletRig(t *testing.T, env *testenv.Env, k *kubeletHost, g *rigGate, i int) {
	t.Helper()
	dir := filepath.Join(k.rigsDir, rigName(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, sessionUser, sessionUser); err != nil {
		t.Fatal(err)
	}
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rigName(i)},
		Spec: farmv1.DeviceRigSpec{NodeName: kubeletNode, HostNetwork: true, Endpoint: farmv1.RigEndpoint{
			URL:       g.rigURL(i) + "/mcp",
			HealthURL: g.rigURL(i) + "/api/status",
		}},
	}
	rig.Spec.StateVolume.HostPath = dir
	if err := env.Client.Create(context.Background(), rig); err != nil {
		t.Fatal(err)
	}
}

// watchRuntimes records, until ctx ends, the runtime each of the kubelet
// host's loop pods ran its container under (the prefix of its containerID).
func (k *kubeletHost) watchRuntimes(ctx context.Context, c client.Client) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err == nil {
			k.mu.Lock()
			for _, p := range pods.Items {
				for _, s := range p.Status.ContainerStatuses {
					if rt, _, ok := strings.Cut(s.ContainerID, "://"); ok && p.Spec.NodeName == kubeletNode {
						k.runtimeOf[p.Name] = rt
					}
				}
			}
			k.mu.Unlock()
		}
		time.Sleep(time.Second)
	}
}

// runtimes counts the pods watchRuntimes saw by runtime.
func (k *kubeletHost) runtimes() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for _, rt := range k.runtimeOf {
		out[rt]++
	}
	return out
}

// The files the session program keeps in a rig's state directory
// (test/chaos/session): one line per session, one per session that found
// the rig's lock taken, and one per session's rig call with its outcome.
const (
	sessionsFile = ".chaos-sessions"
	overlapsFile = ".chaos-overlaps"
	callsFile    = ".chaos-calls"
)

// lockLines are the lines of the session program's file name (sessionsFile,
// overlapsFile) in every rig directory under rigsDir, each prefixed by its rig.
func lockLines(rigsDir, name string) []string {
	files, _ := filepath.Glob(filepath.Join(rigsDir, "*", name))
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
