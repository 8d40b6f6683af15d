package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The chart's dashboard and alerts read what the real manager serves: the
// manager as its flags make it (HTTPS, a token reviewed by the API server)
// does real work on envtest — rigs Ready, InUse, NotReady (a health route
// that does not answer, so probes fail) and Offline, a priced run to DONE
// and one out of budget, their pods driven by the fake kubelet — and is
// scraped as the chart's ServiceMonitor makes Prometheus scrape it. Every
// query of the dashboard and every alert's expression must read metrics
// the scrape has, name only labels those series carry once stored (a
// `sum by (namespace)` on a series without one, or one the scrape renames
// exported_namespace, fails), and match only values they carry.
func TestChartQueriesReadTheScrapedSeries(t *testing.T) {
	testenv.Needs(t, testenv.Assets)
	queries, honorLabels, podTargetLabels := chartQueries(t)

	env, err := testenv.Start("../../config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	token := serviceAccountToken(ctx, t, cs, "prometheus")
	bindMetricsReader(ctx, t, cs, createMetricsReaderRole(ctx, t, cs), "prometheus")

	kubelet := &fakekubelet.Kubelet{Client: env.Client, Script: scrapeRunEndings}
	kctx, stopKubelet := context.WithCancel(ctx)
	defer stopKubelet()
	go kubelet.Run(kctx)

	addr, logs := startRealManager(ctx, t, env)
	defer func() {
		if t.Failed() {
			t.Logf("the manager's log:\n%s", lastLines(logs.String(), 60))
		}
	}()
	ns := driveScrapedWork(t, env)

	// The counters move once the status writes that record them are
	// answered, which can be after the test sees the phases: scrape until
	// the work shows in the series as served, or the deadline. The probe
	// failures' labels are the check's to judge.
	want := [][3]string{
		{"clawfarm_rig_probe_failures_total", "", ""},
		{"clawfarm_rigs", "phase", string(farmv1.RigNotReady)},
		{"clawfarm_rigs", "phase", string(farmv1.RigOffline)},
		{"clawfarm_rigs", "phase", string(farmv1.RigInUse)},
		{"clawfarm_attempts_total", "outcome", farmv1.OutcomeDone},
		{"clawfarm_attempts_total", "outcome", farmv1.OutcomeBudget},
		{"clawfarm_agentruns_finished_total", "phase", string(farmv1.RunFailed)},
		{"clawfarm_tokens_total", "namespace", ns},
		{"clawfarm_cost_usd_total", "namespace", ns},
		{"clawfarm_time_to_pod_seconds_count", "", ""},
		{"clawfarm_queue_wait_seconds_bucket", "le", "+Inf"},
		{"clawfarm_build_info", "", ""},
	}
	var fams []*dto.MetricFamily
	var lacking []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		fams = scrapeManager(ctx, t, addr, token)
		served := storedScrape(t, fams, true, nil)
		lacking = lacking[:0]
		for _, w := range want {
			if served.labels[w[0]] == nil || w[1] != "" && !served.has(w[0], w[1], w[2]) {
				lacking = append(lacking, fmt.Sprintf("%s{%s=%q}", w[0], w[1], w[2]))
			}
		}
		if len(lacking) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(lacking) > 0 {
		t.Errorf("the scrape never showed the work done: no %s", strings.Join(lacking, ", "))
	}

	s := storedScrape(t, fams, honorLabels, podTargetLabels)
	for _, q := range queries {
		problems, notes := checkQuery(q.where, q.expr, s)
		for _, p := range problems {
			t.Error(p)
		}
		for _, n := range notes {
			t.Log(n)
		}
	}
	t.Logf("%d queries checked against %d scraped metric names", len(queries), len(s.labels))
}

// chartQuery is one query of the rendered chart, and where it is.
type chartQuery struct{ where, expr string }

// chartQueries renders the chart with its dashboard, alerts and
// ServiceMonitor (and shards, which add the pod's shard label to every
// series), and returns every panel query and alert expression, and how
// the ServiceMonitor has Prometheus store the series.
func chartQueries(t *testing.T) (queries []chartQuery, honorLabels bool, podTargetLabels []string) {
	t.Helper()
	objs := renderChart(t, "--set", "metrics.dashboard.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
		"--set", "metrics.serviceMonitor.enabled=true", "--set-json", exampleShards)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	cm := find(objs, "ConfigMap", "farm", "t-clawfarm-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if err := json.Unmarshal([]byte(dig(cm, "data", "clawfarm.json").(string)), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, chartQuery{fmt.Sprintf("panel %q", p.Title), tg.Expr})
		}
	}
	pr := find(objs, "PrometheusRule", "farm", "t-clawfarm-alerts")
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	for _, g := range dig(pr, "spec", "groups").([]any) {
		for _, r := range dig(g, "rules").([]any) {
			expr, _ := dig(r, "expr").(string)
			queries = append(queries, chartQuery{fmt.Sprintf("alert %v", dig(r, "alert")), expr})
		}
	}
	sm := find(objs, "ServiceMonitor", "farm", "t-clawfarm-manager")
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	honorLabels, _ = dig(sm, "spec", "endpoints").([]any)[0].(map[string]any)["honorLabels"].(bool)
	if l, ok := dig(sm, "spec", "podTargetLabels").([]any); ok {
		for _, v := range l {
			podTargetLabels = append(podTargetLabels, v.(string))
		}
	}
	if len(queries) < 10 {
		t.Fatalf("only %d queries in the chart's dashboard and alerts", len(queries))
	}
	return queries, honorLabels, podTargetLabels
}

