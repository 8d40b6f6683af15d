package rignode

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Termination message limits (the kubelet's): 4096 bytes from the file; with
// FallbackToLogsOnError, the last 80 lines or 2048 bytes of the log.
const (
	maxTerminationMessage = 4096
	fallbackLogLines      = 80
	fallbackLogBytes      = 2048
	// volumeSourceWait is how long a pod waits for a missing ConfigMap or Secret before it fails.
	volumeSourceWait = 30 * time.Second
)

// Pod-level reasons rignode sets.
const (
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonNodeRestarted    = "RignodeRestarted"
)

// podRun is one pod on this node: its directory, its containers, its status.
type podRun struct {
	p   *Provider
	dir string

	mu       sync.Mutex
	pod      *corev1.Pod // spec as created; status as rignode sees it
	inits    []*container
	regular  []*container
	deleted  bool
	deadline bool
	stopOnce sync.Once
	stop     chan struct{} // closed once the pod must stop: no more restarts
	finished chan struct{} // closed when run returns
	cancel   context.CancelFunc
	timer    *time.Timer
	orphaned string // message when the pod was started by an earlier rignode whose processes cannot be adopted
	adopted  bool   // started by an earlier rignode; its processes are taken up (adopt.go)
	// exclusive are the host paths (hostPath and host-backed claims, mounted
	// read-write) that one pod at a time may use on this node (exclusive.go).
	exclusive []string
}

func newPodRun(ctx context.Context, p *Provider, pod *corev1.Pod) (*podRun, error) {
	r := &podRun{
		p:        p,
		pod:      pod,
		dir:      filepath.Join(p.cfg.RootDir, "pods", string(pod.UID)),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	// A pod whose record is on disk, or that the API says started, was
	// taken on by an earlier rignode: its processes are adopted from the
	// files their shims keep. (The record is written before any process
	// starts, so a rignode that died before it could report Running is
	// covered too.)
	adopting := pod.Status.StartTime != nil || exists(filepath.Join(r.dir, podRecordFile))
	if adopting && !exists(filepath.Join(r.dir, "containers")) {
		r.orphaned = fmt.Sprintf("rignode restarted while the pod ran on %s and found none of its files under %s", p.cfg.NodeName, r.dir)
		return r, nil
	}
	if err := os.MkdirAll(filepath.Join(r.dir, "containers"), 0o755); err != nil {
		return nil, fmt.Errorf("pod directory: %w", err)
	}
	// fail gives up on the pod: a new one leaves nothing behind; one being
	// adopted keeps its files, and its processes are stopped.
	fail := func(err error) (*podRun, error) {
		if !adopting {
			_ = os.RemoveAll(r.dir)
			return nil, err
		}
		r.orphaned = fmt.Sprintf("rignode restarted while the pod ran on %s and cannot take it up again: %v; its processes were stopped", p.cfg.NodeName, err)
		r.killLeftovers()
		return r, nil
	}
	vb := &volumeBuilder{client: p.cfg.Client, pod: pod, dir: filepath.Join(r.dir, "volumes"), adopting: adopting}
	vs, err := vb.build(ctx)
	// A volume source that does not exist yet (a namespace's kube-root-ca.crt,
	// a Secret created just after the pod) gets a while, as the kubelet waits.
	for wait := time.Now().Add(volumeSourceWait); err != nil && apierrors.IsNotFound(err) && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
		vs, err = vb.build(ctx)
	}
	if err != nil {
		return fail(err)
	}
	kubeconfig := ""
	if vs.tokenFile != "" && p.cfg.APIServer != "" {
		kubeconfig = filepath.Join(r.dir, "kubeconfig")
		if err := r.writeKubeconfig(kubeconfig, vs.tokenFile); err != nil {
			return fail(err)
		}
	}
	for i := range pod.Spec.InitContainers {
		c, err := r.newContainer(&pod.Spec.InitContainers[i], true, vs, kubeconfig)
		if err != nil {
			return fail(err)
		}
		r.inits = append(r.inits, c)
	}
	for i := range pod.Spec.Containers {
		c, err := r.newContainer(&pod.Spec.Containers[i], false, vs, kubeconfig)
		if err != nil {
			return fail(err)
		}
		r.regular = append(r.regular, c)
	}
	r.exclusive = exclusivePaths(pod, vs)
	if adopting {
		r.adopted = true
		for _, c := range r.containers() {
			c.adopt()
			// What a pulled image's process runs from, for its status and
			// so the image is not collected under it.
			if c.argv == nil && p.images != nil {
				if root, ok := p.images.local(c.spec.Image); ok {
					c.imageID, c.rootDigest = root.ImageID, root.Digest
				}
			}
		}
	} else if err := writeJSON(filepath.Join(r.dir, podRecordFile), recordOf(pod, r.exclusive)); err != nil {
		return fail(fmt.Errorf("pod record: %w", err))
	}
	tctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go vb.refreshTokens(tctx, vs.tokens, func(f string, a ...any) {
		p.cfg.Logf("pod %s/%s: "+f, append([]any{pod.Namespace, pod.Name}, a...)...)
	})
	return r, nil
}

func (r *podRun) writeKubeconfig(file, tokenFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: r.p.cfg.APIServer, CertificateAuthorityData: r.p.cfg.APIServerCA}
	cfg.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "pod", Namespace: r.pod.Namespace}
	cfg.CurrentContext = "pod"
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		return fmt.Errorf("pod kubeconfig: %w", err)
	}
	return nil
}

