package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The chart's metrics pieces: the ServiceMonitor, the Grafana dashboard and
// the PrometheusRule, each checked against the series the operator exports.

func TestChartServiceMonitor(t *testing.T) {
	t.Parallel()
	if find(renderChart(t), "ServiceMonitor", "", "") != nil {
		t.Error("a ServiceMonitor by default: clusters without prometheus-operator would refuse the release")
	}
	objs := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=15s",
		"--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack")
	var sm object
	for _, o := range objs {
		if o["kind"] == "ServiceMonitor" {
			sm = o
		}
	}
	if sm == nil || sm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("ServiceMonitor %v", sm)
	}
	if dig(sm, "metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v", dig(sm, "metadata", "labels"))
	}
	ep := dig(sm, "spec", "endpoints").([]any)[0]
	if dig(ep, "interval") != "15s" || dig(ep, "port") != "metrics" {
		t.Errorf("endpoint %v", ep)
	}
	// The run counters' namespace label is the run's: Prometheus must keep
	// it, not rename it exported_namespace under the manager's.
	if dig(ep, "honorLabels") != true {
		t.Errorf("endpoint %v, want honorLabels: true", ep)
	}
	// The endpoint is HTTPS and wants a token, as the manager is told: the
	// token of a ServiceAccount the chart binds to the metrics reader role,
	// from a Secret in the ServiceMonitor's namespace (authorization, not
	// the deprecated bearerTokenFile, which names a file of Prometheus's pod).
	if dig(ep, "scheme") != "https" || dig(ep, "bearerTokenFile") != nil || !*chartManagerFlags(t, managerDeployment(t, objs)).metricsSecure {
		t.Errorf("endpoint %v, want https with authorization, to a manager with --metrics-secure", ep)
	}
	if dig(ep, "authorization", "type") != "Bearer" || dig(ep, "authorization", "credentials", "name") != "t-clawfarm-metrics-scraper-token" ||
		dig(ep, "authorization", "credentials", "key") != "token" {
		t.Errorf("endpoint authorization %v, want the Bearer token in t-clawfarm-metrics-scraper-token", dig(ep, "authorization"))
	}
	tok := find(objs, "Secret", "farm", "t-clawfarm-metrics-scraper-token")
	if tok == nil || tok["type"] != "kubernetes.io/service-account-token" ||
		dig(tok, "metadata", "annotations", "kubernetes.io/service-account.name") != "t-clawfarm-metrics-scraper" {
		t.Errorf("the scraper's token Secret %v", tok)
	}
	if find(objs, "ServiceAccount", "farm", "t-clawfarm-metrics-scraper") == nil {
		t.Error("no scraper ServiceAccount for the token")
	}
	crb := find(objs, "ClusterRoleBinding", "", "t-clawfarm-metrics-scraper")
	if crb == nil || dig(crb, "roleRef", "name") != "t-clawfarm-metrics-reader" || find(objs, "ClusterRole", "", "t-clawfarm-metrics-reader") == nil ||
		dig(crb, "subjects").([]any)[0].(map[string]any)["name"] != "t-clawfarm-metrics-scraper" {
		t.Errorf("the scraper's binding %v, want t-clawfarm-metrics-reader bound to t-clawfarm-metrics-scraper", crb)
	}
	// A Secret of the user's own: named, and nothing made for it.
	own := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.tokenSecret.name=prom-token",
		"--set", "metrics.serviceMonitor.tokenSecret.key=jwt")
	for _, o := range own {
		if o["kind"] == "ServiceMonitor" {
			if cred := dig(o, "spec", "endpoints").([]any)[0].(map[string]any)["authorization"]; dig(cred, "credentials", "name") != "prom-token" || dig(cred, "credentials", "key") != "jwt" {
				t.Errorf("tokenSecret prom-token/jwt: authorization %v", cred)
			}
		}
	}
	if find(own, "ServiceAccount", "farm", "t-clawfarm-metrics-scraper") != nil || find(own, "Secret", "farm", "t-clawfarm-metrics-scraper-token") != nil {
		t.Error("with tokenSecret.name set the chart still makes a scraper account")
	}
	plain := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.secure=false")
	for _, o := range plain {
		if o["kind"] == "ServiceMonitor" && dig(o, "spec", "endpoints").([]any)[0].(map[string]any)["scheme"] != nil {
			t.Errorf("metrics.secure=false still scrapes %v", dig(o, "spec", "endpoints"))
		}
	}
	if find(plain, "ServiceAccount", "farm", "t-clawfarm-metrics-scraper") != nil {
		t.Error("metrics.secure=false: a scraper account for plain HTTP")
	}
	if *chartManagerFlags(t, managerDeployment(t, plain)).metricsSecure {
		t.Error("metrics.secure=false: the manager still serves HTTPS")
	}
	svc := find(objs, "Service", "farm", "t-clawfarm-metrics")
	svcLabels := dig(svc, "metadata", "labels").(map[string]any)
	for k, v := range dig(sm, "spec", "selector", "matchLabels").(map[string]any) {
		if svcLabels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%v, which the metrics Service lacks", k, v)
		}
	}
	if port := dig(svc, "spec", "ports").([]any)[0]; dig(port, "name") != "metrics" {
		t.Errorf("the metrics Service's port is %v, the ServiceMonitor scrapes 'metrics'", port)
	}
	if _, stderr, err := renderChartErr(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.enabled=false"); err == nil ||
		!strings.Contains(stderr, "needs metrics.enabled") {
		t.Errorf("a ServiceMonitor without metrics: err %v, %s", err, stderr)
	}
}

