package devcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kubelet node is a real node: kubelet v1.37 (hack/build-k8s.sh),
// containerd and its runc shim (hack/build-node.sh), runc from Debian
// (hack/install-runc.sh), the sandbox image built from the kubernetes
// module's pause.c and pushed to the cluster's registry. Everything it
// writes stays under <dir>/nodes/<node>/, but for what a kubelet and runc
// put in fixed places — /var/log/containers, /var/lib/kubelet/device-plugins,
// the shims' sockets under /run/containerd/s, its cgroups — which Down
// removes (stopKubeletNode). docs/dev-cluster.md, "The kubelet nodes".

// nodeDir is where a kubelet node keeps its files.
func (c *Cluster) nodeDir(node string) string { return filepath.Join(c.Dir, "nodes", node) }

// SandboxImage is the kubelet node's sandbox (pause) image, by digest in
// the cluster's registry.
func (c *Cluster) SandboxImage() string { return c.Image("pause") }

// ContainerPID is the host pid of a running container of one of the
// cluster's kubelet nodes (its pod status's containerID,
// containerd://<id>), as runc reports it.
func (c *Cluster) ContainerPID(ctx context.Context, containerID string) (int, error) {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok {
		return 0, fmt.Errorf("container %q is not containerd's", containerID)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return 0, err
	}
	var out []byte
	for _, n := range c.kubeletNodes() {
		if out, err = exec.CommandContext(ctx, runc, "--root", runcRoot(c.nodeDir(n.name)), "state", id).Output(); err == nil {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("runc state %s: %w", id, err)
	}
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("runc state %s: %w", id, err)
	}
	if st.Status != "running" || st.Pid <= 0 {
		return 0, fmt.Errorf("container %s is %s", id, st.Status)
	}
	return st.Pid, nil
}

// runcRoot is where runc keeps the state of the node's containers: the
// shim puts the containerd namespace (the CRI's k8s.io) under its Root.
func runcRoot(nodeDir string) string { return filepath.Join(nodeDir, "runc", "k8s.io") }

// nodeTag names what a node makes outside its directory — its cgroup root
// and its pod bridge — after the directory, so two clusters never share them.
func nodeTag(nodeDir string) string {
	sum := sha256.Sum256([]byte(nodeDir))
	return hex.EncodeToString(sum[:4])
}

func cgroupRootOf(nodeDir string) string { return "clawfarm-" + nodeTag(nodeDir) }

// bridgeOf is the pod bridge's name (at most 15 bytes, the kernel's limit).
func bridgeOf(nodeDir string) string { return "cf" + nodeTag(nodeDir) }

// NodeTools are the binaries a kubelet node runs: the kubelet
// (hack/build-k8s.sh), containerd, its runc shim, ctr, the CNI plugins and
// pause in Bins (hack/build-node.sh), and runc (hack/install-runc.sh).
type NodeTools struct{ Kubelet, Bins, Runc string }

