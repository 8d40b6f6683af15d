// Package chaos runs the operator under a real kubelet's faults and checks
// its promises: one session per phone, an attempt counted once, a follow-up
// only when the run still wants it, nothing lost and nothing left held.
//
// It runs on envtest rather than the dev cluster: the faults it needs — a
// node that stops reporting while its processes run on, a force-deleted
// pod whose process outlives it, a pod stuck Terminating, hundreds of rigs —
// are the fake kubelet's to make on demand, and its ledger of real processes
// is the ground truth for "two sessions on one phone". The managers are real
// processes (bin/manager, built by the test), two replicas with leader
// election, killed with SIGKILL and restarted. A stand-in for the CronJob
// controller fires WAIT follow-ups at their minute the way their Job would
// (followup.Create, in-process). A few more rigs sit on a node run by a real
// rignode, SIGKILLed and restarted, and paused, while its sessions — real
// processes — run on (rignode_test.go), and more on a node run by a real
// kubelet and containerd, their sessions containers, the kubelet and
// containerd SIGKILLed and restarted, the kubelet paused (kubelet_test.go).
//
// `make test` runs the short version (CHAOS unset, about 3 minutes);
// `make chaos` the full one (CHAOS=full). Both print their figures and fail
// unless every safety figure is 0.
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// scale is one size of the benchmark.
type scale struct {
	rigs, runs                 int
	killEvery                  time.Duration
	partitionEvery             time.Duration
	partitionMin, partitionMax time.Duration
	stuckTerminating           time.Duration
	deadline                   time.Duration
	// rignodeRigs more rigs sit on a real rignode, SIGKILLed every
	// rignodeKillEvery and paused for pauseFor once pauseAt into the run.
	rignodeRigs                         int
	rignodeKillEvery, pauseAt, pauseFor time.Duration
	// kubeletRigs more rigs sit on a node run by a real kubelet and
	// containerd, one of the two SIGKILLed in turn every kubeletKillEvery
	// (down 5 s), the kubelet paused for pauseFor once kubeletPauseAt in.
	kubeletRigs                      int
	kubeletKillEvery, kubeletPauseAt time.Duration
	// accountCap caps the sessions of the model account the runs on the
	// fake kubelet's even-numbered rigs use (docs/architecture.md, "Model
	// accounts: a cap per key"): about half of what those rigs could run.
	accountCap int
}

var (
	short = scale{rigs: 12, runs: 48, killEvery: 10 * time.Second, partitionEvery: 15 * time.Second,
		partitionMin: 10 * time.Second, partitionMax: 25 * time.Second, stuckTerminating: 20 * time.Second, deadline: 8 * time.Minute,
		rignodeRigs: 3, rignodeKillEvery: 12 * time.Second, pauseAt: 30 * time.Second, pauseFor: 20 * time.Second, accountCap: 3,
		kubeletRigs: 3, kubeletKillEvery: 10 * time.Second, kubeletPauseAt: 45 * time.Second}
	full = scale{rigs: 100, runs: 500, killEvery: 10 * time.Second, partitionEvery: 30 * time.Second,
		partitionMin: 2 * time.Minute, partitionMax: 6 * time.Minute, stuckTerminating: 2 * time.Minute, deadline: 45 * time.Minute,
		rignodeRigs: 10, rignodeKillEvery: 45 * time.Second, pauseAt: 3 * time.Minute, pauseFor: 2 * time.Minute, accountCap: 20,
		kubeletRigs: 10, kubeletKillEvery: 40 * time.Second, kubeletPauseAt: 5 * time.Minute}
)

const ns = "farm"

// accountKey is the capped model account's key Secret.
const accountKey = "capped-key"

// loopServiceAccount is the loop pods' service account.
const loopServiceAccount = "clawfarm-loop"