// run drives the pod to its end: init containers in order, then the regular
// containers side by side, restarting them as the restart policy says.
func (r *podRun) run() {
	defer close(r.finished)
	defer func() {
		if r.cancel != nil {
			r.cancel()
		}
	}()
	now := metav1.Now()
	r.mu.Lock()
	st := &r.pod.Status
	if r.orphaned != "" {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, ReasonNodeRestarted, r.orphaned
		for i := range st.ContainerStatuses {
			cs := &st.ContainerStatuses[i]
			if cs.State.Terminated == nil {
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: r.orphaned, FinishedAt: now}}
			}
			cs.Ready = false
		}
		r.mu.Unlock()
		r.publish()
		return
	}
	if !r.adopted || st.StartTime == nil {
		st.Phase = corev1.PodPending
		st.StartTime = &now
		st.HostIP, st.PodIP = r.p.cfg.NodeIP, r.p.cfg.NodeIP
		if ip := r.p.cfg.NodeIP; ip != "" {
			st.HostIPs, st.PodIPs = []corev1.HostIP{{IP: ip}}, []corev1.PodIP{{IP: ip}}
		}
	}
	r.armDeadline()
	r.refreshStatus()
	r.mu.Unlock()
	r.publish()

	for _, c := range r.inits {
		if !r.runUntilDone(c) {
			r.finish()
			return
		}
	}
	var wg sync.WaitGroup
	for _, c := range r.regular {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runUntilDone(c)
		}()
	}
	wg.Wait()
	r.finish()
}

// runUntilDone runs c, restarting it as the restart policy says, and reports
// whether it ended well (exit 0) without the pod being stopped.
func (r *podRun) runUntilDone(c *container) bool {
	backoff := r.p.cfg.RestartBackoff
	for {
		code := r.runOnce(c)
		if r.stopping() {
			return false
		}
		policy := r.pod.Spec.RestartPolicy
		again := policy == corev1.RestartPolicyAlways && !c.init ||
			code != 0 && (policy == corev1.RestartPolicyOnFailure || policy == corev1.RestartPolicyAlways)
		if !again {
			r.mu.Lock()
			c.final = true
			r.mu.Unlock()
			return code == 0
		}
		r.mu.Lock()
		c.waiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container %s", backoff, c.spec.Name))
		r.refreshStatus()
		r.mu.Unlock()
		r.publish()
		select {
		case <-r.stop:
			r.mu.Lock()
			c.final = true
			c.state, c.last = c.last, corev1.ContainerState{}
			r.mu.Unlock()
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.p.cfg.MaxRestartBackoff)
	}
}

