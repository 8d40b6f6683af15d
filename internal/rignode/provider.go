// Package rignode is a virtual-kubelet provider that runs each pod's
// containers as processes on the host: the dev cluster's node, and a way to
// run loop pods on rig hosts that cannot run containers (macOS hosts with iPhones).
//
// A container's image is pulled from its registry and unpacked into a root
// shared by the pods that run it (images.go); the image map (ImageMap) can
// stand a host binary in for an image instead, for development. Volumes are
// materialised under a per-pod directory and the paths a container expects
// are rewritten into it (PathMap); a pod with a service-account token gets a
// kubeconfig and KUBECONFIG.
package rignode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Config configures a Provider.
type Config struct {
	// NodeName is the node this provider runs pods for.
	NodeName string
	// NodeIP is the node's address; processes share the host network, so it is also every pod's IP.
	NodeIP string
	// Images maps images to host binaries: a development override of pulls.
	Images ImageMap
	// PullImages pulls the images the image map does not name from their
	// registries (images.go); without it such an image fails the pod.
	PullImages bool
	// AllowedImages are the image prefixes this node runs; empty allows any.
	AllowedImages []string
	// ImagePullBackoff is the first wait after a failed pull (default 10s,
	// the kubelet's); it doubles up to 5 minutes.
	ImagePullBackoff time.Duration
	// ImageGCKeepUnused is how many images no pod uses are kept (default 3; negative: none).
	ImageGCKeepUnused int
	// RegistryTransport carries registry requests (default: go-containerregistry's).
	RegistryTransport http.RoundTripper
	// RootDir holds one directory per pod (volumes, logs, termination messages, kubeconfig).
	RootDir string
	// Client reads ConfigMaps, Secrets and claims for volumes and requests service-account tokens.
	Client kubernetes.Interface
	// APIServer is the URL pods' in-cluster clients dial (kubeconfig server,
	// KUBERNETES_SERVICE_HOST/PORT); empty leaves those unset.
	APIServer string
	// APIServerCA is the PEM bundle pods trust for APIServer.
	APIServerCA []byte
	// BaseEnv is the environment every process starts from (default: PATH of rignode).
	BaseEnv []string
	// RestartBackoff is the first delay before a container restarts; it doubles up to MaxRestartBackoff.
	RestartBackoff, MaxRestartBackoff time.Duration
	// ShimCommand starts a container's shim (shim.go), the spec file appended
	// (default: this program with the argument "shim").
	ShimCommand []string
	// LogMaxSize is the size at which a container's log is rotated (default
	// 10 MiB; the kubelet's containerLogMaxSize); LogMaxFiles how many files
	// of one run's log are kept, the current one included (default 5).
	LogMaxSize  int64
	LogMaxFiles int
	// Logf logs rignode's own messages.
	Logf func(format string, args ...any)
}

// Provider runs pods as host processes. It implements virtual-kubelet's
// nodeutil.Provider and node.PodNotifier.
type Provider struct {
	cfg Config

	mu   sync.Mutex
	pods map[string]*podRun // namespace/name → run
	gone map[string]*podRun // uid → run of a pod no longer in the API whose processes are being stopped
	// creating are the pods CreatePod is preparing (uid), not yet in pods.
	creating map[string]bool
	notify   func(*corev1.Pod)
	excl     sync.Mutex // see startExclusive
	images   *imageStore
}

// NewProvider checks cfg and returns a provider.
func NewProvider(cfg Config) (*Provider, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("rignode: node name is empty")
	}
	if cfg.Client == nil {
		return nil, fmt.Errorf("rignode: no Kubernetes client")
	}
	if cfg.RootDir == "" {
		return nil, fmt.Errorf("rignode: root directory is empty")
	}
	abs, err := filepath.Abs(cfg.RootDir)
	if err != nil {
		return nil, err
	}
	cfg.RootDir = abs
	// Pod directories hold Secrets: only rignode's user may enter them.
	pods := filepath.Join(cfg.RootDir, "pods")
	if err := os.MkdirAll(pods, 0o700); err != nil {
		return nil, fmt.Errorf("rignode: root directory: %w", err)
	}
	if err := os.Chmod(pods, 0o700); err != nil {
		return nil, fmt.Errorf("rignode: root directory: %w", err)
	}
	if cfg.BaseEnv == nil {
		cfg.BaseEnv = []string{"PATH=" + os.Getenv("PATH")}
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = time.Second
	}
	if cfg.MaxRestartBackoff <= 0 {
		cfg.MaxRestartBackoff = 5 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if len(cfg.ShimCommand) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("rignode: find its own program to run shims: %w", err)
		}
		cfg.ShimCommand = []string{self, "shim"}
	}
	if cfg.LogMaxSize == 0 {
		cfg.LogMaxSize = 10 << 20
	}
	if cfg.LogMaxFiles == 0 {
		cfg.LogMaxFiles = 5
	}
	if cfg.ImagePullBackoff <= 0 {
		cfg.ImagePullBackoff = defaultImagePullBackoff
	}
	switch {
	case cfg.ImageGCKeepUnused == 0:
		cfg.ImageGCKeepUnused = defaultImageGCKeepUnused
	case cfg.ImageGCKeepUnused < 0:
		cfg.ImageGCKeepUnused = 0
	}
	p := &Provider{cfg: cfg, pods: map[string]*podRun{}, gone: map[string]*podRun{}, creating: map[string]bool{}}
	if cfg.PullImages {
		if p.images, err = newImageStore(filepath.Join(cfg.RootDir, "images"), cfg.ImageGCKeepUnused, cfg.RegistryTransport, cfg.Logf); err != nil {
			return nil, err
		}
	}
	if err := p.recover(context.Background()); err != nil {
		return nil, err
	}
	return p, nil
}

