package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// exampleShards are the shards of docs/sharding.md, which
// hack/render-admission.sh renders config/admission/shards/ with.
const exampleShards = `shards=[{"name":"a","pools":["a"]},{"name":"b","pools":["b","c"]}]`

// Two shards: two manager Deployments side by side, each with its --shard,
// its own leader election and its own pods (disjoint selectors), a
// PodDisruptionBudget each; the metrics Service still selects them all.
func TestChartTwoShards(t *testing.T) {
	t.Parallel()
	objs := renderChart(t, "--set-json", exampleShards)
	if find(objs, "Deployment", "farm", "t-clawfarm-manager") != nil {
		t.Error("with shards, the chart still renders the unsharded manager Deployment")
	}
	deployments := 0
	for _, o := range objs {
		if o["kind"] == "Deployment" && dig(o, "metadata", "labels", "app.kubernetes.io/component") == "manager" {
			deployments++
		}
	}
	if deployments != 2 {
		t.Errorf("%d manager Deployments, want one per shard (2)", deployments)
	}
	type shard struct {
		pools     []string
		podLabels labels.Set
		selector  labels.Selector
		id        string
	}
	shards := map[string]*shard{"a": {pools: []string{"a"}}, "b": {pools: []string{"b", "c"}}}
	for name, s := range shards {
		dep := find(objs, "Deployment", "farm", "t-clawfarm-manager-"+name)
		if dep == nil {
			t.Fatalf("no manager Deployment for shard %s", name)
		}
		f := chartManagerFlags(t, dep)
		sel, err := f.shardSelector()
		if err != nil || sel == nil {
			t.Fatalf("shard %s: --shard %q: %v", name, *f.shard, err)
		}
		for _, p := range []string{"a", "b", "c", ""} {
			want := false
			for _, q := range s.pools {
				want = want || p == q
			}
			if got := sel.Matches(labels.Set{farmv1.LabelPool: p}); got != want {
				t.Errorf("shard %s (--shard %q) matches pool %q: %v, want %v", name, *f.shard, p, got, want)
			}
		}
		s.id = f.leaderElectionID()
		if !*f.leaderElect {
			t.Errorf("shard %s: no leader election", name)
		}
		s.podLabels = labels.Set{}
		for k, v := range dig(dep, "spec", "template", "metadata", "labels").(map[string]any) {
			s.podLabels[k] = v.(string)
		}
		s.selector = labels.SelectorFromSet(labelsOf(dig(dep, "spec", "selector", "matchLabels")))
		if !s.selector.Matches(s.podLabels) {
			t.Errorf("shard %s: the Deployment's selector %v does not select its pods %v", name, s.selector, s.podLabels)
		}
		pdb := find(objs, "PodDisruptionBudget", "farm", "t-clawfarm-manager-"+name)
		if pdb == nil || !reflect.DeepEqual(labelsOf(dig(pdb, "spec", "selector", "matchLabels")), labelsOf(dig(dep, "spec", "selector", "matchLabels"))) {
			t.Errorf("shard %s: PodDisruptionBudget %v, want one selecting the shard's pods", name, pdb)
		}
		terms, _ := dig(dep, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution").([]any)
		if len(terms) != 1 || !reflect.DeepEqual(labelsOf(dig(terms[0], "podAffinityTerm", "labelSelector", "matchLabels")), labelsOf(dig(dep, "spec", "selector", "matchLabels"))) {
			t.Errorf("shard %s: anti-affinity %v, want it on the shard's own replicas", name, terms)
		}
	}
	if shards["a"].id == shards["b"].id {
		t.Errorf("both shards elect their leader on Lease %s", shards["a"].id)
	}
	if shards["a"].selector.Matches(shards["b"].podLabels) || shards["b"].selector.Matches(shards["a"].podLabels) {
		t.Error("one shard's Deployment selects the other's pods")
	}
	svc := find(objs, "Service", "farm", "t-clawfarm-metrics")
	if sel := labels.SelectorFromSet(labelsOf(dig(svc, "spec", "selector"))); !sel.Matches(shards["a"].podLabels) || !sel.Matches(shards["b"].podLabels) {
		t.Errorf("the metrics Service selects %v, not every shard's managers", sel)
	}
}

func labelsOf(m any) labels.Set {
	s := labels.Set{}
	mm, _ := m.(map[string]any)
	for k, v := range mm {
		s[k] = v.(string)
	}
	return s
}

// The shard policies come with shards only, and config/admission/shards/
// is what the chart renders for the example shards.
func TestChartShardAdmissionIsConfigAdmission(t *testing.T) {
	t.Parallel()
	count := func(objs []object) (n int, shard map[string]object) {
		shard = map[string]object{}
		for _, o := range objs {
			if !isAdmission(o) {
				continue
			}
			n++
			if strings.HasSuffix(dig(o, "metadata", "name").(string), "-shard") {
				shard[objectKey(o)] = withoutLabels(o)
			}
		}
		return n, shard
	}
	if n, shard := count(renderRelease(t)); n != 17 || len(shard) != 0 {
		t.Errorf("without shards: %d admission objects, %d of them shard policies; want 17 and none", n, len(shard))
	}
	n, chart := count(renderRelease(t, "--set-json", exampleShards))
	if n != 21 || len(chart) != 4 {
		t.Errorf("with shards: %d admission objects, %d of them the shard policies and bindings; want 21 and 4", n, len(chart))
	}
	files, err := filepath.Glob("../../config/admission/shards/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("config/admission/shards holds no files (%v): run hack/render-admission.sh", err)
	}
	config := map[string]object{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, b) {
			config[objectKey(o)] = withoutLabels(o)
		}
	}
	for k, o := range chart {
		if !reflect.DeepEqual(o, config[k]) {
			t.Errorf("%s differs between the chart and config/admission/shards/ (run hack/render-admission.sh):\nchart:  %v\nconfig: %v", k, o, config[k])
		}
	}
	for k := range config {
		if chart[k] == nil {
			t.Errorf("config/admission/shards/ holds %s, which the chart does not render (run hack/render-admission.sh)", k)
		}
	}
	if p := find(renderRelease(t, "--set-json", exampleShards, "--set", "admission.enabled=false"), "ValidatingAdmissionPolicy", "", "clawfarm-agentrun-shard"); p != nil {
		t.Error("admission.enabled=false still renders the shard policy")
	}
}