// runOnce starts c's process (or takes up the one an earlier rignode
// started), waits for it and records how it ended.
func (r *podRun) runOnce(c *container) int32 {
	r.mu.Lock()
	if r.stopping() {
		r.mu.Unlock()
		return 0
	}
	if e := c.pending; e != nil {
		c.pending = nil
		c.exited(*e)
		r.refreshStatus()
		r.mu.Unlock()
		r.publish()
		return c.exitCode()
	}
	sh := c.proc
	r.mu.Unlock()
	if sh == nil {
		if !r.ensureImage(c) {
			return 0
		}
		started, err := r.p.startExclusive(r, c)
		if !started {
			return 0
		}
		if err != nil {
			return r.exitCodeOf(c)
		}
		sh = r.procOf(c)
	}

	res := sh.wait()

	r.mu.Lock()
	c.exited(res)
	r.refreshStatus()
	r.mu.Unlock()
	r.publish()
	return r.exitCodeOf(c)
}

func (r *podRun) exitCodeOf(c *container) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return c.exitCode()
}

func (r *podRun) procOf(c *container) *shimmed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return c.proc
}

func (r *podRun) containers() []*container {
	return append(append([]*container{}, r.inits...), r.regular...)
}

func (r *podRun) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// terminate stops the pod: SIGTERM to every process group now, SIGKILL to
// those still there after grace.
func (r *podRun) terminate(grace time.Duration) {
	r.stopOnce.Do(func() { close(r.stop) })
	procs := r.running()
	for _, sh := range procs {
		sh.signal(grace == 0)
	}
	if grace > 0 && len(procs) > 0 {
		time.AfterFunc(grace, func() {
			for _, sh := range r.running() {
				sh.signal(true)
			}
		})
	}
}

// running lists the containers' processes still running.
func (r *podRun) running() []*shimmed {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*shimmed
	for _, c := range r.containers() {
		if c.proc != nil {
			out = append(out, c.proc)
		}
	}
	return out
}

func (r *podRun) markDeleted() {
	r.mu.Lock()
	r.deleted = true
	r.mu.Unlock()
}

func (r *podRun) isDeleted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted
}

// armDeadline enforces activeDeadlineSeconds from the pod's start time. Called with mu held.
func (r *podRun) armDeadline() {
	ads := r.pod.Spec.ActiveDeadlineSeconds
	if ads == nil || r.pod.Status.StartTime == nil {
		return
	}
	left := time.Until(r.pod.Status.StartTime.Add(time.Duration(*ads) * time.Second))
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer = time.AfterFunc(max(left, 0), func() {
		r.mu.Lock()
		if r.pod.Status.Phase == corev1.PodSucceeded || r.pod.Status.Phase == corev1.PodFailed {
			r.mu.Unlock()
			return
		}
		r.deadline = true
		grace := int64(30)
		if g := r.pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		r.mu.Unlock()
		r.p.cfg.Logf("pod %s/%s: active deadline of %ds exceeded", r.pod.Namespace, r.pod.Name, *ads)
		r.terminate(time.Duration(grace) * time.Second)
	})
}

func (r *podRun) update(pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !equalPtr(r.pod.Spec.ActiveDeadlineSeconds, pod.Spec.ActiveDeadlineSeconds) {
		r.pod.Spec.ActiveDeadlineSeconds = pod.Spec.ActiveDeadlineSeconds
		r.armDeadline()
	}
	r.pod.Labels, r.pod.Annotations = pod.Labels, pod.Annotations
}