// scrapeRunEndings ends the test's attempt pods by their run: "priced" DONE
// with its token usage, "budget" out of its token budget (STUCK, not
// retryable).
func scrapeRunEndings(pod *corev1.Pod) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "timer set", ExitReason: contract.ReasonEndTurn,
		Turns: 5, Usage: contract.Usage{PromptTokens: 1200, CompletionTokens: 150, CachedTokens: 200}}
	if pod.Labels[farmv1.LabelRun] == "budget" {
		m = contract.TerminationMessage{Sentinel: contract.Stuck, Recap: "the input token budget is spent",
			ExitReason: contract.ReasonBudgetExhausted, Turns: 3, Usage: contract.Usage{PromptTokens: 5000, CompletionTokens: 50}}
	}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: 300 * time.Millisecond, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// startRealManager starts the manager as runManager does — its options and
// controllers from its flags, the metrics endpoint on HTTPS behind the API
// server's token and access reviews — and returns the endpoint's address
// and its log. It stops when the test ends.
func startRealManager(ctx context.Context, t *testing.T, env *testenv.Env) (string, *testenv.SyncBuffer) {
	t.Helper()
	addr := testenv.FreeAddr(t)
	f := newManagerFlags()
	if err := f.parse([]string{"--metrics-bind-address=" + addr, "--health-probe-bind-address=0",
		"--rig-probe-interval=200ms", "--rig-probe-timeout=1s", "--devicerig-workers=2", "--agentrun-workers=2"}); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	opts := f.managerOptions()
	opts.Logger = zap.New(zap.WriteTo(logs))
	ctrl.SetLogger(opts.Logger) // the caches' informers log through the root logger
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr, f.settings()); err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			fmt.Fprintln(logs, "the manager stopped:", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	return addr, logs
}

// driveScrapedWork makes the rigs and runs whose series the queries read,
// in a fresh namespace it returns, and waits for their phases.
func driveScrapedWork(t *testing.T, env *testenv.Env) string {
	t.Helper()
	ns := env.Namespace(t)
	c := env.Client
	env.MakeRig(t, ns, "rig", nil)
	// A rig whose health route does not answer: its probes fail, it is NotReady.
	dead := rigtest.Unused()
	unreachable := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unreachable"},
		Spec: farmv1.DeviceRigSpec{NodeName: env.MakeNode(t, ns+"-unreachable"),
			Endpoint: farmv1.RigEndpoint{URL: dead, HealthURL: strings.TrimSuffix(dead, "/mcp") + "/api/status"},
			Phone:    farmv1.Phone{Platform: "ios", Model: "iPhone 15"}}}
	// A rig whose node does not report: Offline.
	node := env.MakeNode(t, ns+"-offline")
	env.SetNodeReady(t, node, false)
	offline := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "offline"},
		Spec: farmv1.DeviceRigSpec{NodeName: node, Endpoint: farmv1.RigEndpoint{
			URL: env.Health.URL + "/rigs/offline/mcp", HealthURL: env.Health.URL + "/rigs/offline/api/status"},
			Phone: farmv1.Phone{Platform: "ios", Model: "iPhone 15"}}}
	for _, o := range []*farmv1.DeviceRig{unreachable, offline} {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	// Two runs on the one Ready rig, one after the other: the second queues.
	for _, name := range []string{"priced", "budget"} {
		run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "Set a 5 minute timer in Clock.",
				Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/timer", BaseURL: "http://127.0.0.1:1/v1",
					Pricing: &farmv1.ModelPricing{Input: "3", CachedInput: "0.3", Output: "15"}}}}
		if err := c.Create(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
	env.WaitRig(t, ns, "unreachable", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigNotReady })
	env.WaitRig(t, ns, "offline", func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigOffline })
	for name, phase := range map[string]farmv1.RunPhase{"priced": farmv1.RunSucceeded, "budget": farmv1.RunFailed} {
		testenv.Eventually(t, fmt.Sprintf("run %s %s", name, phase), func() bool {
			var run farmv1.AgentRun
			return c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &run) == nil && run.Status.Phase == phase
		})
	}
	return ns
}

// scrapeAccept is the Accept header Prometheus scrapes with by default.
const scrapeAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4," +
	"text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"

// scrapeManager gets https://addr/metrics with token, as Prometheus does
// (the certificate is self-signed: the ServiceMonitor skips its check), and
// returns its metric families. It retries while the endpoint starts.
func scrapeManager(ctx context.Context, t *testing.T, addr, token string) []*dto.MetricFamily {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", scrapeAccept)
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("scrape %s: %v", addr, err)
			}
			time.Sleep(100 * time.Millisecond) // the endpoint is starting
			continue
		}
		fams, err := decodeScrape(resp.Body, expfmt.ResponseFormat(resp.Header))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("scrape %s: %s (Content-Type %q): %v", addr, resp.Status, resp.Header.Get("Content-Type"), err)
		}
		return fams
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
