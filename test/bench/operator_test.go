//go:build bench

package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/controllers/devicerig"
	"github.com/clawfarm/clawfarm/controllers/toolpolicy"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

const (
	rigs    = 200
	runs    = 1000
	runTime = time.Second
)

// writeCounter counts the manager's API writes (POST, PUT, PATCH, DELETE), events included.
type writeCounter struct {
	next   http.RoundTripper
	writes atomic.Int64

	mu     sync.Mutex
	byKey  map[string]int // "PUT agentruns/status" → count
	failed map[string]int // "PUT agentruns/status 409" → count (reads too)
	lat    map[string][]time.Duration
	// trace keeps every request (BENCH_TRACE) in timeline: start and end
	// in µs since the epoch, method, path, status code.
	trace    bool
	timeline []string
}

func (w *writeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Method + " " + resourceOf(r.URL.Path)
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		w.writes.Add(1)
		w.mu.Lock()
		if w.byKey == nil {
			w.byKey = map[string]int{}
		}
		w.byKey[key]++
		w.mu.Unlock()
	}
	t0 := time.Now()
	resp, err := w.next.RoundTrip(r)
	if w.trace && !strings.Contains(r.URL.RawQuery, "watch=true") {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		w.mu.Lock()
		w.timeline = append(w.timeline, fmt.Sprintf("%d %d %s %s %d", t0.UnixMicro(), time.Now().UnixMicro(), r.Method, r.URL.Path, code))
		w.mu.Unlock()
	}
	if !strings.Contains(r.URL.RawQuery, "watch=true") {
		w.mu.Lock()
		if w.lat == nil {
			w.lat = map[string][]time.Duration{}
		}
		w.lat[key] = append(w.lat[key], time.Since(t0))
		w.mu.Unlock()
	}
	if err == nil && resp.StatusCode >= 300 {
		w.mu.Lock()
		if w.failed == nil {
			w.failed = map[string]int{}
		}
		w.failed[fmt.Sprintf("%s %d", key, resp.StatusCode)]++
		w.mu.Unlock()
	}
	return resp, err
}

// resourceOf reduces an API path to its resource and subresource:
// /apis/g/v/namespaces/ns/agentruns/x/status → agentruns/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			parts = parts[i+2:]
			break
		}
	}
	if len(parts) > 3 && (parts[0] == "api" || parts[0] == "apis") {
		parts = parts[len(parts)-2:]
	}
	switch len(parts) {
	case 0:
		return path
	case 1, 2:
		return parts[0]
	}
	return parts[0] + "/" + parts[2]
}

// latencies prints, per kind of request, how long the manager waited for the
// API server, heaviest total first: where its workers' time goes.
func (w *writeCounter) latencies() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	type row struct {
		key      string
		p50, p99 time.Duration
		n        int
		total    time.Duration
	}
	var rows []row
	for k, v := range w.lat {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		r := row{key: k, p50: v[len(v)/2], p99: v[len(v)*99/100], n: len(v)}
		for _, d := range v {
			r.total += d
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].total > rows[j].total })
	var b strings.Builder
	b.WriteString("  manager requests (client-side latency):\n")
	for _, r := range rows {
		if r.n < 10 {
			continue // discovery and the like
		}
		fmt.Fprintf(&b, "      %-28s n %5d   p50 %5.1f ms   p99 %6.1f ms   total %6.1f s\n", r.key, r.n, ms(r.p50), ms(r.p99), r.total.Seconds())
	}
	return b.String()
}

// workqueueFigures prints the controllers' reconcile counts and how long a
// request waited in the work queue, from controller-runtime's metrics.
func workqueueFigures() string {
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != "workqueue_queue_duration_seconds" && mf.GetName() != "workqueue_work_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			name := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" {
					name = l.GetValue()
				}
			}
			if h == nil || h.GetSampleCount() == 0 {
				continue
			}
			what := "waited in the queue"
			if mf.GetName() == "workqueue_work_duration_seconds" {
				what = "took to reconcile "
			}
			fmt.Fprintf(&b, "  %-10s %5d reconciles %s mean %6.0f ms\n", name, h.GetSampleCount(), what, 1000*h.GetSampleSum()/float64(h.GetSampleCount()))
		}
	}
	return b.String()
}

