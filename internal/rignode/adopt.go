package rignode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// shimmed is a container process under its shim, as rignode knows it: from
// the shim it started, or from the files a shim left for a rignode that
// restarted (adopted).
type shimmed struct {
	state     shimState
	stateFile string
	exitFile  string
	// reaped is closed once rignode has waited for the shim it started; nil
	// for an adopted shim, which is not rignode's child.
	reaped chan struct{}
}

// exit reads how the process ended, once the shim has written it.
func (s *shimmed) exit() (shimExit, bool) {
	var e shimExit
	if err := readJSON(s.exitFile, &e); err != nil {
		return e, false
	}
	return e, true
}

// shimAlive reports whether the shim still runs.
func (s *shimmed) shimAlive() bool {
	if s.reaped != nil {
		select {
		case <-s.reaped:
			return false
		default:
			return true
		}
	}
	id, ok := procIdentity(s.state.ShimPID)
	return ok && id == s.state.ShimID
}

// alive reports whether the process still runs: its pid names the same
// process the shim started, not one that reuses the pid.
func (s *shimmed) alive() bool {
	id, ok := procIdentity(s.state.PID)
	return ok && s.state.ID != "" && id == s.state.ID
}

// signal sends SIGTERM (or SIGKILL) to the process's group, if the process
// is still the one the shim started.
func (s *shimmed) signal(kill bool) {
	if s.alive() {
		killGroup(s.state.PID, kill)
	}
}

// kill SIGKILLs the process's group until the process is gone.
func (s *shimmed) kill() {
	for s.alive() {
		s.signal(true)
		time.Sleep(pollInterval)
	}
}

// pollInterval is how often rignode looks for a shim's exit file.
const pollInterval = 100 * time.Millisecond

// wait waits until the process has ended and returns how. A shim that ends
// without writing its exit file (killed) leaves the process unsupervised:
// it is killed, and reported with an unknown status.
func (s *shimmed) wait() shimExit {
	for {
		if e, ok := s.exit(); ok {
			return e
		}
		if !s.shimAlive() {
			if e, ok := s.exit(); ok {
				return e
			}
			s.kill()
			now := time.Now()
			return shimExit{Code: 137, StartedAt: s.state.StartedAt, FinishedAt: now,
				lost: "its shim ended before it did, so its exit status is unknown; rignode killed what was left"}
		}
		time.Sleep(pollInterval)
	}
}

// adopt takes up the container's runs from the files an earlier rignode's
// shims left: how many runs there were, how the previous one ended, and the
// last one — running (c.proc), ended while no rignode watched (c.pending),
// or lost (its shim and process are gone without a word).
func (c *container) adopt() {
	c.runs = lastRun(c.dir)
	if c.runs == 0 {
		return
	}
	if c.runs > 1 {
		var prev shimExit
		if err := readJSON(c.file(c.runs-1, "exit"), &prev); err == nil {
			c.last = corev1.ContainerState{Terminated: c.terminated(prev)}
		}
	}
	sh := &shimmed{stateFile: c.file(c.runs, "state"), exitFile: c.file(c.runs, "exit")}
	// A shim started just before rignode died may not have said anything
	// yet: give it the time a start is given before taking it for lost.
	for deadline := time.Now().Add(shimStartTimeout); readJSON(sh.stateFile, &sh.state) != nil && !exists(sh.exitFile) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	c.id = fmt.Sprintf("rignode://%d", sh.state.PID)
	if e, ok := sh.exit(); ok {
		c.pending = &e
		return
	}
	if sh.state.PID != 0 && sh.shimAlive() {
		c.running(sh)
		return
	}
	if e, ok := sh.exit(); ok { // ended just now
		c.pending = &e
		return
	}
	// No shim, no word: the host restarted, or the shim was killed. A process
	// left without its shim is not trusted to run on.
	sh.kill()
	c.pending = &shimExit{Code: 137, StartedAt: sh.state.StartedAt, FinishedAt: time.Now(),
		lost: "rignode restarted and found neither this container's process nor its exit status (was the host restarted?)"}
}

// lastRun is the highest n with an <n>.spec file in dir, 0 when none.
func lastRun(dir string) int {
	specs, _ := filepath.Glob(filepath.Join(dir, "*.spec"))
	last := 0
	for _, f := range specs {
		if n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".spec")); err == nil && n > last {
			last = n
		}
	}
	return last
}

// podRecord is what rignode keeps of a pod beside its directory, so a
// restarted rignode can stop the processes of a pod deleted while it was away.
type podRecord struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	UID       string   `json:"uid"`
	Exclusive []string `json:"exclusive,omitempty"` // host paths one pod at a time may use (see exclusive.go)
	Grace     int64    `json:"grace"`               // terminationGracePeriodSeconds
}

const podRecordFile = "pod.json"

func recordOf(pod *corev1.Pod, exclusive []string) podRecord {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	return podRecord{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Exclusive: exclusive, Grace: grace}
}