// gcImages deletes pulled images no pod on this node uses, beyond the
// most recently used few.
func (p *Provider) gcImages() {
	if p.images == nil {
		return
	}
	p.mu.Lock()
	var runs []*podRun
	for _, r := range p.pods {
		runs = append(runs, r)
	}
	for _, r := range p.gone {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	inUse := map[string]bool{}
	for _, r := range runs {
		r.mu.Lock()
		for _, c := range r.containers() {
			if c.rootDigest != "" {
				inUse[c.rootDigest] = true
			}
		}
		r.mu.Unlock()
	}
	p.images.gc(inUse)
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// CreatePod prepares the pod's directory and volumes and starts its containers.
// An error here (unknown image, missing volume source) marks the pod Failed.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	if r, ok := p.pods[key]; ok && r.pod.UID == pod.UID {
		p.mu.Unlock()
		return nil
	}
	p.creating[string(pod.UID)] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.creating, string(pod.UID))
		p.mu.Unlock()
	}()

	r, err := newPodRun(ctx, p, pod.DeepCopy())
	if err != nil {
		p.cfg.Logf("pod %s: %v", key, err)
		return err
	}
	p.mu.Lock()
	if old, ok := p.pods[key]; ok {
		// A pod of the same name from before (another UID): finish it off,
		// or just clear its files away when it has ended.
		if old.ended() {
			go old.cleanup()
		} else {
			p.gone[string(old.pod.UID)] = old
			go p.retire(old)
		}
	}
	p.pods[key] = r
	p.mu.Unlock()
	go r.run()
	return nil
}

// retire stops a pod replaced by one of the same name and forgets it once
// its processes are gone.
func (p *Provider) retire(r *podRun) {
	r.markDeleted()
	r.terminate(deletionGrace(r.snapshot()))
	<-r.finished
	p.mu.Lock()
	delete(p.gone, string(r.pod.UID))
	p.mu.Unlock()
	r.cleanup()
}

// UpdatePod takes the fields that may change on a running pod (activeDeadlineSeconds).
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	r := p.get(pod.Namespace, pod.Name)
	if r == nil {
		return errdefs.NotFoundf("pod %s/%s is not running on this node", pod.Namespace, pod.Name)
	}
	r.update(pod)
	return nil
}

// DeletePod starts a graceful stop (SIGTERM, then SIGKILL after the grace
// period) of a running pod; for a pod that has ended it removes its directory.
func (p *Provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	r := p.get(pod.Namespace, pod.Name)
	if r == nil || r.pod.UID != pod.UID && pod.UID != "" {
		return errdefs.NotFoundf("pod %s is not running on this node", key)
	}
	if !r.ended() {
		r.markDeleted()
		r.terminate(deletionGrace(pod))
		// The pod's status keeps flowing until the process is gone; the pod
		// controller deletes the API object after the grace period.
		if pod.DeletionTimestamp != nil {
			return nil
		}
		<-r.finished
	}
	p.mu.Lock()
	if p.pods[key] == r {
		delete(p.pods, key)
	}
	p.mu.Unlock()
	r.cleanup()
	return nil
}

// GetPod returns the pod with the status rignode sees.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	r := p.get(namespace, name)
	if r == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not running on this node", namespace, name)
	}
	return r.snapshot(), nil
}

// GetPodStatus returns the pod's status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the pods rignode knows.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	runs := make([]*podRun, 0, len(p.pods))
	for _, r := range p.pods {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.snapshot())
	}
	sort.Slice(out, func(i, j int) bool {
		return podKey(out[i].Namespace, out[i].Name) < podKey(out[j].Namespace, out[j].Name)
	})
	return out, nil
}

// NotifyPods registers the callback that receives every status change.
func (p *Provider) NotifyPods(ctx context.Context, f func(*corev1.Pod)) {
	go p.watchDeletions(ctx)
	p.mu.Lock()
	p.notify = f
	runs := make([]*podRun, 0, len(p.pods))
	for _, r := range p.pods {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	// Pods adopted before anyone listened: say how they stand now. Not here:
	// NotifyPods must not block, and f may (it waits for the pod to be known).
	go func() {
		for _, r := range runs {
			f(r.snapshot())
		}
	}()
}

func (p *Provider) publish(pod *corev1.Pod) {
	p.mu.Lock()
	f := p.notify
	p.mu.Unlock()
	if f != nil {
		f(pod)
	}
}

func (p *Provider) get(namespace, name string) *podRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[podKey(namespace, name)]
}

// GetContainerLogs streams a container's log (tail, since, timestamps, limit, previous, follow).
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	r := p.get(namespace, podName)
	if r == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not running on this node", namespace, podName)
	}
	path, done, err := r.logFile(containerName, opts.Previous)
	if err != nil {
		return nil, errdefs.AsNotFound(err)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(streamLog(ctx, path, opts, done, pw))
	}()
	return pr, nil
}

// RunInContainer is not supported: a host process has no container to exec into.
func (p *Provider) RunInContainer(context.Context, string, string, string, []string, api.AttachIO) error {
	return errdefs.InvalidInput("rignode does not support exec: pods are host processes")
}

// AttachToContainer is not supported.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("rignode does not support attach: pods are host processes")
}

// GetStatsSummary reports the node and its pods without resource figures.
func (p *Provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	pods, _ := p.GetPods(ctx)
	s := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.cfg.NodeName}}
	for _, pod := range pods {
		s.Pods = append(s.Pods, statsv1alpha1.PodStats{PodRef: statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)}})
	}
	return s, nil
}

// GetMetricsResource reports no resource metrics.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}