// The schema refuses a mistyped shard; the chart refuses a pool or a name
// given to two shards.
func TestChartRefusesBadShards(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ shards, want string }{
		{`[{"name":"a","pool":["a"]}]`, "additional properties 'pool' not allowed"},
		{`[{"name":"a"}]`, "missing property 'pools'"},
		{`[{"name":"a","pools":[]}]`, "minItems"},
		{`[{"name":"A_1","pools":["a"]}]`, "name"},
		{`[{"name":"a","pools":["a b"]}]`, "pools"},
		{`[{"name":"a","pools":["a"]},{"name":"b","pools":["b","a"]}]`, "pool a is in shards a and b"},
		{`[{"name":"a","pools":["a"]},{"name":"a","pools":["b"]}]`, "two shards are named a"},
	} {
		_, stderr, err := renderChartErr(t, "--set-json", "shards="+c.shards)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("shards=%s: %v\n%s\nwant an error saying %q", c.shards, err, stderr, c.want)
		}
	}
}

// Each shard's managers export their own shard's gauges: the ServiceMonitor
// labels every series with the shard, and the dashboard sums the shards'
// maxima (the max over one shard's replicas, as before).
func TestChartShardMetrics(t *testing.T) {
	t.Parallel()
	sm := func(args ...string) object {
		for _, o := range renderChart(t, append([]string{"--set", "metrics.serviceMonitor.enabled=true"}, args...)...) {
			if o["kind"] == "ServiceMonitor" {
				return o
			}
		}
		t.Fatal("no ServiceMonitor")
		return nil
	}
	if l := dig(sm(), "spec", "podTargetLabels"); l != nil {
		t.Errorf("without shards: podTargetLabels %v", l)
	}
	if l := dig(sm("--set-json", exampleShards), "spec", "podTargetLabels"); !reflect.DeepEqual(l, []any{"farm.clawfarm.dev/shard"}) {
		t.Errorf("with shards: podTargetLabels %v, want the shard label", l)
	}
	b, err := os.ReadFile("../../charts/clawfarm/dashboards/clawfarm.json")
	if err != nil {
		t.Fatal(err)
	}
	gauges := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"expr"`) || !strings.Contains(line, "max") {
			continue
		}
		gauges++
		if !strings.Contains(line, "farm_clawfarm_dev_shard)") || !strings.Contains(line, "sum") {
			t.Errorf("dashboard query %s: want the sum over shards of each shard's max", strings.TrimSpace(line))
		}
	}
	if gauges == 0 {
		t.Error("the dashboard has no gauge query")
	}
}