func TestChaos(t *testing.T) {
	testenv.Needs(t, testenv.Assets)
	sc := short
	if os.Getenv("CHAOS") == "full" {
		sc = full
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.Start(filepath.Join("..", "..", "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for i := range sc.rigs {
		makeRig(t, env, i)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: accountKey,
		Labels:      map[string]string{admission.LabelModelKey: "true"},
		Annotations: map[string]string{farmv1.AnnotationMaxSessions: fmt.Sprint(sc.accountCap)}},
		StringData: map[string]string{"key": "chaos"}}); err != nil {
		t.Fatal(err)
	}
	// The loop pods' service account, as the chart makes it: their rig
	// token is projected for it.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: loopServiceAccount}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	img := startImages(t, ctx, dir)
	agent := startRignode(t, env, dir, img)
	defer agent.stop()
	var gated []int
	for i := sc.rigs; i < sc.allRigs(); i++ {
		gated = append(gated, i)
	}
	gate := startGateway(t, env, dir, agent.bin, gated)
	defer gate.stop()
	for i := sc.rigs; i < sc.rigs+sc.rignodeRigs; i++ {
		makeRignodeRig(t, env, agent, gate, i)
	}
	node := startKubeletHost(t, ctx, env, dir, img)
	defer node.stop()
	for i := sc.rigs + sc.rignodeRigs; i < sc.allRigs(); i++ {
		makeKubeletRig(t, env, node, gate, i)
	}

	h := &harness{t: t, c: c, sc: sc, rng: rand.New(rand.NewPCG(1, 2)), cancelled: map[string]bool{}, agent: agent, node: node, gate: gate}
	h.kubelet = &fakekubelet.Kubelet{Client: c, Script: h.script, Observe: h.observe, Workers: 16,
		Foreign: func(node string) bool { return node == rignodeNode || node == kubeletNode }}
	go h.kubelet.Run(ctx)
	managers := startManagers(t, env, img)
	defer managers.stop()

	start := time.Now()
	for i := range sc.runs {
		if err := c.Create(ctx, h.newRun(i)); err != nil {
			t.Fatal(err)
		}
	}
	go h.firePinnedCronJobs(ctx)
	go h.cancelSome(ctx)
	go h.partitionNodes(ctx)
	go managers.killEvery(ctx, sc.killEvery)
	go agent.faults(ctx, sc.rignodeKillEvery, sc.pauseAt, sc.pauseFor)
	go node.faults(ctx, sc.kubeletKillEvery, sc.kubeletPauseAt, sc.pauseFor)
	go node.watchRuntimes(ctx, c)
	go gate.callAsStranger(ctx, gated)

	finished := h.waitAllFinished(ctx, start.Add(sc.deadline))
	wall := time.Since(start)
	cancel()
	managers.stop()
	h.managerKills = managers.kills
	h.report(wall, finished)
	if t.Failed() {
		h.explain(finished)
	}
}

// explain prints, for a failed benchmark, the pods of the runs that did not
// finish and the end of rignode's, the kubelet's and containerd's logs.
func (h *harness) explain(runs []farmv1.AgentRun) {
	for _, r := range runs {
		if r.Status.Phase.Finished() {
			continue
		}
		var pods corev1.PodList
		_ = h.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelRun: r.Name})
		for _, p := range pods.Items {
			b, _ := json.Marshal(p.Status)
			fmt.Printf("pod %s (node %s, deleted %v, finalizers %v): %s\n", p.Name, p.Spec.NodeName, p.DeletionTimestamp, p.Finalizers, b)
		}
	}
	fmt.Printf("---- rignode's log (last 80 lines):\n%s\n", h.agent.logTail(80))
	for _, p := range []*devcluster.Proc{h.node.host.Kubelet(), h.node.host.Containerd()} {
		fmt.Printf("---- %s (last 40 lines):\n%s\n", p.Log, p.Tail(40))
	}
}

// harness holds the benchmark's decisions: how each pod ends, which runs
// are cancelled, which pods a "user" deletes.
type harness struct {
	t       *testing.T
	c       client.Client
	sc      scale
	kubelet *fakekubelet.Kubelet
	agent   *agent
	node    *kubeletHost
	gate    *rigGate

	mu           sync.Mutex
	rng          *rand.Rand
	cancelled    map[string]bool // runs the benchmark cancelled
	userKills    int
	partitions   int
	managerKills int // set once the managers are stopped
}

func (h *harness) intn(n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.IntN(n)
}