// The dashboard's queries name only metrics the operator exports
// (controllers/agentrun/metrics.go, controllers/devicerig/metrics.go).
func TestChartDashboardNamesOnlyExistingMetrics(t *testing.T) {
	t.Parallel()
	if find(renderChart(t), "ConfigMap", "", "t-clawfarm-dashboard") != nil {
		t.Error("the dashboard ConfigMap rendered with the dashboard off")
	}
	objs := renderChart(t, "--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.namespace=monitoring")
	cm := find(objs, "ConfigMap", "monitoring", "t-clawfarm-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap in metrics.dashboard.namespace")
	}
	if dig(cm, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("dashboard labels %v, want the Grafana sidecar's grafana_dashboard: \"1\"", dig(cm, "metadata", "labels"))
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(dig(cm, "data", "clawfarm.json").(string)), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exported := exportedMetrics(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			names := promQLMetrics(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("panel %q: %q names %s, which the operator does not export", p.Title, tg.Expr, n)
				}
				used[n] = true
			}
		}
	}
	if len(dash.Panels) == 0 || len(used) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	t.Logf("the dashboard uses %d of the %d exported series names", len(used), len(exported))
}

// The PrometheusRule's alerts read only series the operator exports, with
// label values it sets (run and rig phases, attempt outcomes), and take
// their thresholds from the values.
func TestChartPrometheusRule(t *testing.T) {
	t.Parallel()
	if find(renderChart(t), "PrometheusRule", "", "t-clawfarm-alerts") != nil {
		t.Error("a PrometheusRule by default: clusters without prometheus-operator would refuse the release")
	}
	objs := renderChart(t, "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
		"--set", "metrics.prometheusRule.rigsNotReadyFor=7m", "--set", "metrics.prometheusRule.queuedFor=45m",
		"--set-json", "metrics.prometheusRule.budgetExhaustedRatio=0.25")
	pr := find(objs, "PrometheusRule", "farm", "t-clawfarm-alerts")
	if pr == nil || pr["apiVersion"] != "monitoring.coreos.com/v1" || dig(pr, "metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Fatalf("PrometheusRule %v", pr)
	}
	known := map[string]map[string]bool{"phase": {}, "outcome": {}}
	for _, v := range append(slices.Clone(runPhases), rigPhases...) {
		known["phase"][v] = true
	}
	for _, o := range attemptOutcomes {
		known["outcome"][o] = true
	}
	matcher := regexp.MustCompile(`(\w+)=~?"([^"]*)"`)
	exported := exportedMetrics(t)
	alerts := map[string]map[string]any{}
	for _, g := range dig(pr, "spec", "groups").([]any) {
		for _, r := range dig(g, "rules").([]any) {
			rule := r.(map[string]any)
			name, _ := rule["alert"].(string)
			expr, _ := rule["expr"].(string)
			alerts[name] = rule
			if dig(rule, "labels", "severity") == nil || dig(rule, "annotations", "summary") == nil || dig(rule, "annotations", "description") == nil {
				t.Errorf("alert %s lacks a severity, a summary or a description: %v", name, rule)
			}
			names := promQLMetrics(expr)
			if len(names) == 0 {
				t.Errorf("alert %s: %q names no metric", name, expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("alert %s: %q names %s, which the operator does not export", name, expr, n)
				}
			}
			for _, m := range matcher.FindAllStringSubmatch(expr, -1) {
				for _, v := range strings.Split(m[2], "|") {
					if values, ok := known[m[1]]; ok && !values[v] {
						t.Errorf("alert %s: %s=%q is not a value the operator sets", name, m[1], v)
					}
				}
			}
		}
	}
	for name, want := range map[string]string{"ClawfarmRigsNotReady": "7m", "ClawfarmRunsQueuedWithoutProgress": "5m", "ClawfarmBudgetExhaustion": "15m"} {
		if rule := alerts[name]; rule == nil || rule["for"] != want {
			t.Errorf("alert %s: %v, want for: %s", name, rule, want)
		}
	}
	if rule := alerts["ClawfarmStallWatchdogFiring"]; rule == nil || !strings.Contains(rule["expr"].(string), `outcome="Stalled"`) {
		t.Errorf("no stall watchdog alert: %v", rule)
	}
	if e, _ := dig(alerts["ClawfarmRunsQueuedWithoutProgress"], "expr").(string); !strings.Contains(e, "[45m]") {
		t.Errorf("queuedFor=45m: %q", e)
	}
	if e, _ := dig(alerts["ClawfarmBudgetExhaustion"], "expr").(string); !strings.HasSuffix(e, "> 0.25") {
		t.Errorf("budgetExhaustedRatio=0.25: %q", e)
	}
	if _, stderr, err := renderChartErr(t, "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.enabled=false"); err == nil ||
		!strings.Contains(stderr, "needs metrics.enabled") {
		t.Errorf("alerts without metrics: err %v, %s", err, stderr)
	}
	if _, _, err := renderChartErr(t, "--set", "metrics.prometheusRule.budgetExhaustedRatio=2"); err == nil {
		t.Error("budgetExhaustedRatio=2 rendered; the schema must refuse a share above 1")
	}
}

