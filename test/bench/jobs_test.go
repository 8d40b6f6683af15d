package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// jobControllerUser is the Job controller's identity in the audit log.
const jobControllerUser = "system:serviceaccount:kube-system:job-controller"

// phaseFigures are what the side-by-side table shows of one phase.
type phaseFigures struct {
	wall                     time.Duration
	createToPod, handOver    []time.Duration // sorted
	writes                   *writeCount
	pods                     int
	apiserverCPU, processCPU float64
	workersNote              string
}

// jobsWork is a benchmark's work as Indexed Jobs: one per rig, perRig
// completions, each Job's pods on its rig's node.
type jobsWork struct {
	rigs, perRig int
	name, node   func(rig int) string
	timeout      time.Duration
}

// jobLabel marks the Jobs' pods; the fake kubelet's script tells them by it.
const jobLabel = "bench.clawfarm.dev/job"

// jobsPhase does the benchmark's work the way a user would without
// clawfarm: one Indexed Job per rig, completions the rig's runs,
// parallelism 1 (one session per phone), its pods pinned to the rig's node,
// run by the real Job controller of kube-controller-manager (built by
// hack/build-k8s.sh) on the same API server, ended by the same fake kubelet.
func jobsPhase(ctx context.Context, t *testing.T, cfg, kcfg *rest.Config, hc client.Client, scheme *kruntime.Scheme,
	kl *fakekubelet.Kubelet, ns string, work jobsWork, apiPID int, auditLog string) phaseFigures {
	kcm := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(kcm); err != nil {
		t.Fatalf("kube-controller-manager: %v (hack/build-k8s.sh builds it)", err)
	}
	// The Job controller's own identity and bootstrap role, as
	// --use-service-account-credentials gives it in a cluster.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "job-controller"}}
	_ = hc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
	must(t, hc.Create(ctx, sa))
	must(t, hc.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-job-controller"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:controller:job-controller"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}}))
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	must(t, hc.SubResource("token").Create(ctx, sa, tr))

	// What the benchmark watches: the Jobs and their pods.
	view, err := cache.New(kcfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}},
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{jobLabel: "true"})}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = view.Start(ctx) }()
	pods, err := view.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := view.GetInformer(ctx, &batchv1.Job{}); err != nil {
		t.Fatal(err)
	}
	view.WaitForCacheSync(ctx)
	var mu sync.Mutex
	seen := map[string]time.Time{} // "job/index" → the pod first seen
	ended := map[string]time.Time{}
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if p, ok := o.(*corev1.Pod); ok {
				mu.Lock()
				if k := jobPodKey(p); seen[k].IsZero() {
					seen[k] = time.Now()
				}
				mu.Unlock()
			}
		},
		UpdateFunc: func(_, o any) {
			if p, ok := o.(*corev1.Pod); ok && p.Status.Phase == corev1.PodSucceeded {
				mu.Lock()
				if k := jobPodKey(p); ended[k].IsZero() {
					ended[k] = time.Now()
				}
				mu.Unlock()
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.AddEventHandler(kl.Events()); err != nil {
		t.Fatal(err)
	}

	// The Job controller gets what clawfarm's manager gets: as many
	// workers, and no client-side rate limit to speak of (the defaults are
	// 5 workers and 20 requests a second).
	workers := benchWorkers()
	proc := start(t, kcm, []string{
		"--kubeconfig=" + kubeconfig(t, cfg, tr.Status.Token), "--controllers=job-controller", "--leader-elect=false",
		"--secure-port=0", "--concurrent-job-syncs=" + strconv.Itoa(workers), "--kube-api-qps=5000", "--kube-api-burst=10000", "-v=0",
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-controller-manager's output:\n%s", proc.out.String())
		}
	})
	cpu0, api0 := cpuSeconds(proc.cmd.Process.Pid), cpuSeconds(apiPID)

	if path := os.Getenv("BENCH_APISERVER_PROFILE"); path != "" {
		go profile(ctx, t, 0, apiserverProfileURL(kcfg, 8), kcfg, path+".jobs") // the Jobs phase takes 10–20 s
	}
	begin := time.Now()
	created := make([]time.Time, work.rigs)
	parallel(work.rigs, 32, func(i int) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: work.name(i)},
			Spec: batchv1.JobSpec{
				Completions: ptr.To(int32(work.perRig)), Parallelism: ptr.To[int32](1),
				CompletionMode: ptr.To(batchv1.IndexedCompletion), BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{
					// The fake kubelet drives the pods labelled as attempts, and keeps
					// its one-session-per-phone ledger by the rig label.
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{jobLabel: "true",
						farmv1.LabelKind: "attempt", farmv1.LabelRig: work.name(i)}},
					Spec: corev1.PodSpec{NodeName: work.node(i), RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "agent", Image: "loop"}}}}}}
		must(t, hc.Create(ctx, job))
		mu.Lock()
		created[i] = time.Now()
		mu.Unlock()
	})
	waitFor(t, "all Jobs Complete", jobsTimeout(work.timeout), func() bool {
		if proc.exited() {
			t.Fatalf("kube-controller-manager exited:\n%s", proc.out.String())
		}
		var l batchv1.JobList
		_ = view.List(ctx, &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy)
		n := 0
		for _, j := range l.Items {
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					n++
				}
			}
		}
		return n == work.rigs
	})
	total := work.rigs * work.perRig
	f := phaseFigures{wall: time.Since(begin), pods: total, workersNote: fmt.Sprintf("--concurrent-job-syncs=%d", workers)}
	f.processCPU, f.apiserverCPU = cpuSeconds(proc.cmd.Process.Pid)-cpu0, cpuSeconds(apiPID)-api0
	// The tracking finalizers come off after the last pod ends: wait for
	// them, so the writes count the whole of the controller's work.
	waitFor(t, "the Job pods' finalizers removed", 2*time.Minute, func() bool {
		var l corev1.PodList
		_ = view.List(ctx, &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy)
		for _, p := range l.Items {
			if len(p.Finalizers) > 0 {
				return false
			}
		}
		return len(l.Items) == total
	})
	f.writes = auditWrites(t, auditLog, begin, time.Now(), map[string]string{jobControllerUser: "jobs"})["jobs"]

	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < work.rigs; i++ {
		job := work.name(i)
		f.createToPod = append(f.createToPod, seen[job+"/0"].Sub(created[i]))
		for k := 0; k+1 < work.perRig; k++ {
			f.handOver = append(f.handOver, seen[fmt.Sprintf("%s/%d", job, k+1)].Sub(ended[fmt.Sprintf("%s/%d", job, k)]))
		}
	}
	sortDurations(f.createToPod)
	sortDurations(f.handOver)
	return f
}

