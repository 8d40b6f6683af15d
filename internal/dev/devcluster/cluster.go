package devcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Cluster is a running dev cluster.
type Cluster struct {
	Config
	// Kubeconfig is the user's kubeconfig (system:masters).
	Kubeconfig string
	// Client talks to the cluster as the user.
	Client client.Client

	pki     PKI
	k8s     string
	started time.Time
	mu      sync.Mutex
	procs   []*Proc
	images  map[string]string // image name → <registry>/clawfarm/<name>@sha256:…
}

// Binaries of the project the cluster runs, built into bin/.
var projectBinaries = []string{"loop", "manager", "rigsim", "modelsim", "rignode", "kubectl-claw"}

// Scheme knows the built-in kinds, the CRD kind and clawfarm's kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextv1.AddToScheme(s)
	_ = farmv1.AddToScheme(s)
	return s
}

// Up starts a dev cluster and returns once every rig is Ready. When it fails
// (or ctx ends) it stops whatever it started.
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c = &Cluster{Config: cfg, Kubeconfig: filepath.Join(cfg.Dir, "kubeconfig"), started: time.Now().UTC()}
	begin := time.Now()
	if st, err := readState(cfg.Dir); err == nil && st.anyAlive() {
		return nil, fmt.Errorf("a dev cluster is already up in %s (started %s); run `devcluster down --dir %s` first",
			cfg.Dir, st.Started.Format(time.RFC3339), cfg.Dir)
	}
	if err := c.checkPorts(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Log("stopping what was started")
			c.Down()
		}
	}()
	if err := c.prepare(ctx); err != nil {
		return c, err
	}
	steps := []struct {
		what string
		fn   func(context.Context) error
		skip bool
	}{
		{"etcd", c.startEtcd, false},
		{"kube-apiserver", c.startAPIServer, false},
		{"kube-controller-manager and kube-scheduler", c.startControllers, false},
		{"rigsim and modelsim", c.startSimulators, false},
		{"the registry and the images", c.startRegistry, false},
		{"rignode (nodes " + strings.Join(nodeNames(cfg.nodes()), ", ") + ")", c.startNodes, false},
		{"kubelet nodes " + strings.Join(nodeNames(cfg.kubeletNodes()), ", ") + " (containerd, runc)", c.startKubeletNodes, len(cfg.kubeletNodes()) == 0},
		{"the operator (" + string(cfg.Manager) + ")", c.installOperator, cfg.Manager == ManagerNone},
		{"the rig gateway", c.startRigGateway, cfg.Manager == ManagerNone},
		{fmt.Sprintf("%d DeviceRigs", cfg.Rigs), c.registerRigs, cfg.Manager == ManagerNone},
	}
	for _, s := range steps {
		if s.skip {
			continue
		}
		if err := ctx.Err(); err != nil {
			return c, fmt.Errorf("interrupted: %w", err)
		}
		t := time.Now()
		c.Log("%s …", s.what)
		if err := s.fn(ctx); err != nil {
			return c, fmt.Errorf("%s: %w", s.what, err)
		}
		c.Log("%s ready (%.1fs)", s.what, time.Since(t).Seconds())
	}
	c.Log("up in %.0fs: export KUBECONFIG=%s", time.Since(begin).Seconds(), c.Kubeconfig)
	return c, nil
}

// prepare builds what is missing, cleans the directory and writes the PKI and kubeconfigs.
func (c *Cluster) prepare(ctx context.Context) error {
	if c.Build {
		t := time.Now()
		var pkgs, names []string
		for _, b := range projectBinaries {
			if exists(filepath.Join(c.Root, "cmd", b)) {
				pkgs, names = append(pkgs, "./cmd/"+b), append(names, b)
			}
		}
		c.Log("building %s into bin/ (go build)", strings.Join(names, ", "))
		// The images' flags (static, trimmed paths): the image build then
		// reuses this build's compiled packages and only links.
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-o", filepath.Join(c.Root, "bin") + "/"}, pkgs...)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = c.Root, os.Stderr, os.Stderr
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build: %w", err)
		}
		c.Log("built in %.1fs", time.Since(t).Seconds())
	}
	for _, b := range projectBinaries {
		if !exists(c.bin(b)) {
			return fmt.Errorf("%s is missing; run `make build` (or pass --build)", c.bin(b))
		}
	}
	if c.K8sDir == "" {
		c.Log("control-plane binaries: hack/build-k8s.sh (builds them once if missing, 10-20 minutes)")
		dir, err := c.hackTool(ctx, "build-k8s.sh")
		if err != nil {
			return err
		}
		c.K8sDir = dir
	}
	c.k8s = c.K8sDir
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"} {
		if !exists(filepath.Join(c.k8s, b)) {
			return fmt.Errorf("%s is missing from %s; run hack/build-k8s.sh", b, c.k8s)
		}
	}
	for _, d := range []string{"etcd", "logs", "nodes", "rigs", "registry", "images"} {
		if err := os.RemoveAll(filepath.Join(c.Dir, d)); err != nil {
			return fmt.Errorf("clean %s: %w", d, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return err
	}
	nodes := nodeNames(append(c.nodes(), c.kubeletNodes()...))
	var err error
	if c.pki, err = EnsurePKI(filepath.Join(c.Dir, "pki"), nodes); err != nil {
		return err
	}
	server := c.APIServerURL()
	kcs := map[string]string{c.Kubeconfig: "admin"}
	for _, id := range []string{"kube-controller-manager", "kube-scheduler", "manager", "rig-gateway"} {
		kcs[c.kubeconfigOf(id)] = id
	}
	for _, n := range nodes {
		kcs[c.kubeconfigOf("node-"+n)] = "node-" + n
	}
	token, err := adminToken(c.pki)
	if err != nil {
		return err
	}
	for path, id := range kcs {
		tok := ""
		if id == "admin" {
			tok = token
		}
		if err := writeKubeconfig(path, server, c.pki, id, tok); err != nil {
			return err
		}
	}
	return c.saveState()
}

// hackTool runs one of hack/'s build scripts (it builds its tool once into
// the cache) and returns the path the script prints.
func (c *Cluster) hackTool(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "hack", script))
	cmd.Dir, cmd.Stderr = c.Root, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s: %w", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.Root, "bin", name) }