// newRun is run i: its name says its scripted story (done, fail, stuck,
// wait, idle), on a round-robin rig. Three runs in ten meet others: two
// collect runs (one DONE, one STUCK first), which join the session of an
// older collect run waiting for the same rig, and a steer run, which joins
// the session running on its rig when it comes. The runs on the fake
// kubelet's even-numbered rigs use the capped model account (accountKey),
// their follow-ups too.
func (h *harness) newRun(i int) *farmv1.AgentRun {
	story := []string{"done", "fail", "stuck", "wait", "idle", "done", "wait", "done", "stuck", "done"}[i%10]
	mode := []farmv1.QueueMode{9: farmv1.QueueModeSteer, 5: farmv1.QueueModeCollect, 8: farmv1.QueueModeCollect}[i%10]
	rig := i % h.sc.allRigs()
	var key *corev1.SecretKeySelector
	if rig%2 == 0 && rig < h.sc.rigs { // the fake kubelet's rigs: its ledger sees every session
		key = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: accountKey}, Key: "key"}
	}
	return &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%03d", story, i)},
		Spec: farmv1.AgentRunSpec{
			RigRef:    &farmv1.RigReference{Name: rigName(rig)},
			Trigger:   "chaos",
			QueueMode: mode,
			Model:     farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/chaos", BaseURL: "http://127.0.0.1:1/v1", APIKeySecretRef: key},
			Limits:    farmv1.RunLimits{MaxAttempts: 2},
			FollowUp:  farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](1), DefaultDelayMinutes: 1},
		},
	}
}

// script ends a pod by its run's story; a few pods are stuck Terminating
// once deleted, and follow-ups end DONE.
func (h *harness) script(pod *corev1.Pod) fakekubelet.Ending {
	run := pod.Labels[farmv1.LabelRun]
	after := time.Duration(1000+h.intn(3000)) * time.Millisecond
	var e fakekubelet.Ending
	switch story, _, _ := strings.Cut(run, "-"); {
	case pod.Labels[farmv1.LabelParent] != "" || strings.Contains(run, "-f"):
		e = ending(contract.Done, after)
	case story == "fail":
		e = ending(contract.Fail, after)
	case story == "stuck" && pod.Labels[farmv1.LabelAttempt] == "1":
		e = ending(contract.Stuck, after)
	case story == "wait":
		e = ending(contract.Wait, after)
	case story == "idle":
		e = ending(contract.Idle, after)
	default:
		e = ending(contract.Done, after)
	}
	switch {
	case strings.HasSuffix(run, "7"): // one run in ten: its pods are deaf once deleted
		e.StuckTerminating = h.sc.stuckTerminating
	case strings.HasSuffix(run, "3"), strings.HasSuffix(run, "5"), strings.HasSuffix(run, "9"):
		// Slow to stop, as a loop that finishes its step first: SIGTERM
		// does not end it, SIGKILL at the end of the grace period does.
		e.IgnoreSIGTERM = true
	}
	return e
}

// ending is a loop's ending: the first steer message that came into its
// session counts as read, a later one did not reach it (and its run queues
// again).
func ending(s contract.Sentinel, after time.Duration) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: s, Retryable: true, Recap: "chaos " + string(s), ExitReason: contract.ReasonEndTurn, Turns: 3, Steered: 1}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: after, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// observe is called once per pod: 5% of pods are force-deleted by a "user"
// while they run, and the pods of stuck-terminating runs are deleted gracefully.
func (h *harness) observe(pod *corev1.Pod) {
	force := h.intn(100) < 5
	graceful := strings.HasSuffix(pod.Labels[farmv1.LabelRun], "7") && h.intn(2) == 0
	if !force && !graceful {
		return
	}
	p := pod.DeepCopy()
	go func() {
		time.Sleep(time.Duration(300+h.intn(700)) * time.Millisecond)
		var opts []client.DeleteOption
		if force {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		if err := h.c.Delete(context.Background(), p, opts...); err == nil {
			h.mu.Lock()
			h.userKills++
			h.mu.Unlock()
		}
	}()
}

// cancelSome cancels 10% of the runs at random moments; half of those are
// WAIT runs cancelled once they are Waiting.
func (h *harness) cancelSome(ctx context.Context) {
	var picks []string
	for i := 0; i < h.sc.runs; i += 10 {
		picks = append(picks, h.newRun(i+h.intn(10)).Name)
	}
	for _, name := range picks {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(h.intn(4000)) * time.Millisecond):
		}
		var run farmv1.AgentRun
		if err := h.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &run); err != nil || run.Status.Phase.Finished() {
			continue
		}
		if strings.HasPrefix(name, "wait") && run.Status.Phase != farmv1.RunWaiting {
			go h.cancelWhenWaiting(ctx, name)
			continue
		}
		h.cancel(ctx, name)
	}
}