func jobPodKey(p *corev1.Pod) string {
	return p.Labels[batchv1.JobNameLabel] + "/" + p.Annotations[batchv1.JobCompletionIndexAnnotation]
}

// sideBySide prints clawfarm's phase and the Job controller's on the same
// work, which what says.
func sideBySide(what string, cf, jobs phaseFigures) {
	row := func(name string, a, b float64, unit string) {
		ratio := "—"
		if b > 0 {
			ratio = fmt.Sprintf("%.2f", a/b)
		}
		fmt.Printf("  %-28s %12.2f %-4s %12.2f %-4s   %s\n", name, a, unit, b, unit, ratio)
	}
	fmt.Printf("\nthe same work side by side: %s, one at a time per rig, one API server, one fake kubelet\n", what)
	fmt.Printf("  %-28s %17s %17s   %s\n", "", "clawfarm", "Job controller", "clawfarm ÷ Jobs")
	row("wall time", cf.wall.Seconds(), jobs.wall.Seconds(), "s")
	pct := func(name string, a, b []time.Duration, p int) {
		if len(a) > 0 && len(b) > 0 { // a benchmark that does not measure it has none
			row(fmt.Sprintf("%s p%d", name, p), ms(percentile(a, p)), ms(percentile(b, p)), "ms")
		}
	}
	pct("create→first pod", cf.createToPod, jobs.createToPod, 50)
	pct("create→first pod", cf.createToPod, jobs.createToPod, 99)
	pct("pod end→next pod", cf.handOver, jobs.handOver, 50)
	pct("pod end→next pod", cf.handOver, jobs.handOver, 99)
	row("API writes per pod", float64(cf.writes.total)/float64(cf.pods), float64(jobs.writes.total)/float64(jobs.pods), "")
	row("kube-apiserver CPU", cf.apiserverCPU, jobs.apiserverCPU, "s")
	if cf.processCPU > 0 {
		row("controller process CPU", cf.processCPU, jobs.processCPU, "s")
	} else {
		fmt.Printf("  kube-controller-manager's CPU over its phase: %.1f s (clawfarm's manager runs in the benchmark's process, beside the fake kubelet)\n", jobs.processCPU)
	}
	fmt.Printf("  clawfarm's writes per pod (audit log):\n%s", cf.writes.perUnit(cf.pods))
	fmt.Printf("  the Job controller's writes per pod (audit log, %s):\n%s", jobs.workersNote, jobs.writes.perUnit(jobs.pods))
	if len(jobs.writes.refused) > 0 {
		fmt.Printf("  the Job controller's refused writes: %v\n", jobs.writes.refused)
	}
}

// jobsTimeout bounds the Jobs phase (BENCH_JOBS_TIMEOUT, else def, else 10m).
func jobsTimeout(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("BENCH_JOBS_TIMEOUT")); err == nil {
		return d
	}
	if def > 0 {
		return def
	}
	return 10 * time.Minute
}

// jobPodName names a Job's pod for the fake kubelet's script the way a run
// names a clawfarm pod: <job>/<completion index>.
func jobPodName(p *corev1.Pod) (string, bool) {
	if p.Labels[jobLabel] != "true" {
		return "", false
	}
	return jobPodKey(p), true
}

// apiserverProfileURL is kube-apiserver's CPU profile over the next seconds.
func apiserverProfileURL(kcfg *rest.Config, seconds int) string {
	return fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(kcfg.Host, "/"), seconds)
}
