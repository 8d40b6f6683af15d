// Command rignode is a node agent that runs pods as host processes: the
// local dev cluster's node, and a way to run loop pods on rig hosts that
// cannot run containers (macOS hosts with iPhones). See docs/rignode.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/version"
)

func main() {
	// `rignode shim <spec>` is the supervisor rignode starts for each
	// container process (docs/rignode.md, "Shims").
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(rignode.RunShim(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	if len(os.Args) > 1 && os.Args[1] == "gateway" {
		code = gateway(ctx, os.Args[2:])
	} else {
		code = run(ctx, os.Args[1:])
	}
	stop()
	os.Exit(code)
}

// runFlags are rignode's own flags (not gateway's or shim's), bound to the
// flag set newRunFlags makes: run parses its arguments with it, and the
// rig-host units' test checks config/rig-host against it.
type runFlags struct {
	kubeconfig    *string
	nodeName      *string
	nodeIP        *string
	port          *int
	address       *string
	imageMap      *string
	pullImages    *bool
	allowedImages *string
	pullBackoff   *time.Duration
	gcKeep        *int
	imageMapFile  *string
	rootDir       *string
	labels        *string
	taints        *string
	pods          *string
	cpu           *string
	memory        *string
	apiServer     *string
	tlsCert       *string
	tlsKey        *string
	clientCA      *string
	anonymous     *bool
	logMaxSize    *string
	logMaxFiles   *int
	verbose       *bool
}

// newRunFlags makes rignode's flag set.
func newRunFlags() (*flag.FlagSet, *runFlags) {
	fs := flag.NewFlagSet("rignode", flag.ContinueOnError)
	host, _ := os.Hostname()
	f := &runFlags{}
	f.kubeconfig = fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig rignode uses to reach the API server (default $KUBECONFIG)")
	f.nodeName = fs.String("node-name", strings.ToLower(host), "name of the Node to register")
	f.nodeIP = fs.String("node-ip", "", "the node's address, registered as InternalIP and used as every pod's IP (default: the local address that routes to the API server)")
	f.port = fs.Int("port", 10250, "kubelet API port (HTTPS; the API server dials it for logs)")
	f.address = fs.String("address", "", "address the kubelet API listens on (default: all)")
	f.imageMap = fs.String("image-map", "", "image=path,... : a host binary (or image root directory) that stands for an image instead of pulling it (development)")
	f.pullImages = fs.Bool("pull-images", true, "pull the images the image map does not name from their registries; false fails such pods")
	f.allowedImages = fs.String("allowed-images", "", "comma-separated image prefixes this node runs (registry.example.com/clawfarm/); empty allows any")
	f.pullBackoff = fs.Duration("image-pull-backoff", 10*time.Second, "first wait after a failed image pull; it doubles up to 5m")
	f.gcKeep = fs.Int("image-gc-keep-unused", 3, "pulled images no pod uses that are kept (the most recently used)")
	f.imageMapFile = fs.String("image-map-file", "", "file of image=path lines (# comments); --image-map entries override it")
	f.rootDir = fs.String("root-dir", "", "directory for per-pod files: volumes, logs, termination messages (default $TMPDIR/rignode-<node-name>)")
	f.labels = fs.String("node-labels", "", "extra node labels, k=v,...")
	f.taints = fs.String("register-with-taints", "", "node taints, key=value:Effect,... (e.g. farm.clawfarm.dev/rig=true:NoSchedule)")
	f.pods = fs.String("pods", "110", "pod capacity")
	f.cpu = fs.String("cpu", fmt.Sprint(runtime.NumCPU()), "cpu capacity")
	f.memory = fs.String("memory", hostMemory(), "memory capacity (default: the host's, 8Gi where it cannot be read)")
	f.apiServer = fs.String("pod-apiserver-url", "", "API server URL pods' in-cluster clients dial (default: the kubeconfig's server)")
	f.tlsCert = fs.String("tls-cert-file", "", "kubelet API serving certificate (default: self-signed)")
	f.tlsKey = fs.String("tls-private-key-file", "", "key of --tls-cert-file")
	f.clientCA = fs.String("client-ca-file", "", "require kubelet API clients to present a certificate signed by this CA (kube-apiserver's kubelet client CA)")
	f.anonymous = fs.Bool("anonymous-auth", false, "serve the kubelet API (logs) to anyone who can reach it: loopback dev clusters only")
	f.logMaxSize = fs.String("container-log-max-size", "10Mi", "size at which a container's log file is rotated (the kubelet's containerLogMaxSize)")
	f.logMaxFiles = fs.Int("container-log-max-files", 5, "log files kept per container run, the current one included (the kubelet's containerLogMaxFiles; at least 2)")
	f.verbose = fs.Bool("v", false, "debug logging")
	return fs, f
}

// run starts rignode with args and serves until ctx ends.
func run(ctx context.Context, args []string) int {
	fs, f := newRunFlags()
	if err := fs.Parse(args); err != nil {
		return 2
	}
	level := slog.LevelInfo
	if *f.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	setVKLogger(logger)
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(os.Stderr, "rignode: "+f+"\n", a...)
		return code
	}

	images := rignode.ImageMap{}
	if *f.imageMapFile != "" {
		m, err := rignode.LoadImageMapFile(*f.imageMapFile)
		if err != nil {
			return fail(2, "%v", err)
		}
		images.Merge(m)
	}
	m, err := rignode.ParseImageMap(*f.imageMap)
	if err != nil {
		return fail(2, "%v", err)
	}
	images.Merge(m)
	if len(images) == 0 && !*f.pullImages {
		return fail(2, "no way to run an image: --pull-images=false and no --image-map or --image-map-file")
	}
	if *f.gcKeep < 0 {
		return fail(2, "--image-gc-keep-unused %d: want 0 or more", *f.gcKeep)
	}
	if err := images.Validate(); err != nil {
		return fail(2, "%v", err)
	}
	nodeLabels, err := rignode.ParseLabels(*f.labels)
	if err != nil {
		return fail(2, "--node-labels: %v", err)
	}
	nodeTaints, err := rignode.ParseTaints(*f.taints)
	if err != nil {
		return fail(2, "--register-with-taints: %v", err)
	}
	capacity := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourcePods: *f.pods, corev1.ResourceCPU: *f.cpu, corev1.ResourceMemory: *f.memory} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fail(2, "--%s %q is not a quantity: %v", name, v, err)
		}
		capacity[name] = q
	}
	if *f.nodeName == "" {
		return fail(2, "--node-name is empty")
	}
	maxSize, err := resource.ParseQuantity(*f.logMaxSize)
	if err != nil || maxSize.Value() <= 0 {
		return fail(2, "--container-log-max-size %q is not a positive quantity", *f.logMaxSize)
	}
	if *f.logMaxFiles < 2 {
		return fail(2, "--container-log-max-files %d: keep at least 2 (the current file and one rotated)", *f.logMaxFiles)
	}

	if *f.kubeconfig != "" {
		// virtual-kubelet builds a default client from $KUBECONFIG before it
		// takes ours; point it at the same file so it does not warn. Pods never
		// inherit rignode's environment.
		_ = os.Setenv("KUBECONFIG", *f.kubeconfig)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: *f.kubeconfig}, nil).ClientConfig()
	if err != nil {
		return fail(2, "kubeconfig: %v (pass --kubeconfig)", err)
	}
	// The kubelet's own client rates (kubeAPIQPS 50, kubeAPIBurst 100):
	// client-go's default of 5 a second would make a rignode that restarts
	// under many pods wait minutes to read their volumes again.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fail(1, "client: %v", err)
	}
	podServer := *f.apiServer
	if podServer == "" {
		podServer = cfg.Host
	}
	ca, err := caBundle(cfg)
	if err != nil {
		return fail(2, "API server CA: %v", err)
	}
	if *f.nodeIP == "" {
		*f.nodeIP = routeTo(cfg.Host)
	}
	if *f.rootDir == "" {
		*f.rootDir = filepath.Join(os.TempDir(), "rignode-"+*f.nodeName)
	}

	n, _, err := rignode.NewNode(rignode.NodeConfig{
		Provider: rignode.Config{
			NodeName: *f.nodeName, NodeIP: *f.nodeIP, Images: images, RootDir: *f.rootDir,
			APIServer: podServer, APIServerCA: ca,
			LogMaxSize: maxSize.Value(), LogMaxFiles: *f.logMaxFiles,
			PullImages: *f.pullImages, AllowedImages: contract.SplitList(*f.allowedImages), ImagePullBackoff: *f.pullBackoff, ImageGCKeepUnused: keepUnused(*f.gcKeep),
			Logf: func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) },
		},
		Client: client, Port: int32(*f.port), ListenAddress: *f.address,
		Labels: nodeLabels, Taints: nodeTaints, Capacity: capacity,
		TLSCertFile: *f.tlsCert, TLSKeyFile: *f.tlsKey, ClientCAFile: *f.clientCA, AnonymousAuth: *f.anonymous,
	})
	if err != nil {
		return fail(2, "%v", err)
	}
	logger.Info("rignode starting", "version", version.String(), "node", *f.nodeName, "ip", *f.nodeIP, "port", *f.port, "root", *f.rootDir, "pull-images", *f.pullImages, "image-map", strings.Join(images.Images(), ","))
	go func() {
		if err := n.WaitReady(ctx, 2*time.Minute); err == nil {
			logger.Info("rignode ready", "node", *f.nodeName)
		}
	}()
	if err := n.Run(ctx); err != nil && ctx.Err() == nil {
		return fail(1, "%v", err)
	}
	return 0
}

// caBundle is the CA pods trust for the API server: the one rignode trusts.
func caBundle(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		return os.ReadFile(cfg.CAFile)
	}
	return nil, nil
}

// routeTo is the local address the host uses to reach server (no packet is sent).
func routeTo(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return "127.0.0.1"
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return "127.0.0.1"
	}
	defer func() { _ = c.Close() }()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// hostMemory is the host's memory as a quantity: MemTotal on Linux, else 8Gi.
func hostMemory() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "8Gi"
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			return f[1] + "Ki"
		}
	}
	return "8Gi"
}

// keepUnused turns the flag's count into the provider's (where 0 means the default).
func keepUnused(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// vkLoggerOnce guards virtual-kubelet's package-level logger: its
// controllers read vklog.L from their own goroutines, so it is set once per
// process, before the first of them starts (the tests run rignode several
// times in one process, concurrently).
var vkLoggerOnce sync.Once

func setVKLogger(l *slog.Logger) {
	vkLoggerOnce.Do(func() { vklog.L = vkslog.FromSlog(l) })
}