// recover runs once as the provider starts: it adopts the processes of the
// pods an earlier rignode started that are still bound to this node, and
// stops those of pods that are gone (deleted while no rignode watched). It
// must know which pods exist, so it fails when it cannot list them.
func (p *Provider) recover(ctx context.Context) error {
	root := filepath.Join(p.cfg.RootDir, "pods")
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) == 0 {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	list, err := p.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(lctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.cfg.NodeName})
	if err != nil {
		return fmt.Errorf("rignode: list this node's pods to adopt their processes: %w", err)
	}
	bound := map[string]*corev1.Pod{}
	for i := range list.Items {
		bound[string(list.Items[i].UID)] = &list.Items[i]
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid := e.Name()
		if pod := bound[uid]; pod != nil {
			r, err := p.adoptPod(ctx, pod)
			if err != nil {
				p.cfg.Logf("pod %s/%s: adopt: %v", pod.Namespace, pod.Name, err)
				continue
			}
			p.pods[podKey(pod.Namespace, pod.Name)] = r
			go r.run()
			if pod.DeletionTimestamp != nil {
				r.markDeleted()
				go r.terminate(deletionGrace(pod))
			}
			continue
		}
		r := p.orphan(filepath.Join(root, uid))
		p.gone[uid] = r
		go p.stopOrphan(r)
	}
	return nil
}

// adoptTimeout bounds listing the node's pods, and then taking up each one
// (its volumes' sources read again, a token past renewal asked for): each
// pod gets its own, so a node full of pods is not cut off halfway.
const adoptTimeout = 30 * time.Second

func (p *Provider) adoptPod(ctx context.Context, pod *corev1.Pod) (*podRun, error) {
	ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	return newPodRun(ctx, p, pod.DeepCopy())
}

// orphan is the run of a pod that no longer exists, read from its directory.
func (p *Provider) orphan(dir string) *podRun {
	var rec podRecord
	_ = readJSON(filepath.Join(dir, podRecordFile), &rec)
	if rec.UID == "" {
		rec.UID, rec.Grace = filepath.Base(dir), corev1.DefaultTerminationGracePeriodSeconds
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name, UID: types.UID(rec.UID)}}
	pod.Spec.TerminationGracePeriodSeconds = &rec.Grace
	r := &podRun{p: p, pod: pod, dir: dir, exclusive: rec.Exclusive, deleted: true,
		stop: make(chan struct{}), finished: make(chan struct{})}
	names, _ := os.ReadDir(filepath.Join(dir, "containers"))
	for _, n := range names {
		c := &container{spec: corev1.Container{Name: n.Name()}, dir: filepath.Join(dir, "containers", n.Name())}
		c.adopt()
		r.regular = append(r.regular, c)
	}
	return r
}

// stopOrphan stops what runs of a pod that is gone — SIGTERM, its grace
// period, SIGKILL — waits until every process has ended, and removes its directory.
func (p *Provider) stopOrphan(r *podRun) {
	if pids := r.running(); len(pids) > 0 {
		p.cfg.Logf("pod %s/%s (%s) was deleted while rignode was away: stopping its %d process(es)", r.pod.Namespace, r.pod.Name, r.pod.UID, len(pids))
		r.terminate(time.Duration(*r.pod.Spec.TerminationGracePeriodSeconds) * time.Second)
		for _, c := range r.regular {
			if sh := r.procOf(c); sh != nil {
				sh.wait()
			}
		}
	}
	r.mu.Lock()
	for _, c := range r.regular {
		c.proc = nil
	}
	r.mu.Unlock()
	close(r.finished)
	p.mu.Lock()
	delete(p.gone, string(r.pod.UID))
	p.mu.Unlock()
	r.cleanup()
}

// StopLeftovers stops every pod process that rignode's shims still run under
// root (rignode's --root-dir) — SIGTERM, grace, SIGKILL — and waits for them.
// A kubelet that stops leaves its containers running; this is for tearing a
// node down for good, as the dev cluster does.
func StopLeftovers(root string, grace time.Duration) int {
	states, _ := filepath.Glob(filepath.Join(root, "pods", "*", "containers", "*", "*.state"))
	sort.Strings(states)
	var live []*shimmed
	for _, f := range states {
		sh := &shimmed{stateFile: f, exitFile: strings.TrimSuffix(f, ".state") + ".exit"}
		if readJSON(f, &sh.state) == nil && !exists(sh.exitFile) && sh.alive() {
			sh.signal(false)
			live = append(live, sh)
		}
	}
	deadline := time.Now().Add(grace)
	for _, sh := range live {
		for sh.alive() {
			if time.Now().After(deadline) {
				sh.signal(true)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return len(live)
}

// deletionGrace is how long a deleted pod's processes get between SIGTERM
// and SIGKILL: the deletion's grace period, else the pod's, and never less
// than the kubelet's minimum of 2 s (a force deletion still gets SIGTERM).
func deletionGrace(pod *corev1.Pod) time.Duration {
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(max(grace, minimumGracePeriod)) * time.Second
}

const minimumGracePeriod = 2