func equalPtr(a, b *int64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// finish sets the pod's final phase once every container has ended.
func (r *podRun) finish() {
	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	st := &r.pod.Status
	failed := r.deadline
	for _, c := range r.containers() {
		c.final = true
		if c.started() && c.exitCode() != 0 {
			failed = true
		}
		if c.state.Terminated == nil && c.state.Running == nil && c.last.Terminated == nil && !r.stopping() {
			failed = true // an init container failed before this one could run
		}
	}
	begun := false
	for _, c := range r.containers() {
		begun = begun || c.started()
	}
	if r.deleted && !begun {
		failed = true // deleted before anything ran, as a kubelet reports it
	}
	st.Phase = corev1.PodSucceeded
	if failed {
		st.Phase = corev1.PodFailed
	}
	if r.deadline {
		st.Reason = ReasonDeadlineExceeded
		st.Message = fmt.Sprintf("Pod was active on the node longer than the specified deadline (%ds)", *r.pod.Spec.ActiveDeadlineSeconds)
	}
	r.refreshStatus()
	r.mu.Unlock()
	r.publish()
}

func (r *podRun) ended() bool {
	select {
	case <-r.finished:
		return true
	default:
		return false
	}
}

// refreshStatus rebuilds container statuses and conditions from the containers. Called with mu held.
func (r *podRun) refreshStatus() {
	st := &r.pod.Status
	st.InitContainerStatuses = nil
	initsDone := true
	for _, c := range r.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.status())
		if c.state.Terminated == nil || c.state.Terminated.ExitCode != 0 {
			initsDone = false
		}
	}
	st.ContainerStatuses = nil
	allReady := len(r.regular) > 0
	anyStarted := false
	for _, c := range r.regular {
		cs := c.status()
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		allReady = allReady && cs.Ready
		anyStarted = anyStarted || c.started()
	}
	terminal := st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed
	if !terminal && initsDone && anyStarted {
		st.Phase = corev1.PodRunning
	}
	if terminal {
		allReady = false
	}
	setCondition(st, corev1.PodReadyToStartContainers, !terminal, "")
	setCondition(st, corev1.PodInitialized, initsDone, "")
	reason := ""
	if terminal {
		reason = "PodCompleted"
	}
	setCondition(st, corev1.ContainersReady, allReady, reason)
	setCondition(st, corev1.PodReady, allReady, reason)
}

func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, ok bool, reason string) {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			if st.Conditions[i].Status != s {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = s, metav1.Now()
			}
			st.Conditions[i].Reason = reason
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()})
}

func (r *podRun) snapshot() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pod.DeepCopy()
}

func (r *podRun) publish() { r.p.publish(r.snapshot()) }

// logFile names the log of a container's current (or previous) run and a
// function that reports when that run has ended.
func (r *podRun) logFile(name string, previous bool) (string, func() bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.containers() {
		if c.spec.Name != name {
			continue
		}
		run := c.runs
		if previous {
			run--
		}
		if run < 1 {
			if previous {
				return "", nil, fmt.Errorf("container %q in pod %s/%s has not restarted: no previous log", name, r.pod.Namespace, r.pod.Name)
			}
			return "", nil, fmt.Errorf("container %q in pod %s/%s has not started yet", name, r.pod.Namespace, r.pod.Name)
		}
		n := c.runs
		done := func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return c.runs != n || c.proc == nil
		}
		if previous {
			done = func() bool { return true }
		}
		return c.logPath(run), done, nil
	}
	return "", nil, fmt.Errorf("pod %s/%s has no container %q", r.pod.Namespace, r.pod.Name, name)
}

// cleanup removes the pod's directory.
func (r *podRun) cleanup() {
	if r.cancel != nil {
		r.cancel()
	}
	if err := os.RemoveAll(r.dir); err != nil {
		r.p.cfg.Logf("pod %s/%s: remove %s: %v", r.pod.Namespace, r.pod.Name, r.dir, err)
	}
	go r.p.gcImages()
}

// killLeftovers kills the processes an earlier rignode's shims still run
// for this pod, and waits until they are gone.
func (r *podRun) killLeftovers() {
	states, _ := filepath.Glob(filepath.Join(r.dir, "containers", "*", "*.state"))
	for _, f := range states {
		sh := &shimmed{stateFile: f}
		if readJSON(f, &sh.state) != nil {
			continue
		}
		sh.kill()
	}
}

// serviceEnv is KUBERNETES_SERVICE_HOST/PORT for the API server URL.
func serviceEnv(apiServer string) (map[string]string, error) {
	u, err := url.Parse(apiServer)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("API server URL %q is not a URL", apiServer)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return map[string]string{
		"KUBERNETES_SERVICE_HOST":       host,
		"KUBERNETES_SERVICE_PORT":       port,
		"KUBERNETES_SERVICE_PORT_HTTPS": port,
		"KUBERNETES_PORT":               "tcp://" + net.JoinHostPort(host, port),
	}, nil
}