// startKubeletNodes builds what is missing, pushes the sandbox image and
// starts each kubelet node.
func (c *Cluster) startKubeletNodes(ctx context.Context) error {
	bins, err := c.hackTool(ctx, "build-node.sh")
	if err != nil {
		return err
	}
	runc, err := c.hackTool(ctx, "install-runc.sh")
	if err != nil {
		return err
	}
	tools := NodeTools{Kubelet: filepath.Join(c.k8s, "kubelet"), Bins: bins, Runc: runc}
	if !exists(tools.Kubelet) {
		return fmt.Errorf("%s is missing; run hack/build-k8s.sh", tools.Kubelet)
	}
	pause, err := PushPause(ctx, c.RegistryHost(), tools)
	if err != nil {
		return fmt.Errorf("the sandbox image: %w", err)
	}
	c.mu.Lock()
	c.images["pause"] = pause
	c.mu.Unlock()
	for _, n := range c.kubeletNodes() {
		h := &KubeletHost{
			Name: n.name, Dir: c.nodeDir(n.name), Kubeconfig: c.kubeconfigOf("node-" + n.name),
			Tools: tools, Pause: pause, Registry: c.RegistryHost(), Port: n.port, Taint: n.taint, Labels: n.labels,
			CA: c.pki.File("ca.crt"), Cert: c.pki.File("node-" + n.name + ".crt"), Key: c.pki.File("node-" + n.name + ".key"),
			Client: c.Client, Run: c.run,
		}
		if err := h.Start(ctx); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	return nil
}

// KubeletHost is one real node: a containerd and a kubelet whose files stay
// under Dir. The dev cluster's kubelet nodes are KubeletHosts; a test on an
// API server of its own (the chaos benchmark's envtest) starts one the same
// way, with its own kubeconfig, registry and sandbox image.
type KubeletHost struct {
	Name string
	// Dir holds the node's configuration, containerd's and runc's state,
	// the kubelet's root and the pods' logs; Start empties it first.
	Dir string
	// Kubeconfig is the kubelet's: a node's own client certificate where
	// the API server runs the Node authorizer.
	Kubeconfig string
	Tools      NodeTools
	// Pause is the sandbox image, Registry the plain-HTTP registry
	// (host:port) the node pulls from.
	Pause, Registry string
	// Port is the kubelet's, on 127.0.0.1.
	Port int
	// Taint is the one taint the node registers with (key=value:Effect),
	// Labels its labels (k=v,...).
	Taint, Labels string
	// CA verifies the clients of the kubelet's API (the API server's);
	// Cert and Key are what it serves. Empty: no client certificates are
	// accepted and the kubelet serves a certificate it signs itself.
	CA, Cert, Key string
	// Client initializes the node, as a cloud provider would.
	Client client.Client
	// Run starts one of the host's processes; nil: start, logging under Dir/logs.
	Run func(name, bin string, args, env []string) (*Proc, error)

	files               nodeFiles
	containerd, kubelet *Proc
}

// Start writes the node's files and starts its containerd and kubelet,
// then gives the node its address — acting as its cloud provider — and
// waits for it to be Ready.
func (h *KubeletHost) Start(ctx context.Context) error {
	files, err := writeNodeFiles(nodeFiles{
		Dir: h.Dir, Bins: h.Tools.Bins, Runc: h.Tools.Runc, Pause: h.Pause, Registry: h.Registry,
		Port: h.Port, Taint: h.Taint, CA: h.CA, Cert: h.Cert, Key: h.Key,
	})
	if err != nil {
		return err
	}
	h.files = files
	// The kubelet wants its cgroup root in every hierarchy before it starts.
	for _, d := range cgroupHierarchies() {
		if err := os.MkdirAll(filepath.Join(d, cgroupRootOf(h.Dir)), 0o755); err != nil {
			return fmt.Errorf("the node's cgroup root: %w", err)
		}
	}
	if err := h.StartContainerd(ctx); err != nil {
		return err
	}
	if err := h.StartKubelet(); err != nil {
		return err
	}
	watch := []*Proc{h.containerd, h.kubelet}
	var node corev1.Node
	if err := waitFor(ctx, "the node registered", time.Minute, watch, func() error {
		return h.Client.Get(ctx, client.ObjectKey{Name: h.Name}, &node)
	}); err != nil {
		return err
	}
	if err := initializeNode(ctx, h.Client, h.Name); err != nil {
		return err
	}
	return waitFor(ctx, "the node Ready", time.Minute, watch, func() error {
		if err := h.Client.Get(ctx, client.ObjectKey{Name: h.Name}, &node); err != nil {
			return err
		}
		if !nodeReady(&node) {
			return fmt.Errorf("node %s is not Ready", h.Name)
		}
		return nil
	})
}

func (h *KubeletHost) run(name, bin string, args, env []string) (*Proc, error) {
	if h.Run != nil {
		return h.Run(name, bin, args, env)
	}
	return start(h.Dir, name, bin, args, env)
}

// StartContainerd starts the node's containerd (again, after a crash: the
// shims kept the containers running, and it finds them) and waits until it
// answers.
func (h *KubeletHost) StartContainerd(ctx context.Context) error {
	bins := h.Tools.Bins
	p, err := h.run("containerd-"+h.Name, filepath.Join(bins, "containerd"), []string{"--config=" + h.files.containerd},
		[]string{"PATH=" + bins + ":" + os.Getenv("PATH")})
	if err != nil {
		return err
	}
	h.containerd = p
	return waitFor(ctx, "containerd", 30*time.Second, []*Proc{p}, func() error {
		out, err := exec.CommandContext(ctx, filepath.Join(bins, "ctr"), "--address", h.files.socket, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr version: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// StartKubelet starts the node's kubelet (again, after a crash: it finds
// its pods' containers in containerd and goes on with them).
func (h *KubeletHost) StartKubelet() error {
	args := []string{
		"--config=" + h.files.kubelet, "--kubeconfig=" + h.Kubeconfig,
		"--root-dir=" + filepath.Join(h.Dir, "kubelet"), "--hostname-override=" + h.Name,
		// --node-ip refuses a loopback address: the node's address is set
		// by initializeNode, as a cloud provider would.
		"--cloud-provider=external",
		"--node-labels=" + h.Labels,
		"--v=1",
	}
	if h.Cert == "" {
		args = append(args, "--cert-dir="+filepath.Join(h.Dir, "kubelet", "pki"))
	}
	p, err := h.run("kubelet-"+h.Name, h.Tools.Kubelet, args, nil)
	if err != nil {
		return err
	}
	h.kubelet = p
	return nil
}

// Containerd and Kubelet are the node's processes, as last started.
func (h *KubeletHost) Containerd() *Proc { return h.containerd }
func (h *KubeletHost) Kubelet() *Proc    { return h.kubelet }

// Stop stops the kubelet, then containerd and the node's containers, and
// removes what the node made outside Dir (stopKubeletNode).
func (h *KubeletHost) Stop(log func(string, ...any)) {
	if h.kubelet != nil {
		_ = syscall.Kill(h.kubelet.PID, syscall.SIGCONT) // a paused kubelet cannot stop
		h.kubelet.Stop(10 * time.Second)
	}
	if h.containerd != nil {
		_ = syscall.Kill(h.containerd.PID, syscall.SIGCONT)
		stopContainerd(h.containerd, 10*time.Second, log)
		return
	}
	runc, _ := exec.LookPath("runc")
	stopKubeletNode(h.Dir, runc, log)
}

// Leftovers says what of the stopped node is still there (nodeLeftovers):
// nothing, when it cleaned up as it should.
func (h *KubeletHost) Leftovers() []string { return nodeLeftovers(h.Dir, h.Tools.Runc) }

// initializeNode does a cloud provider's part for a kubelet started with
// --cloud-provider=external: the node's InternalIP (127.0.0.1, which the
// kubelet cannot set itself) and the end of the uninitialized taint.
func initializeNode(ctx context.Context, c client.Client, name string) error {
	return waitFor(ctx, "node "+name+" initialized", 30*time.Second, nil, func() error {
		var node corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			return err
		}
		base := node.DeepCopy()
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}}
		if err := c.Status().Patch(ctx, &node, client.MergeFrom(base)); err != nil {
			return err
		}
		base = node.DeepCopy()
		var keep []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != "node.cloudprovider.kubernetes.io/uninitialized" {
				keep = append(keep, t)
			}
		}
		node.Spec.Taints = keep
		return c.Patch(ctx, &node, client.MergeFrom(base))
	})
}
