// Package devcluster runs clawfarm's local cluster on loopback: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, rignode (the node
// agent that runs pods as host processes), the operator installed from the
// Helm chart, modelsim (the scripted model) and rigsim (the simulated rigs),
// each rig registered as a DeviceRig. `cmd/devcluster` and the end-to-end
// suite drive it; docs/dev-cluster.md describes it.
package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

const (
	// ServiceIP is the kubernetes Service's cluster IP (first of ServiceCIDR).
	ServiceIP = "10.0.0.1"
	// ServiceCIDR is the service cluster IP range.
	ServiceCIDR = "10.0.0.0/24"
	// HostManagerUser is the client-certificate user a host-process manager runs as.
	HostManagerUser = "clawfarm-manager"
	// RigGatewayUser is the client-certificate user the rig gateway runs
	// as, bound to the chart's rig-gateway ClusterRole and nothing more.
	RigGatewayUser = "clawfarm-rig-gateway"
	// SystemNode is the untainted node: the manager and follow-up Jobs run there.
	SystemNode = "dev-system"
	// RigNode is the rig host: tainted farm.clawfarm.dev/rig, every DeviceRig
	// but those on a rig host of their own or on KubeletNode names it.
	RigNode = "dev-rig-host"
	// KubeletNode is the Linux rig host run by a real kubelet and containerd
	// (Config.KubeletRigs): its loop pods are containers.
	KubeletNode = "dev-kubelet-host"
	// KubeletSystemNode is an ordinary node run by a real kubelet and
	// containerd (Config.KubeletSystem): the chart's manager and trace
	// server run there as containers, as on a farm's own nodes.
	KubeletSystemNode = "dev-kubelet-system"
	// TaintOperator keeps every pod but the operator's own off
	// KubeletSystemNode: the follow-up Jobs and the tests' pods stay on
	// SystemNode, whose pods share the host's network.
	TaintOperator = "farm.clawfarm.dev/dev-operator"
	// LabelDevNode says which of the dev cluster's nodes a node is (system,
	// kubelet, kubelet-system…): the chart's nodeSelector on
	// KubeletSystemNode names it.
	LabelDevNode = "farm.clawfarm.dev/dev-node"
	// OperatorNamespace is where the chart installs the manager.
	OperatorNamespace = "clawfarm-system"
	// RunNamespace is where sample and test runs live unless
	// Config.Namespace says otherwise.
	RunNamespace = "default"
	// ModelSecret holds the model key every dev run references.
	ModelSecret = "model-key"
)

// Manager says how the operator runs.
type Manager string

const (
	// ManagerChart installs the operator from `helm template charts/clawfarm`:
	// the manager is a pod on the system node, run by rignode.
	ManagerChart Manager = "chart"
	// ManagerHost applies the CRDs and RBAC and runs the manager as a host
	// process (a client-certificate user bound to the manager's ClusterRole).
	ManagerHost Manager = "host"
	// ManagerNone starts the cluster without the operator, its images, the
	// rig gateway or the DeviceRigs: whoever installs the operator (the
	// install-page test, with helm) calls AddRigs afterwards.
	ManagerNone Manager = "none"
)

