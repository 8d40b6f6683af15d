package rignode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
)

// KubeletVersion is what rignode reports as its kubelet version.
const KubeletVersion = "v1.37.2-rignode"

// NodeConfig is everything a rignode node is made of.
type NodeConfig struct {
	Provider Config
	// Client registers the node, keeps its lease and watches its pods.
	Client kubernetes.Interface
	// Port is the kubelet API port the API server dials for logs (registered in the node's daemon endpoints).
	Port int32
	// ListenAddress is the address the kubelet API listens on (default: all addresses).
	ListenAddress string
	// Labels are added to the defaults (kubernetes.io/hostname, os, arch, type=virtual-kubelet).
	Labels map[string]string
	Taints []corev1.Taint
	// Capacity of the node: pods, cpu, memory.
	Capacity corev1.ResourceList
	// TLSCertFile and TLSKeyFile serve the kubelet API; empty: a self-signed pair for NodeIP and NodeName.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, when set, makes the kubelet API require client certificates
	// signed by it (the CA of kube-apiserver's --kubelet-client-certificate).
	ClientCAFile string
	// AnonymousAuth serves the kubelet API to anyone who can reach it (loopback dev clusters only).
	AnonymousAuth bool
	// Workers is how many pods are synced in parallel (default 4).
	Workers int
}

// NewNode builds the virtual-kubelet node (node and lease controllers, pod
// controller, kubelet API) around a Provider. Run it with Run(ctx).
func NewNode(cfg NodeConfig) (*nodeutil.Node, *Provider, error) {
	if cfg.ClientCAFile == "" && !cfg.AnonymousAuth {
		return nil, nil, fmt.Errorf("the kubelet API needs --client-ca-file (the CA that signed kube-apiserver's --kubelet-client-certificate) or, on a loopback dev cluster only, --anonymous-auth")
	}
	if cfg.Port <= 0 {
		cfg.Port = 10250
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	cfg.Provider.Client = cfg.Client
	tlsCfg, err := serverTLS(cfg)
	if err != nil {
		return nil, nil, err
	}
	var prov *Provider
	mux := http.NewServeMux()
	n, err := nodeutil.NewNode(cfg.Provider.NodeName, func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		p, err := NewProvider(cfg.Provider)
		if err != nil {
			return nil, nil, err
		}
		prov = p
		*pc.Node = NodeSpec(cfg)
		return p, nil, nil
	},
		nodeutil.WithClient(cfg.Client),
		nodeutil.AttachProviderRoutes(mux),
		func(nc *nodeutil.NodeConfig) error {
			nc.HTTPListenAddr = net.JoinHostPort(cfg.ListenAddress, fmt.Sprint(cfg.Port))
			nc.TLSConfig = tlsCfg
			nc.Handler = mux
			nc.NumWorkers = cfg.Workers
			nc.InformerResyncPeriod = time.Minute
			return nil
		},
	)
	if err != nil {
		return nil, nil, err
	}
	return n, prov, nil
}

// NodeSpec is the Node object rignode registers.
func NodeSpec(cfg NodeConfig) corev1.Node {
	name := cfg.Provider.NodeName
	labels := map[string]string{
		"type":                   "virtual-kubelet",
		"kubernetes.io/hostname": name,
		corev1.LabelOSStable:     runtime.GOOS,
		corev1.LabelArchStable:   runtime.GOARCH,
		"clawfarm.dev/rignode":   "true",
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourcePods:   resource.MustParse("110"),
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
	}
	for k, v := range cfg.Capacity {
		capacity[k] = v
	}
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	var addrs []corev1.NodeAddress
	if ip := cfg.Provider.NodeIP; ip != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	// The API server prefers the Hostname address when it dials the kubelet
	// API; register it only when the node name resolves, so logs keep working
	// through the InternalIP otherwise.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, name); err == nil {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: cfg.Taints},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses:   addrs,
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: cfg.Port},
			},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH,
				KubeletVersion: KubeletVersion, ContainerRuntimeVersion: "rignode://host-processes",
			},
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "rignode is running pods as host processes"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "rignode does not track memory pressure"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "rignode does not track disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "rignode does not track PID pressure"),
			},
		},
	}
}

func serverTLS(cfg NodeConfig) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	var pair tls.Certificate
	var err error
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		if pair, err = tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("kubelet API serving certificate: %w", err)
		}
	} else {
		var ips []net.IP
		if ip := net.ParseIP(cfg.Provider.NodeIP); ip != nil {
			ips = append(ips, ip)
		}
		ips = append(ips, net.IPv4(127, 0, 0, 1))
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(cfg.Provider.NodeName, ips, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("self-signed kubelet API certificate: %w", err)
		}
		if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return nil, err
		}
	}
	t.Certificates = []tls.Certificate{pair}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", cfg.ClientCAFile)
		}
		t.ClientCAs, t.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return t, nil
}

// ParseLabels reads "k=v,k=v".
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// ParseTaints reads "key=value:Effect,key:Effect" (kubelet's --register-with-taints).
func ParseTaints(s string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		kv, effect, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("taint %q has no effect: write key=value:NoSchedule (or PreferNoSchedule, NoExecute)", t)
		}
		switch corev1.TaintEffect(effect) {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("taint %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", t, effect)
		}
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			return nil, fmt.Errorf("taint %q has no key", t)
		}
		out = append(out, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return out, nil
}