func (h *harness) cancelWhenWaiting(ctx context.Context, name string) {
	for ctx.Err() == nil {
		var run farmv1.AgentRun
		if err := h.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &run); err == nil {
			if run.Status.Phase == farmv1.RunWaiting {
				h.cancel(ctx, name)
				return
			}
			if run.Status.Phase.Finished() {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *harness) cancel(ctx context.Context, name string) {
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := h.c.Patch(ctx, run, patch); err == nil {
		h.mu.Lock()
		h.cancelled[name] = true
		h.mu.Unlock()
	}
}

// partitionNodes cuts a random node off every partitionEvery, for a random
// while, its processes running on.
func (h *harness) partitionNodes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.sc.partitionEvery):
		}
		node := h.someNode()
		d := h.sc.partitionMin + time.Duration(h.intn(int(h.sc.partitionMax-h.sc.partitionMin)+1))
		if err := h.kubelet.PartitionNode(ctx, node, 0); err != nil {
			continue
		}
		h.mu.Lock()
		h.partitions++
		h.mu.Unlock()
		go func() {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			_ = h.kubelet.HealNode(context.Background(), node)
		}()
	}
}

// someNode picks the node to cut off: while many sessions run, one with a
// session running on it (the partitions that matter are those that cut a
// session off); once few do, any node at random, as the real world picks —
// always picking the last busy nodes would cut off the last runs again and
// again and the benchmark would measure its own aim, not the operator.
func (h *harness) someNode() string {
	var busy []string
	for _, ivs := range h.kubelet.Ledger() {
		if n := len(ivs); n > 0 && ivs[n-1].End.IsZero() {
			busy = append(busy, ivs[n-1].Node)
		}
	}
	sort.Strings(busy)
	if len(busy) < h.sc.rigs/4 {
		return nodeName(h.intn(h.sc.rigs))
	}
	return busy[h.intn(len(busy))]
}

// firePinnedCronJobs stands in for the CronJob controller and the Job it
// would start: a follow-up CronJob whose pinned minute has come is carried
// out by `manager followup`'s own code, once per scheduled minute.
func (h *harness) firePinnedCronJobs(ctx context.Context) {
	fired := map[string]bool{}
	for ctx.Err() == nil {
		time.Sleep(time.Second)
		var cjs batchv1.CronJobList
		if err := h.c.List(ctx, &cjs, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelKind: "followup"}); err != nil {
			continue
		}
		for _, cj := range cjs.Items {
			due, ok := pinnedTime(cj.Spec.Schedule, time.Now())
			if !ok || time.Now().Before(due) {
				continue
			}
			job := fmt.Sprintf("%s-%d", cj.Name, due.Unix()/60)
			if fired[job] {
				continue
			}
			fired[job] = true
			req, err := followup.DecodeRequest(envOf(cj, followup.EnvRequest))
			if err != nil {
				h.t.Errorf("CronJob %s carries no follow-up request: %v", cj.Name, err)
				continue
			}
			_, _ = followup.Create(ctx, h.c, req, job)
		}
	}
}

// pinnedTime reads a pinned schedule "M H D Mon *" as this year's time (UTC).
func pinnedTime(schedule string, now time.Time) (time.Time, bool) {
	var mi, hr, d, mo int
	if _, err := fmt.Sscanf(schedule, "%d %d %d %d *", &mi, &hr, &d, &mo); err != nil {
		return time.Time{}, false
	}
	return time.Date(now.UTC().Year(), time.Month(mo), d, hr, mi, 0, 0, time.UTC), true
}

func envOf(cj batchv1.CronJob, name string) string {
	for _, c := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// waitAllFinished waits until every run is in a final phase and no follow-up
// is pending, or the deadline; it returns the runs as they ended.
func (h *harness) waitAllFinished(ctx context.Context, deadline time.Time) []farmv1.AgentRun {
	var runs farmv1.AgentRunList
	start, lastProgress := time.Now(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		if err := h.c.List(ctx, &runs, client.InNamespace(ns)); err != nil {
			continue
		}
		var cjs batchv1.CronJobList
		_ = h.c.List(ctx, &cjs, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelKind: "followup"})
		if len(cjs.Items) == 0 && !slices.ContainsFunc(runs.Items, func(r farmv1.AgentRun) bool { return !r.Status.Phase.Finished() }) {
			break
		}
		if time.Since(lastProgress) >= time.Minute {
			lastProgress = time.Now()
			h.progress(time.Since(start), runs.Items, len(cjs.Items))
		}
	}
	return runs.Items
}