func (w *writeCounter) table(runs int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.byKey))
	for k := range w.byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return w.byKey[keys[i]] > w.byKey[keys[j]] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "      %-32s %6.2f\n", k, float64(w.byKey[k])/float64(runs))
	}
	return b.String()
}

// TestBenchOperator: 200 Ready rigs, 1,000 AgentRuns created at once, a fake
// kubelet that ends each pod with DONE 1 s after it starts. It prints the
// figures docs/benchmarks.md records; it is a measurement, run by `make bench-operator`.
func TestBenchOperator(t *testing.T) {
	ctrl.SetLogger(logr.Discard()) // the figures are the output; reconcile logs would drown them
	api := startAPIServer(t, 2000) // the fake kubelet stands for many kubelets
	scheme, cfg, kcfg, hc, auditLog, apiPID := api.scheme, api.cfg, api.kcfg, api.client, api.auditLog, api.pid
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	healthSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(healthyRig))
	}))
	defer healthSrv.Close()

	// The manager gets its own rest config whose transport counts writes. It
	// runs as it does in a cluster: as a ServiceAccount, with a token, holding
	// the ClusterRole that `make manifests` generates — so a permission the
	// markers miss fails here too (a refused request is printed).
	counter := &writeCounter{trace: os.Getenv("BENCH_TRACE") != ""}
	mcfg := managerConfig(ctx, t, cfg, hc)
	mcfg.QPS = -1 // as cmd/manager runs (ctrl.GetConfig): no client-side limit, the API server's fairness decides
	mcfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter }
	// The manager's controllers and cache as cmd/manager sets them up: a
	// controller missing here would leave its informer to start on the
	// first run's reconcile, inside the timed window.
	mgr, err := ctrl.NewManager(mcfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: agentrun.CacheOptions(nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&agentrun.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("agentrun"),
		Config: agentrun.Config{Loop: attempt.Defaults{Image: "loop"}, FollowUp: followup.JobDefaults{Image: "manager"},
			StartupTimeout: time.Minute, NodeLostGrace: time.Minute, MaxConcurrentReconciles: benchWorkers()}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&devicerig.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("devicerig"),
		Config: devicerig.Config{ProbeInterval: 30 * time.Second, ProbeTimeout: 2 * time.Second, MaxConcurrentReconciles: 8}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&toolpolicy.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()

	ns := "bench"
	must(t, hc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "farm-node"}}
	must(t, hc.Create(ctx, node))
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	must(t, hc.Status().Update(ctx, node))
	for i := 0; i < rigs; i++ {
		must(t, hc.Create(ctx, &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("rig-%03d", i)},
			Spec: farmv1.DeviceRigSpec{NodeName: "farm-node", Endpoint: farmv1.RigEndpoint{URL: healthSrv.URL + "/mcp"}}}))
	}
	waitFor(t, "all rigs Ready", 2*time.Minute, func() bool {
		var l farmv1.DeviceRigList
		_ = hc.List(ctx, &l, client.InNamespace(ns))
		n := 0
		for _, r := range l.Items {
			if r.Status.Phase == farmv1.RigReady {
				n++
			}
		}
		return n == rigs
	})

	// The fake kubelet: DONE one second after each pod is created (first seen
	// on the watch). The watch also times create→pod.
	done := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "done", ExitReason: contract.ReasonEndTurn}
	msg, _ := done.Encode()
	var seenMu sync.Mutex
	firstSeen := map[string]time.Time{}
	endSeen := map[string]time.Time{} // run → its pod's Succeeded status seen
	// The fake kubelet works from a pod watch of its own, as kubelets do. The
	// benchmark reads the runs from the manager's cache: a watch of its own
	// would load the API server with work that is not the operator's.
	view, err := cache.New(kcfg, cache.Options{Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{farmv1.LabelKind: "attempt"})}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = view.Start(ctx) }()
	podInformer, err := view.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	view.WaitForCacheSync(ctx)
	runCache := mgr.GetCache()
	if _, err := runCache.GetInformer(ctx, &farmv1.AgentRun{}); err != nil {
		t.Fatal(err)
	}
	if _, err := podInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return
		}
		seenMu.Lock()
		if _, ok := firstSeen[p.Labels[farmv1.LabelRun]]; !ok {
			firstSeen[p.Labels[farmv1.LabelRun]] = time.Now()
		}
		seenMu.Unlock()
	}, UpdateFunc: func(_, o any) {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Status.Phase != corev1.PodSucceeded {
			return
		}
		seenMu.Lock()
		if _, ok := endSeen[p.Labels[farmv1.LabelRun]]; !ok {
			endSeen[p.Labels[farmv1.LabelRun]] = time.Now()
		}
		seenMu.Unlock()
	}}); err != nil {
		t.Fatal(err)
	}
	kl := &fakekubelet.Kubelet{Client: hc, Poll: 20 * time.Millisecond, Workers: 32, CountFromSeen: true,
		// The fake kubelet ends each pod 1 s after it is created; the
		// binding and Running writes a real scheduler and kubelet add are not
		// the operator's, and on two shared cores they slow the API server it
		// is measured against. BENCH_KUBELET=full writes them too.
		EndOnly: os.Getenv("BENCH_KUBELET") != "full",
		Script: func(*corev1.Pod) fakekubelet.Ending {
			return fakekubelet.Ending{After: runTime, ExitCode: 0, Message: string(msg)}
		}}
	if _, err := podInformer.AddEventHandler(kl.Events()); err != nil {
		t.Fatal(err)
	}
	go kl.Run(ctx)

	if path := os.Getenv("BENCH_APISERVER_PROFILE"); path != "" {
		go profile(ctx, t, 0, apiserverProfileURL(kcfg, 8), kcfg, path) // and the Jobs phase's to <path>.jobs
	}
	before := counter.writes.Load()
	counter.mu.Lock()
	counter.byKey = nil // the per-resource table counts from here, as the total does
	counter.mu.Unlock()
	api0 := cpuSeconds(apiPID)
	start := time.Now()
	created := make([]time.Time, runs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < runs; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("run-%04d", i)},
				Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: fmt.Sprintf("rig-%03d", i%rigs)}, Trigger: "bench",
					Model: farmv1.ModelSpec{Provider: "openai", Name: "m"}}}
			must(t, hc.Create(ctx, run))
			created[i] = time.Now()
		}(i)
	}
	wg.Wait()
	createdAll := time.Since(start)
	waitFor(t, "all runs Succeeded", 10*time.Minute, func() bool {
		var l farmv1.AgentRunList
		_ = runCache.List(ctx, &l, client.InNamespace(ns), client.UnsafeDisableDeepCopy)
		n := 0
		for _, r := range l.Items {
			if r.Status.Phase == farmv1.RunSucceeded {
				n++
			}
		}
		return n == runs
	})
	wall := time.Since(start)
	apiCPU := cpuSeconds(apiPID) - api0
	waitFor(t, "leases released", time.Minute, func() bool {
		var l farmv1.DeviceRigList
		_ = hc.List(ctx, &l, client.InNamespace(ns))
		for _, r := range l.Items {
			if r.Status.Phase != farmv1.RigReady {
				return false
			}
		}
		return true
	})
	writes := counter.writes.Load() - before
	audited := auditWrites(t, auditLog, start, time.Now(), map[string]string{managerUser: "manager"})["manager"]

	// create→pod latency for runs whose rig was free: the first wave (run i < rigs).
	var lat []time.Duration
	var l farmv1.AgentRunList
	must(t, hc.List(ctx, &l, client.InNamespace(ns)))
	for i := 0; i < rigs; i++ {
		var name = fmt.Sprintf("run-%04d", i)
		seenMu.Lock()
		seen := firstSeen[name]
		seenMu.Unlock()
		lat = append(lat, seen.Sub(created[i]))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })

	// Hand-overs: from a pod's end (its Succeeded status seen) to the next
	// run's pod on that rig appearing. Runs go round-robin over the rigs, so
	// run i+rigs follows run i; wave k is the k-th run on each rig.
	waves := make([][]time.Duration, runs/rigs)
	seenMu.Lock()
	for i := 0; i < runs-rigs; i++ {
		this, next := fmt.Sprintf("run-%04d", i), fmt.Sprintf("run-%04d", i+rigs)
		k := i/rigs + 1
		waves[k] = append(waves[k], firstSeen[next].Sub(endSeen[this]))
	}
	seenMu.Unlock()
	lower := time.Duration(runs/rigs) * runTime
	kubeletDoes := "ends each pod with DONE %s after it appears (one status write; BENCH_KUBELET=full also binds it and marks it Running)"
	if !kl.EndOnly {
		kubeletDoes = "binds each pod, marks it Running, ends it with DONE %s after it appears (BENCH_KUBELET=full)"
	}
	fmt.Printf("\nclawfarm bench-operator: %d rigs, %d runs, %d AgentRun workers (BENCH_WORKERS)\n", rigs, runs, benchWorkers())
	fmt.Printf("  the fake kubelet "+kubeletDoes+"\n", runTime)
	fmt.Printf("  create→pod (free rig)  p50 %6.0f ms   p99 %6.0f ms   (target p99 < 2000 ms)\n", ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]))
	fmt.Printf("  creating the runs      %6.1f s   (the client, 32 at a time)\n", createdAll.Seconds())
	fmt.Printf("  wall time              %6.1f s   lower bound %.0f s   ratio %.2f   (target ≤ 2×lower+10 s = %.0f s)\n",
		wall.Seconds(), lower.Seconds(), wall.Seconds()/lower.Seconds(), (2*lower + 10*time.Second).Seconds())
	for k := 1; k < len(waves); k++ {
		h := waves[k]
		sort.Slice(h, func(i, j int) bool { return h[i] < h[j] })
		fmt.Printf("  hand-over to wave %d    p50 %6.0f ms   p99 %6.0f ms   (a pod's end → the next run's pod on its rig)\n", k+1, ms(h[len(h)/2]), ms(h[len(h)*99/100]))
	}
	fmt.Printf("  API writes per run     %6.2f   (manager, events included; target ≤ 12)\n", float64(writes)/runs)
	fmt.Print(counter.table(runs))
	if path := os.Getenv("BENCH_TRACE"); path != "" {
		// The manager's requests and each run's pod first seen and ended, to
		// follow one hand-over request by request.
		var b strings.Builder
		counter.mu.Lock()
		for _, line := range counter.timeline {
			fmt.Fprintln(&b, line)
		}
		counter.mu.Unlock()
		seenMu.Lock()
		for run, at := range firstSeen {
			fmt.Fprintf(&b, "%d pod-seen %s\n", at.UnixMicro(), run)
		}
		for run, at := range endSeen {
			fmt.Fprintf(&b, "%d pod-ended %s\n", at.UnixMicro(), run)
		}
		seenMu.Unlock()
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Log(err)
		}
	}
	if len(counter.failed) > 0 {
		fmt.Printf("  refused requests      %v (conflicts and the like: wasted work)\n", counter.failed)
	}
	fmt.Print(counter.latencies())
	fmt.Print(workqueueFigures())
	fmt.Printf("  manager peak RSS       %6.0f MiB (the test process: manager + fake kubelet + clients; target < 250 MiB)\n", float64(peakRSSOf(os.Getpid()))/(1<<20))
	if v := kl.Violations(); len(v) > 0 {
		t.Fatalf("exclusivity violated: %v", v[:min(5, len(v))])
	}

	// The same work for the Job controller, on the same API server and kubelet.
	var handOver []time.Duration
	for _, w := range waves[1:] {
		handOver = append(handOver, w...)
	}
	cf := phaseFigures{wall: wall, createToPod: lat, handOver: sortDurations(handOver), writes: audited, pods: runs, apiserverCPU: apiCPU}
	jobs := jobsPhase(ctx, t, cfg, kcfg, hc, scheme, kl, ns, jobsWork{rigs: rigs, perRig: runs / rigs,
		name: func(i int) string { return fmt.Sprintf("rig-%03d", i) }, node: func(int) string { return node.Name }}, apiPID, auditLog)
	sideBySide(fmt.Sprintf("%d rigs × %d sessions of %s", rigs, runs/rigs, runTime), cf, jobs)
	if v := kl.Violations(); len(v) > 0 {
		t.Fatalf("the Job controller ran two pods on a rig at once: %v", v[:min(5, len(v))])
	}
}