// Config is a dev cluster's shape.
type Config struct {
	// Root is the clawfarm checkout (where go.mod, bin/, charts/ are).
	Root string
	// Dir holds everything the cluster writes: pki/, etcd/, logs/, kubeconfig, state.json.
	Dir string
	// Rigs is how many simulated rigs (DeviceRigs rig-0 … rig-N-1).
	Rigs int
	// BasePort: every component listens on 127.0.0.1 at BasePort+offset (see Ports).
	BasePort int
	// Manager is how the operator runs (default ManagerChart).
	Manager Manager
	// Namespace holds the DeviceRigs, the model key and the runs (default
	// RunNamespace). With ManagerNone it need not exist before AddRigs.
	Namespace string
	// Scenarios is the folder of extra modelsim scenarios (default config/demo/scenarios).
	Scenarios string
	// RigProbeInterval is the operator's rig health probe period (default 2s).
	RigProbeInterval time.Duration
	// RigsimArgs are extra rigsim flags (e.g. --reply-after).
	RigsimArgs []string
	// OwnHosts are rigs that each sit on a rig host of their own (RigHost),
	// run by a rignode of its own: a test may kill or pause that node's agent
	// without touching the other rigs' sessions. The other rigs are on RigNode.
	OwnHosts []int
	// KubeletRigs are rigs on KubeletNode, a node run by a kubelet and
	// containerd (hack/build-node.sh), with host-network loop pods: a Linux
	// rig host whose phone server listens on its loopback.
	KubeletRigs []int
	// KubeletSystem runs the chart's manager (ManagerChart) and trace
	// server on KubeletSystemNode, a node run by its own kubelet and
	// containerd, as host-network containers; else rignode runs them on
	// SystemNode.
	KubeletSystem bool
	// Build runs `go build -o bin/ ./cmd/...` for the project's binaries first.
	Build bool
	// K8sDir is where the control-plane binaries are (default: hack/build-k8s.sh's answer).
	K8sDir string
	// RegistryBin is the Distribution registry (default: hack/build-registry.sh's answer).
	RegistryBin string
	// Log receives progress lines (default os.Stderr).
	Log func(format string, args ...any)
}

// Ports are the loopback ports, BasePort plus a fixed offset each.
type Ports struct {
	Etcd, EtcdPeer, APIServer, ControllerManager, Scheduler int
	SystemKubelet, RigKubelet                               int
	ManagerMetrics, ManagerProbes                           int
	Modelsim, Rigsim                                        int
	Registry                                                int
	TraceServer                                             int
	RigGateway                                              int
}

// Ports returns the port of each component.
func (c Config) Ports() Ports {
	b := c.BasePort
	return Ports{
		Etcd: b, EtcdPeer: b + 1, APIServer: b + 2, ControllerManager: b + 3, Scheduler: b + 4,
		SystemKubelet: b + 5, RigKubelet: b + 6, ManagerMetrics: b + 7, ManagerProbes: b + 8,
		Modelsim: b + 9, Rigsim: b + 10, Registry: b + 11, TraceServer: b + 12,
		RigGateway: b + 13,
	}
}

// PortCount is how many consecutive ports a cluster uses, besides one for
// each rig host of a rig's own (Config.OwnHosts), which come after them.
const PortCount = 14

// portCount is how many consecutive ports this cluster uses: one more for
// each kubelet node's kubelet, after the rigs' own hosts.
func (c Config) portCount() int {
	return PortCount + len(c.OwnHosts) + len(c.kubeletNodes())
}

// kubeletNodes are the nodes run by a kubelet and containerd: KubeletNode
// when rigs sit there, KubeletSystemNode when the operator runs there.
func (c Config) kubeletNodes() []node {
	var ns []node
	port := c.BasePort + PortCount + len(c.OwnHosts)
	if len(c.KubeletRigs) > 0 {
		ns = append(ns, node{KubeletNode, farmv1.TaintRig + "=true," + LabelDevNode + "=kubelet", farmv1.TaintRig + "=true:NoSchedule", port})
		port++
	}
	if c.KubeletSystem {
		ns = append(ns, node{KubeletSystemNode, LabelDevNode + "=" + devNodeKubeletSystem, TaintOperator + "=true:NoSchedule", port})
	}
	return ns
}

// devNodeKubeletSystem is KubeletSystemNode's LabelDevNode.
const devNodeKubeletSystem = "kubelet-system"

// isKubeletNode reports whether the node of that name is run by a kubelet
// (a node and nothing more) rather than by rignode.
func isKubeletNode(name string) bool { return name == KubeletNode || name == KubeletSystemNode }

