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
	"slices"
	"sort"
	"strconv"
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

// nodeFiles is what a kubelet node's configuration is made of.
type nodeFiles struct {
	Dir, Bins, Runc, Pause, Registry string
	Port                             int
	// Taint is the one taint the node registers with, key=value:Effect.
	Taint         string
	CA, Cert, Key string
	// Written: the files' paths.
	containerd, kubelet, socket string
}

// writeNodeFiles writes containerd's and the kubelet's configuration, the
// registry's hosts.toml and the CNI network.
func writeNodeFiles(f nodeFiles) (nodeFiles, error) {
	if err := os.RemoveAll(f.Dir); err != nil {
		return f, err
	}
	reg := filepath.Join(f.Dir, "certs.d", f.Registry)
	for _, d := range []string{reg, filepath.Join(f.Dir, "cni", "net.d"), filepath.Join(f.Dir, "kubelet"), filepath.Join(f.Dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return f, err
		}
	}
	f.socket = filepath.Join(f.Dir, "containerd.sock")
	f.containerd = filepath.Join(f.Dir, "containerd.toml")
	f.kubelet = filepath.Join(f.Dir, "kubelet.yaml")
	cgroupRoot := cgroupRootOf(f.Dir)
	writes := map[string]string{
		f.containerd:                     containerdConfig(f),
		filepath.Join(reg, "hosts.toml"): fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", f.Registry),
		filepath.Join(f.Dir, "cni", "net.d", "10-clawfarm-dev.conflist"): cniConfig(f.Dir),
		f.kubelet: kubeletConfig(f, cgroupRoot),
	}
	for path, body := range writes {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return f, err
		}
	}
	return f, nil
}

// containerdConfig keeps containerd's root, state, socket, runc's state and
// the sandboxes' network namespaces under the node's directory.
// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and without it
// every sandbox fails ("can't get final child's PID from pipe: EOF").
func containerdConfig(f nodeFiles) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %[7]q
      Root = %[8]q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[9]q]
    conf_dir = %[10]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
`, filepath.Join(f.Dir, "containerd", "root"), filepath.Join(f.Dir, "containerd", "state"),
		f.socket, f.socket+".ttrpc", f.Pause, filepath.Join(f.Dir, "certs.d"),
		f.Runc, filepath.Join(f.Dir, "runc"), filepath.Join(f.Bins, "cni"), filepath.Join(f.Dir, "cni", "net.d"))
}

// cniConfig is the pod network of the node's own-network pods: a bridge the
// node makes, with no gateway, no route and no masquerade, so such a pod
// reaches its neighbours on the bridge and nothing else — nothing it sends
// can leave the machine. The project's pods here share the host's network.
func cniConfig(nodeDir string) string {
	sum := sha256.Sum256([]byte(nodeDir))
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "clawfarm-dev",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": false, "isDefaultGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.%d.0/24"}]], "dataDir": %q}},
    {"type": "loopback"}
  ]
}
`, bridgeOf(nodeDir), sum[4], filepath.Join(nodeDir, "cni", "ipam"))
}