// progress prints one line of where the runs stand, so a long benchmark
// that is slow to end shows what it is waiting for.
func (h *harness) progress(elapsed time.Duration, runs []farmv1.AgentRun, pendingFollowUps int) {
	phases := map[farmv1.RunPhase]int{}
	for _, r := range runs {
		phases[r.Status.Phase]++
	}
	var parts []string
	for p, n := range phases {
		if p == "" {
			p = "(new)"
		}
		parts = append(parts, fmt.Sprintf("%s %d", p, n))
	}
	sort.Strings(parts)
	fmt.Printf("chaos %4.0f s: %d runs: %s; %d follow-ups pending; %d nodes cut off now\n",
		elapsed.Seconds(), len(runs), strings.Join(parts, ", "), pendingFollowUps, h.kubelet.PartitionedNodes())
	var left []string
	for _, r := range runs {
		if !r.Status.Phase.Finished() {
			var why []string
			for _, c := range r.Status.Conditions {
				why = append(why, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
			}
			left = append(left, fmt.Sprintf("%s on %s: %s, attempt %d [%s]", r.Name, r.Spec.RigRef.Name, r.Status.Phase, r.Status.Attempt, strings.Join(why, "; ")))
		}
	}
	if len(left) <= 5 {
		for _, l := range left {
			fmt.Println("  still", l)
		}
	}
}

// allRigs counts the rigs of every kind: the fake kubelet's, rignode's and
// the kubelet host's, numbered in that order.
func (sc scale) allRigs() int { return sc.rigs + sc.rignodeRigs + sc.kubeletRigs }

func rigName(i int) string  { return fmt.Sprintf("rig-%03d", i) }
func nodeName(i int) string { return "node-" + rigName(i) }

func makeRig(t *testing.T, env *testenv.Env, i int) {
	t.Helper()
	node := env.MakeNode(t, nodeName(i))
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rigName(i)},
		Spec: farmv1.DeviceRigSpec{NodeName: node, Endpoint: farmv1.RigEndpoint{
			URL:       env.Health.URL + "/rigs/" + rigName(i) + "/mcp",
			HealthURL: env.Health.URL + "/rigs/" + rigName(i) + "/api/status",
		}},
	}
	if err := env.Client.Create(context.Background(), rig); err != nil {
		t.Fatal(err)
	}
}

// replicas are the manager processes.
type replicas struct {
	t      *testing.T
	bin    string
	env    []string
	mu     sync.Mutex
	procs  [2]*exec.Cmd
	kills  int
	logDir string
	// loopImage is the loop pods' image.
	loopImage string
}

// startManagers builds bin/manager and starts two replicas with leader
// election, short leases so a SIGKILLed leader is replaced within seconds,
// the session image as the loop image.
func startManagers(t *testing.T, env *testenv.Env, img *loopImage) *replicas {
	t.Helper()
	dir := t.TempDir()
	bin := gobuild.Build(t, "../../cmd/manager")
	kcPath := kubeconfigFile(t, env, "chaos-manager", filepath.Join(dir, "kubeconfig"))
	r := &replicas{t: t, bin: bin, env: append(os.Environ(), "KUBECONFIG="+kcPath), logDir: dir, loopImage: img.ref}
	for i := range r.procs {
		r.start(i)
	}
	return r
}

// kubeconfigFile writes a kubeconfig of a new administrator user of the
// test's API server to path, and returns path.
func kubeconfigFile(t *testing.T, env *testenv.Env, user, path string) string {
	t.Helper()
	kc, err := env.Kubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (r *replicas) start(i int) {
	log, err := os.OpenFile(filepath.Join(r.logDir, fmt.Sprintf("manager-%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(r.bin, "--leader-elect", "--leader-election-namespace=default",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--pod-startup-timeout=30s", "--node-lost-grace=5s", "--attempt-backoff=1s", "--rig-not-ready-grace=20s",
		"--rig-probe-interval=2s", "--agentrun-workers=8", "--loop-service-account="+loopServiceAccount, "--zap-log-level=error", "--loop-image="+r.loopImage)
	cmd.Env, cmd.Stdout, cmd.Stderr = r.env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start manager %d: %v", i, err)
	}
	r.procs[i] = cmd
	go func() { _ = cmd.Wait(); log.Close() }()
}

// killEvery SIGKILLs the replicas in turn and starts each again at once.
func (r *replicas) killEvery(ctx context.Context, every time.Duration) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		r.mu.Lock()
		if p := r.procs[i%2]; p != nil && p.Process != nil {
			_ = p.Process.Signal(syscall.SIGKILL)
			r.kills++
		}
		r.start(i % 2)
		r.mu.Unlock()
	}
}

func (r *replicas) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p != nil && p.Process != nil {
			_ = p.Process.Signal(syscall.SIGKILL)
		}
	}
}