// RigHost is the node rig i sits on: its own rig host when OwnHosts names
// it, KubeletNode when KubeletRigs does, else RigNode.
func (c Config) RigHost(i int) string {
	for _, h := range c.OwnHosts {
		if h == i {
			return fmt.Sprintf("%s-%d", RigNode, i)
		}
	}
	for _, h := range c.KubeletRigs {
		if h == i {
			return KubeletNode
		}
	}
	return RigNode
}

// OnKubelet reports whether rig i sits on the kubelet node.
func (c Config) OnKubelet(i int) bool { return c.RigHost(i) == KubeletNode }

// node is one of the cluster's nodes, each run by a rignode of its own.
type node struct {
	name, labels, taint string
	port                int
}

// nodes are the system node, the rig host and the rigs' own hosts.
func (c Config) nodes() []node {
	p := c.Ports()
	rigTaint := farmv1.TaintRig + "=true:NoSchedule"
	ns := []node{
		{SystemNode, LabelDevNode + "=system", "", p.SystemKubelet},
		{RigNode, farmv1.TaintRig + "=true", rigTaint, p.RigKubelet},
	}
	for k, i := range c.OwnHosts {
		ns = append(ns, node{c.RigHost(i), farmv1.TaintRig + "=true", rigTaint, c.BasePort + PortCount + k})
	}
	return ns
}

func nodeNames(ns []node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.name)
	}
	return out
}

// DefaultBasePort is the first port of the default cluster.
const DefaultBasePort = 17400

func (c *Config) defaults() error {
	if c.Root == "" {
		root, err := FindRoot()
		if err != nil {
			return err
		}
		c.Root = root
	}
	if c.Dir == "" {
		c.Dir = filepath.Join(c.Root, ".dev")
	}
	var err error
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return err
	}
	if c.Rigs == 0 {
		c.Rigs = 5
	}
	if c.Rigs < 1 || c.Rigs > 200 {
		return fmt.Errorf("rigs=%d: want 1 to 200", c.Rigs)
	}
	if c.BasePort == 0 {
		c.BasePort = DefaultBasePort
	}
	if c.BasePort < 1024 || c.BasePort+c.portCount() > 65535 {
		return fmt.Errorf("base port %d: want 1024 to %d", c.BasePort, 65535-c.portCount())
	}
	seen := map[int]bool{}
	for _, i := range c.OwnHosts {
		if i < 0 || i >= c.Rigs || seen[i] {
			return fmt.Errorf("own hosts %v: want distinct rigs from 0 to %d", c.OwnHosts, c.Rigs-1)
		}
		seen[i] = true
	}
	for _, i := range c.KubeletRigs {
		if i < 0 || i >= c.Rigs || seen[i] {
			return fmt.Errorf("kubelet rigs %v: want distinct rigs from 0 to %d, none of them on a host of its own (%v)", c.KubeletRigs, c.Rigs-1, c.OwnHosts)
		}
		seen[i] = true
	}
	if c.Manager == "" {
		c.Manager = ManagerChart
	}
	if c.Manager != ManagerChart && c.Manager != ManagerHost && c.Manager != ManagerNone {
		return fmt.Errorf("manager %q: want %q, %q or %q", c.Manager, ManagerChart, ManagerHost, ManagerNone)
	}
	if c.Namespace == "" {
		c.Namespace = RunNamespace
	}
	if c.Scenarios == "" {
		c.Scenarios = filepath.Join(c.Root, "config", "demo", "scenarios")
	}
	if c.RigProbeInterval == 0 {
		c.RigProbeInterval = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "[devcluster] "+format+"\n", args...) }
	}
	return nil
}

// FindRoot walks up from the working directory to the clawfarm module root.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/clawfarm/clawfarm\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside a clawfarm checkout (no go.mod of github.com/clawfarm/clawfarm above the working directory); pass --root")
		}
		dir = parent
	}
}

// RigName is the DeviceRig (and rigsim rig) name of rig i.
func RigName(i int) string { return fmt.Sprintf("rig-%d", i) }
