//go:build bench

// Package devbench is the operator benchmark's side by side on the dev
// cluster (internal/dev/devcluster): the real scheduler and Job controller,
// rignode running the loop as a host process, rigsim and modelsim. The same
// sessions run twice, as AgentRuns and as Indexed Jobs of the same loop pods,
// and the figures a user feels are printed for both: create→first pod, a
// pod's end → the next pod on its rig, and the wall time.
//
//	make bench-dev      (go test -tags bench ./test/devbench/)
//
// BENCH_DEV_BASE_PORT moves the cluster's ports (default 27800), E2E_KEEP=1
// leaves the cluster up afterwards, E2E_BUILD=0 uses bin/ as it is.
package devbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

const (
	rigs, perRig = 20, 5
	// scenario is the session every run and Job pod plays: the home screen,
	// then DONE. It suits any phone state, so five can follow each other.
	scenario = `name: bench-home
description: Goes to the home screen and ends DONE (the dev-cluster benchmark's session).
sessions:
  - steps:
      - call: {name: home_screen}
      - end: {status: DONE, recap: "On the home screen."}
`
)

var cluster *devcluster.Cluster

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devbench-scenarios")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "bench-home.yaml"), []byte(scenario), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-dev:", err)
		os.Exit(1)
	}
	code := devcluster.Suite{
		Name: "bench-dev", Dir: ".bench-dev", PortEnv: "BENCH_DEV_BASE_PORT", BasePort: 27800,
		Config:    devcluster.Config{Rigs: rigs, Manager: devcluster.ManagerHost, Scenarios: dir},
		Started:   func(_ context.Context, c *devcluster.Cluster) { cluster = c },
		DumpKinds: "ar,jobs,pods,rig",
	}.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// sessions records, per session key, when its pod was first seen and when
// it was seen ended, from a watch of the namespace's pods.
type sessions struct {
	mu          sync.Mutex
	seen, ended map[string]time.Time
	key         func(*corev1.Pod) string
}

func (s *sessions) handler() toolscache.ResourceEventHandler {
	note := func(o any) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return
		}
		k := s.key(p)
		if k == "" {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.seen[k].IsZero() {
			s.seen[k] = time.Now()
		}
		if (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) && s.ended[k].IsZero() {
			s.ended[k] = time.Now()
		}
	}
	return toolscache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }}
}

// figures are one side's: the wall time, create→first pod of each rig's
// first session, and each rig's hand-overs (a pod's end → the next pod).
type figures struct {
	wall                  time.Duration
	createToPod, handOver []time.Duration
}

func (s *sessions) figures(wall time.Duration, created []time.Time, key func(rig, k int) string) figures {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := figures{wall: wall}
	for i := range rigs {
		f.createToPod = append(f.createToPod, s.seen[key(i, 0)].Sub(created[i]))
		for k := 0; k+1 < perRig; k++ {
			f.handOver = append(f.handOver, s.seen[key(i, k+1)].Sub(s.ended[key(i, k)]))
		}
	}
	sort.Slice(f.createToPod, func(a, b int) bool { return f.createToPod[a] < f.createToPod[b] })
	sort.Slice(f.handOver, func(a, b int) bool { return f.handOver[a] < f.handOver[b] })
	return f
}

func runName(rig, k int) string { return fmt.Sprintf("bench-r%02d-%d", rig, k) }
func jobName(rig int) string    { return fmt.Sprintf("bench-job-r%02d", rig) }

func TestBenchDevCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, ns := cluster, cluster.Namespace
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	view, err := cache.New(cfg, cache.Options{Scheme: devcluster.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = view.Start(ctx) }()
	pods, err := view.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&farmv1.AgentRun{}, &batchv1.Job{}} {
		if _, err := view.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	view.WaitForCacheSync(ctx)
	runPods := &sessions{seen: map[string]time.Time{}, ended: map[string]time.Time{}, key: func(p *corev1.Pod) string {
		if p.Labels[farmv1.LabelKind] != "attempt" {
			return ""
		}
		return p.Labels[farmv1.LabelRun]
	}}
	jobPods := &sessions{seen: map[string]time.Time{}, ended: map[string]time.Time{}, key: func(p *corev1.Pod) string {
		if p.Labels[batchv1.JobNameLabel] == "" {
			return ""
		}
		return p.Labels[batchv1.JobNameLabel] + "/" + p.Annotations[batchv1.JobCompletionIndexAnnotation]
	}}
	for _, s := range []*sessions{runPods, jobPods} {
		if _, err := pods.AddEventHandler(s.handler()); err != nil {
			t.Fatal(err)
		}
	}

	// 1. As AgentRuns: each rig's five runs, created at once, oldest first
	// in each rig's queue.
	begin := time.Now()
	created := make([]time.Time, rigs)
	for k := range perRig {
		for i := range rigs {
			run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runName(i, k)},
				Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: devcluster.RigName(i)}, Trigger: "Go to the home screen.",
					Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/bench-home", BaseURL: c.ModelBaseURL(),
						APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: devcluster.ModelSecret}, Key: "api-key"}}}}
			if err := c.Client.Create(ctx, run); err != nil {
				t.Fatalf("create %s: %v", run.Name, err)
			}
			if k == 0 {
				created[i] = time.Now()
			}
		}
	}
	waitFor(ctx, t, "every run Succeeded", func() (bool, string) {
		var l farmv1.AgentRunList
		if err := view.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		done, other := 0, []string{}
		for _, r := range l.Items {
			switch r.Status.Phase {
			case farmv1.RunSucceeded:
				done++
			case farmv1.RunFailed, farmv1.RunCancelled:
				t.Fatalf("run %s ended %s: %s", r.Name, r.Status.Phase, conditionMessage(&r))
			default:
				other = append(other, r.Name+"="+string(r.Status.Phase))
			}
		}
		return done == rigs*perRig, fmt.Sprintf("%d Succeeded; %s", done, strings.Join(other, " "))
	})
	runs := runPods.figures(time.Since(begin), created, runName)

	// 2. As Indexed Jobs: one per rig, five completions one at a time, each
	// pod the loop pod the operator made for that rig's first run, with the
	// rig's own address (a Job's pod has no Lease, so the rig gateway would
	// refuse it) and no run to report progress to.
	templates := make([]corev1.PodTemplateSpec, rigs)
	for i := range rigs {
		var l corev1.PodList
		if err := view.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelRun: runName(i, 0)}); err != nil || len(l.Items) == 0 {
			t.Fatalf("the attempt pod of %s: %v (%d pods)", runName(i, 0), err, len(l.Items))
		}
		templates[i] = jobTemplate(t, &l.Items[0], c.GatewayURL(i), c.RigURL(i))
	}
	begin = time.Now()
	for i := range rigs {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: jobName(i)},
			Spec: batchv1.JobSpec{Completions: ptr.To(int32(perRig)), Parallelism: ptr.To[int32](1),
				CompletionMode: ptr.To(batchv1.IndexedCompletion), BackoffLimit: ptr.To[int32](0), Template: templates[i]}}
		if err := c.Client.Create(ctx, job); err != nil {
			t.Fatalf("create Job %s: %v", job.Name, err)
		}
		created[i] = time.Now()
	}
	waitFor(ctx, t, "every Job Complete", func() (bool, string) {
		var l batchv1.JobList
		if err := view.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, j := range l.Items {
			for _, cd := range j.Status.Conditions {
				if cd.Status == corev1.ConditionTrue && cd.Type == batchv1.JobFailed {
					t.Fatalf("Job %s failed: %s", j.Name, cd.Message)
				}
				if cd.Status == corev1.ConditionTrue && cd.Type == batchv1.JobComplete {
					n++
				}
			}
		}
		return n == rigs, fmt.Sprintf("%d of %d Complete", n, rigs)
	})
	jobs := jobPods.figures(time.Since(begin), created, func(rig, k int) string { return fmt.Sprintf("%s/%d", jobName(rig), k) })

	fmt.Printf("\nthe dev cluster side by side: %d rigs × %d sessions (modelsim's bench-home: the home screen, then DONE), one at a time per rig,\n", rigs, perRig)
	fmt.Printf("the real scheduler and Job controller, rignode running each loop pod as a host process; both controllers as the dev\n")
	fmt.Printf("cluster runs them, with their defaults (the manager: 8 AgentRun workers, no client-side limit; kube-controller-manager:\n")
	fmt.Printf("5 Job workers, 20 requests a second)\n")
	fmt.Printf("  %-24s %14s %14s   %s\n", "", "clawfarm", "Job controller", "clawfarm ÷ Jobs")
	row := func(name string, a, b time.Duration) {
		fmt.Printf("  %-24s %11.0f ms %11.0f ms   %.2f\n", name, ms(a), ms(b), ms(a)/ms(b))
	}
	row("wall time", runs.wall, jobs.wall)
	row("create→first pod p50", pct(runs.createToPod, 50), pct(jobs.createToPod, 50))
	row("create→first pod p99", pct(runs.createToPod, 99), pct(jobs.createToPod, 99))
	row("pod end→next pod p50", pct(runs.handOver, 50), pct(jobs.handOver, 50))
	row("pod end→next pod p99", pct(runs.handOver, 99), pct(jobs.handOver, 99))
}

// jobTemplate is the attempt pod as a Job's pod template: the pod's spec,
// with the rig's own address for its gateway's, no run to patch (progress
// needs one) and no rig token (the rig takes calls without one); none of
// the operator's labels, finalizer or owner, so the operator leaves it alone.
func jobTemplate(t *testing.T, pod *corev1.Pod, gateway, rig string) corev1.PodTemplateSpec {
	t.Helper()
	spec := *pod.Spec.DeepCopy()
	for ci := range spec.Containers {
		env := spec.Containers[ci].Env[:0]
		for _, e := range spec.Containers[ci].Env {
			switch e.Name {
			case contract.SettingRun.Env, contract.SettingRigTokenFile.Env, contract.SettingTraceURL.Env, contract.SettingTraceTokenFile.Env:
				continue
			case contract.SettingRigEndpoint.Env:
				if !strings.HasPrefix(e.Value, gateway) {
					t.Fatalf("pod %s's rig endpoint %q is not behind the gateway %s", pod.Name, e.Value, gateway)
				}
				e.Value = rig + strings.TrimPrefix(e.Value, gateway)
			}
			env = append(env, e)
		}
		spec.Containers[ci].Env = env
	}
	return corev1.PodTemplateSpec{Spec: spec}
}

func waitFor(ctx context.Context, t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	last := ""
	for ctx.Err() == nil {
		var done bool
		if done, last = ok(); done {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within the test's time: %s", what, last)
}

func conditionMessage(r *farmv1.AgentRun) string {
	for _, c := range r.Status.Conditions {
		if c.Type == farmv1.ConditionSucceeded {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