func (c *Cluster) kubeconfigOf(id string) string {
	return filepath.Join(c.Dir, "pki", id+".kubeconfig")
}

// APIServerURL is the kube-apiserver's address.
func (c *Cluster) APIServerURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", c.Ports().APIServer)
}

// ModelBaseURL is modelsim's OpenAI-compatible base URL.
func (c *Cluster) ModelBaseURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/v1", c.Ports().Modelsim)
}

// GatewayURL is the base URL of rig i behind the rig gateway, which its
// DeviceRig names (…/mcp; …/api/status, open to the manager's probes).
func (c *Cluster) GatewayURL(i int) string {
	return fmt.Sprintf("http://127.0.0.1:%d/rigs/%s/%s", c.Ports().RigGateway, c.Namespace, RigName(i))
}

// RigURL is the base URL of rig i on rigsim itself (…/mcp, …/api/status,
// …/api/sim/state): the tests' ground truth and fault injection. Loop pods
// go through the gateway (GatewayURL).
func (c *Cluster) RigURL(i int) string {
	return fmt.Sprintf("http://127.0.0.1:%d/rigs/%s", c.Ports().Rigsim, RigName(i))
}

func (c *Cluster) checkPorts() error {
	p := c.Ports()
	named := map[string]int{"etcd": p.Etcd, "etcd peer": p.EtcdPeer, "kube-apiserver": p.APIServer,
		"kube-controller-manager": p.ControllerManager, "kube-scheduler": p.Scheduler,
		"manager metrics": p.ManagerMetrics, "manager probes": p.ManagerProbes, "modelsim": p.Modelsim, "rigsim": p.Rigsim,
		"registry": p.Registry, "trace server": p.TraceServer, "rig gateway": p.RigGateway}
	for _, n := range c.nodes() {
		named["rignode "+n.name] = n.port
	}
	for _, n := range c.kubeletNodes() {
		named["kubelet "+n.name] = n.port
	}
	var taken []string
	for what, port := range named {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			taken = append(taken, fmt.Sprintf("%d (%s)", port, what))
			continue
		}
		ln.Close()
	}
	if len(taken) == 0 {
		return nil
	}
	sort.Strings(taken)
	return fmt.Errorf("ports taken: %s; is another dev cluster up? Stop it, or pick other ports with --base-port (the cluster uses %d ports from it)",
		strings.Join(taken, ", "), c.portCount())
}

func (c *Cluster) run(name, bin string, args, env []string) (*Proc, error) {
	p, err := start(c.Dir, name, bin, args, env)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, c.saveState()
}

func (c *Cluster) procsNamed(names ...string) []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Proc
	for _, p := range c.procs {
		for _, n := range names {
			if p.Name == n {
				out = append(out, p)
			}
		}
	}
	return out
}

// Proc returns the running process of a component by name (etcd,
// kube-apiserver, manager, rigsim, …), or nil.
func (c *Cluster) Proc(name string) *Proc {
	if ps := c.procsNamed(name); len(ps) > 0 {
		return ps[len(ps)-1]
	}
	return nil
}

// Restart starts again, with the same arguments, a component whose process
// has ended (a test that killed it plays the supervisor that restarts it).
func (c *Cluster) Restart(name string) (*Proc, error) {
	old := c.Proc(name)
	if old == nil {
		return nil, fmt.Errorf("no process %q in this cluster", name)
	}
	if gone, _ := old.Exited(); !gone {
		return nil, fmt.Errorf("%s (pid %d) still runs", name, old.PID)
	}
	p, err := start(c.Dir, name, old.Args[0], old.Args[1:], old.Env)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	for i := range c.procs {
		if c.procs[i] == old {
			c.procs[i] = p
		}
	}
	c.mu.Unlock()
	return p, c.saveState()
}

// Kubectl runs the cluster's kubectl as the user, with stdin, and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.k8s, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// httpsClient trusts the dev CA, or (insecure) any certificate: the
// scheduler serves a self-signed one.
func (c *Cluster) httpsClient(insecure ...bool) (*http.Client, error) {
	ca, err := os.ReadFile(c.pki.File("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(c.pki.File("admin.crt"), c.pki.File("admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify: len(insecure) > 0 && insecure[0],
	}}}, nil
}

func httpOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