// kubeletConfig: on loopback, webhook authentication and authorization,
// the cgroupfs driver on this machine's cgroup v1 hierarchy (failCgroupV1:
// false), no DNS of the host's for pods, eviction only when the disk is
// nearly full, and the pods' logs under the node's directory.
func kubeletConfig(f nodeFiles, cgroupRoot string) string {
	key, rest, _ := strings.Cut(f.Taint, "=")
	value, effect, _ := strings.Cut(rest, ":")
	var x509, serving string
	if f.CA != "" {
		x509 = fmt.Sprintf("  x509: {clientCAFile: %q}\n", f.CA)
	}
	if f.Cert != "" {
		serving = fmt.Sprintf("tlsCertFile: %q\ntlsPrivateKeyFile: %q\n", f.Cert, f.Key)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
%sauthorization: {mode: Webhook}
%scontainerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: ""
podLogsDir: %q
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
registerWithTaints:
- {key: %s, value: %q, effect: %s}
`, f.Port, x509, serving, f.socket, cgroupRoot, filepath.Join(f.Dir, "pod-logs"), key, value, effect)
}

// mountinfo is /proc/self/mountinfo, each line split into its fields.
func mountinfo() [][]string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out [][]string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 5 {
			out = append(out, f)
		}
	}
	return out
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers and
// named hierarchies, and a v2 mount if there is one).
func cgroupHierarchies() []string {
	var out []string
	for _, fields := range mountinfo() {
		// The file system type follows the "-" that ends the optional fields.
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out
}

// mountsUnder are the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	var out []string
	for _, fields := range mountinfo() {
		if mp := unescapeMount(fields[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// stopContainerd stops a kubelet node's containerd (its kubelet has
// stopped already): first its containers through containerd — a kubelet
// that stops leaves them running — so their shims exit and remove their
// sockets, then containerd, then whatever is left (stopKubeletNode).
func stopContainerd(p *Proc, grace time.Duration, log func(string, ...any)) {
	nodeDir := filepath.Dir(flagValue(p.Args, "--config"))
	ctr := filepath.Join(filepath.Dir(p.Args[0]), "ctr")
	sock := filepath.Join(nodeDir, "containerd.sock")
	if gone, _ := p.Exited(); !gone && exists(ctr) {
		c := func(args ...string) []string {
			out, _ := exec.Command(ctr, append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).Output()
			return strings.Fields(string(out))
		}
		tasks := c("tasks", "ls", "-q")
		for _, id := range tasks {
			c("tasks", "kill", "--signal", "SIGKILL", id)
		}
		for _, id := range tasks {
			for i := 0; i < 50 && len(c("tasks", "delete", id)) == 0 && slices.Contains(c("tasks", "ls", "-q"), id); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	p.Stop(grace)
	runc, _ := exec.LookPath("runc")
	if n := stopKubeletNode(nodeDir, runc, log); n > 0 && log != nil {
		log("stopped %d container(s) %s left running", n, p.Name)
	}
}

// stopKubeletNode removes what a stopped kubelet node leaves, as a machine
// that powers off would lose it: its containers, their shims, every mount
// under its directory, its cgroups, its pod bridge, and what the kubelet
// writes in fixed places. It returns how many containers it stopped.
func stopKubeletNode(nodeDir, runc string, log func(string, ...any)) int {
	root := runcRoot(nodeDir)
	ids := runcContainers(runc, root)
	for _, id := range ids {
		_ = exec.Command(runc, "--root", root, "kill", id, "KILL").Run()
	}
	// The shims (and anything else started for this node) name its socket
	// or directory on their command line.
	killMatching(nodeDir, 10*time.Second)
	for _, id := range ids {
		_ = exec.Command(runc, "--root", root, "delete", "--force", id).Run()
	}
	for _, m := range mountsUnder(nodeDir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && log != nil {
			log("unmount %s: %v", m, err)
		}
	}
	cg := cgroupRootOf(nodeDir)
	for _, h := range cgroupHierarchies() {
		removeCgroupTree(filepath.Join(h, cg))
	}
	_ = exec.Command("ip", "link", "delete", bridgeOf(nodeDir)).Run()
	for _, l := range linksInto("/var/log/containers", nodeDir) {
		_ = os.Remove(l)
	}
	_ = os.Remove("/var/lib/kubelet/device-plugins/kubelet.sock")
	for _, d := range []string{"/var/log/containers", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/run/containerd/s", "/run/containerd"} {
		_ = os.Remove(d) // only when empty: another node may use it
	}
	return len(ids)
}

// runcContainers lists the containers runc keeps under root.
func runcContainers(runc, root string) []string {
	if runc == "" {
		return nil
	}
	out, err := exec.Command(runc, "--root", root, "list", "-q").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// killMatching SIGKILLs every process whose command line names dir, and
// waits up to grace for them to go.
func killMatching(dir string, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for {
		pids := processesNaming(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func processesNaming(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.Contains(string(b), dir+"/") || strings.Contains(string(b), dir+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// removeCgroupTree removes a cgroup and its children, deepest first (a
// cgroup directory goes with rmdir once it has no processes and no children).
func removeCgroupTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// linksInto are the symbolic links in dir that point under target.
func linksInto(dir, target string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if dest, err := os.Readlink(p); err == nil && strings.HasPrefix(dest, target+"/") {
			out = append(out, p)
		}
	}
	return out
}

// KubeletLeftovers says what the kubelet nodes of the cluster in dir left
// after Down: nothing, when they cleaned up as they should.
func KubeletLeftovers(dir string) []string {
	runc, _ := exec.LookPath("runc")
	var out []string
	for _, n := range []string{KubeletNode, KubeletSystemNode} {
		for _, l := range nodeLeftovers(filepath.Join(dir, "nodes", n), runc) {
			out = append(out, n+": "+l)
		}
	}
	return out
}

// nodeLeftovers says what of a stopped kubelet node is still there: its
// containers' processes, mounts, cgroups, bridge, log links. Empty: nothing.
func nodeLeftovers(nodeDir, runc string) []string {
	var out []string
	if ids := runcContainers(runc, runcRoot(nodeDir)); len(ids) > 0 {
		out = append(out, fmt.Sprintf("runc containers %v", ids))
	}
	if pids := processesNaming(nodeDir); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes %v", pids))
	}
	if m := mountsUnder(nodeDir); len(m) > 0 {
		out = append(out, fmt.Sprintf("mounts %v", m))
	}
	for _, h := range cgroupHierarchies() {
		if exists(filepath.Join(h, cgroupRootOf(nodeDir))) {
			out = append(out, "cgroup "+filepath.Join(h, cgroupRootOf(nodeDir)))
		}
	}
	if exists(filepath.Join("/sys/class/net", bridgeOf(nodeDir))) {
		out = append(out, "bridge "+bridgeOf(nodeDir))
	}
	for _, l := range linksInto("/var/log/containers", nodeDir) {
		out = append(out, "log link "+l)
	}
	return out
}