// exportedMetrics reads the metric names the two controllers declare: the
// Name of each prometheus Opts literal and the first argument of each
// prometheus.NewDesc, with _bucket, _sum and _count for histograms.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, file := range []string{"../../controllers/agentrun/metrics.go", "../../controllers/devicerig/metrics.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if id, _ := kv.Key.(*ast.Ident); ok && id != nil && id.Name == "Name" {
						name := stringLit(t, kv.Value)
						names[name] = true
						if sel.Sel.Name == "HistogramOpts" {
							names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
					names[stringLit(t, n.Args[0])] = true
				}
			}
			return true
		})
	}
	if len(names) < 4 {
		t.Fatalf("found only %v in the controllers' metrics.go", names)
	}
	return names
}

func stringLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		t.Fatalf("a metric name that is not a string literal: %#v", e)
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	promQLStrip = regexp.MustCompile(`"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\b(by|without|on|ignoring)\s*\([^)]*\)`)
	promQLWord  = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	// The PromQL functions and keywords the dashboard may use; any other
	// word in a query is taken for a metric name.
	promQLKeywords = map[string]bool{"sum": true, "max": true, "min": true, "avg": true, "count": true, "rate": true,
		"irate": true, "increase": true, "histogram_quantile": true, "and": true, "or": true, "unless": true, "offset": true}
)

// promQLMetrics returns the metric names in a PromQL expression: its words
// once strings, label matchers, ranges and grouping clauses are removed,
// less the functions and keywords.
func promQLMetrics(expr string) []string {
	var out []string
	for _, w := range promQLWord.FindAllString(promQLStrip.ReplaceAllString(expr, " "), -1) {
		if !promQLKeywords[w] {
			out = append(out, w)
		}
	}
	return out
}

func TestPromQLMetrics(t *testing.T) {
	t.Parallel()
	got := promQLMetrics(`histogram_quantile(0.95, sum by (le) (rate(a_bucket{phase=~"x|y"}[$__rate_interval]))) / max without (pod) (b) + 2`)
	if !slices.Equal(got, []string{"a_bucket", "b"}) {
		t.Errorf("promQLMetrics = %v", got)
	}
}
