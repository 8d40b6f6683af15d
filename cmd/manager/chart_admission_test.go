package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/provider/presets"
)

// The chart's admission policies: what config/admission/ holds for the
// default values, each value reaching its object, and the policies' field
// lists covering the CRD.

func isAdmission(o object) bool {
	switch o["kind"] {
	case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		return true
	case "ConfigMap":
		return dig(o, "metadata", "name") == "clawfarm-admission"
	}
	return false
}

// withoutLabels drops metadata.labels: the chart's carry Helm's release
// labels, config/'s do not.
func withoutLabels(o object) object {
	c := object{}
	for k, v := range o {
		c[k] = v
	}
	md := object{}
	for k, v := range o["metadata"].(map[string]any) {
		if k != "labels" {
			md[k] = v
		}
	}
	c["metadata"] = md
	return c
}

func objectKey(o object) string {
	return o["kind"].(string) + "/" + dig(o, "metadata", "name").(string)
}

func TestChartAdmissionIsConfigAdmission(t *testing.T) {
	t.Parallel()
	chart := map[string]object{}
	for _, o := range renderRelease(t) {
		if isAdmission(o) {
			chart[objectKey(o)] = withoutLabels(o)
		}
	}
	files, err := filepath.Glob("../../config/admission/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("config/admission holds no files (%v)", err)
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
	if len(chart) != 17 {
		t.Errorf("the chart renders %d admission objects, want 17 (the ConfigMap, eight policies and their bindings)", len(chart))
	}
	for k, o := range chart {
		if !reflect.DeepEqual(o, config[k]) {
			t.Errorf("%s differs between the chart and config/admission/ (run hack/render-admission.sh):\nchart:  %v\nconfig: %v", k, o, config[k])
		}
	}
	for k := range config {
		if chart[k] == nil {
			t.Errorf("config/admission/ holds %s, which the chart does not render (run hack/render-admission.sh)", k)
		}
	}
}

func TestChartAdmissionValues(t *testing.T) {
	t.Parallel()
	for _, o := range renderRelease(t, "--set", "admission.enabled=false") {
		if isAdmission(o) {
			t.Errorf("admission.enabled=false renders %s", objectKey(o))
		}
	}

	objs := renderRelease(t,
		"--set", "runs.loopServiceAccount=farm-loop", "--set", "runs.followUpServiceAccount=farm-followup",
		"--set", "admission.rigs.hostPathPrefix=/srv/rigs",
		"--set", "admission.model.baseURLPrefixes={https://llm.example.org/v1,http://proxy.example.org}",
		"--set", "admission.model.inClusterServices=false",
		"--set", "admission.pods.imagePrefixes={registry.example.org/farm/}",
		"--set", "admission.rigs.endpointCIDRs={10.20.0.0/16,fd12::/16}", "--set", "admission.rigs.endpointHosts={*.farm.lan}")
	params := find(objs, "ConfigMap", "clawfarm-system", "clawfarm-admission")
	want := map[string]any{"modelBaseURLPrefixes": "https://llm.example.org/v1\nhttp://proxy.example.org",
		"modelInClusterServices": "false", "podImagePrefixes": "registry.example.org/farm/",
		"rigEndpointCIDRs": "10.20.0.0/16\nfd12::/16", "rigEndpointHosts": "*.farm.lan"}
	if !reflect.DeepEqual(params["data"], want) {
		t.Errorf("the allow-list ConfigMap holds %v, want %v", params["data"], want)
	}
	binding := find(objs, "ValidatingAdmissionPolicyBinding", "", "clawfarm-agentrun-spec")
	if ref := dig(binding, "spec", "paramRef"); !reflect.DeepEqual(ref, map[string]any{"name": "clawfarm-admission", "namespace": "clawfarm-system", "parameterNotFoundAction": "Deny"}) {
		t.Errorf("the AgentRun policy's paramRef is %v, want the release's ConfigMap with parameterNotFoundAction Deny", ref)
	}
	for _, c := range []struct{ policy, want string }{
		{"clawfarm-devicerig-state", `'/srv/rigs/'`},
		{"clawfarm-loop-status", `endsWith(':' + 'farm-loop')`},
		{"clawfarm-followup", `endsWith(':' + 'farm-followup')`},
	} {
		p := find(objs, "ValidatingAdmissionPolicy", "", c.policy)
		if p == nil {
			t.Fatalf("no policy %s", c.policy)
		}
		if text := expressions(p); !strings.Contains(text, c.want) {
			t.Errorf("policy %s does not carry %s:\n%s", c.policy, c.want, text)
		}
	}

	if _, stderr, err := renderChartErr(t, "--set", "admission.rigs.hostPathPrefix=/home/farm/.dev/rigs"); err != nil {
		t.Errorf("a prefix with a hidden directory is refused: %v\n%s", err, stderr)
	}
	for _, bad := range [][]string{
		{"--set", "admission.rigs.hostPathPrefix=/var/lib/./rigs"},
		{"--set", "admission.rigs.hostPathPrefix=/var/lib/../etc"},
		{"--set", "admission.rigs.hostPathPrefix=relative/rigs"},
		{"--set", "admission.model.baseURLPrefixes={ftp://example.org}"},
		{"--set", "admission.pods.imagePrefix=ghcr.io/"},
		{"--set", "admission.rigs.endpointCIDRs={10.20.0.0}"},
		{"--set", "admission.rigs.endpointHosts={http://rig.farm.lan}"},
	} {
		if _, _, err := renderChartErr(t, bad...); err == nil {
			t.Errorf("the chart renders with %v; values.schema.json must refuse it", bad)
		}
	}
}

// expressions is every CEL expression of a policy, one a line.
func expressions(p object) string {
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expression" || k == "messageExpression") {
					b.WriteString(s + "\n")
				} else {
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(p["spec"])
	return b.String()
}

// The default model endpoints are the provider presets' own.
func TestChartAdmissionDefaultsArePresetEndpoints(t *testing.T) {
	t.Parallel()
	var want []string
	for _, name := range presets.Names() {
		p, err := presets.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.BaseURL != "" {
			want = append(want, p.BaseURL)
		}
	}
	params := find(renderRelease(t), "ConfigMap", "clawfarm-system", "clawfarm-admission")
	got := strings.Split(dig(params, "data", "modelBaseURLPrefixes").(string), "\n")
	sort.Strings(want)
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("admission.model.baseURLPrefixes defaults to %q, want the presets' endpoints %q (internal/provider/presets/presets.go)", got, want)
	}
}

// The loop may change status.progress only, the follow-up identity
// spec.cancel only: the policies name every other field, so a field added
// to the CRD must be added to them (charts/clawfarm/templates/_admission.tpl).
func TestChartAdmissionFieldListsCoverTheCRD(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../config/crd/bases/farm.clawfarm.dev_agentruns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := decodeAll(t, b)[0]
	schema := dig(dig(crd, "spec", "versions").([]any)[0], "schema", "openAPIV3Schema", "properties")
	objs := renderRelease(t)
	for _, c := range []struct{ policy, section, except string }{
		{"clawfarm-loop-status", "status", "progress"},
		{"clawfarm-followup", "spec", "cancel"},
	} {
		var want []string
		for f := range dig(schema, c.section, "properties").(map[string]any) {
			if f != c.except {
				want = append(want, f)
			}
		}
		re := regexp.MustCompile(`object\.\?` + c.section + `\.\?(\w+) == oldObject\.\?` + c.section + `\.\?(\w+)`)
		var got []string
		for _, m := range re.FindAllStringSubmatch(expressions(find(objs, "ValidatingAdmissionPolicy", "", c.policy)), -1) {
			if m[1] != m[2] {
				t.Errorf("policy %s compares %s.%s with %s.%s", c.policy, c.section, m[1], c.section, m[2])
			}
			got = append(got, m[1])
		}
		sort.Strings(want)
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("policy %s keeps %s fields %v unchanged, want every field but %s: %v", c.policy, c.section, got, c.except, want)
		}
	}
}

// The ConfigMap policy checks each name by its index, one validation each:
// it must have one for every item the CRD allows, and its guard must refuse
// exactly what lies past them.
func TestChartAdmissionChecksEveryConfigMapTheCRDAllows(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../config/crd/bases/farm.clawfarm.dev_agentruns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := decodeAll(t, b)[0]
	spec := dig(dig(crd, "spec", "versions").([]any)[0], "schema", "openAPIV3Schema", "properties", "spec", "properties")
	policy := find(renderRelease(t), "ValidatingAdmissionPolicy", "", "clawfarm-agentrun-configmaps")
	if policy == nil {
		t.Fatal("no policy clawfarm-agentrun-configmaps")
	}
	exprs := expressions(policy)
	for _, field := range []string{"bootstrap", "skills"} {
		var maxItems int64
		switch n := dig(spec, field, "maxItems").(type) {
		case int64:
			maxItems = n
		case float64:
			maxItems = int64(n)
		default:
			t.Fatalf("spec.%s has no maxItems in the CRD (%T)", field, n)
		}
		for i := int64(0); i < maxItems; i++ {
			want := "authorizer.group('').resource('configmaps').namespace(request.namespace).name(variables." + field + "[" + strconv.FormatInt(i, 10) + "]).check('get')"
			if !strings.Contains(exprs, want) {
				t.Errorf("no check of spec.%s[%d] (want %s)", field, i, want)
			}
		}
		if extra := "variables." + field + "[" + strconv.FormatInt(maxItems, 10) + "]"; strings.Contains(exprs, extra) {
			t.Errorf("a check of %s, past the CRD's maxItems %d", extra, maxItems)
		}
		if guard := "size(variables." + field + ") <= " + strconv.FormatInt(maxItems, 10); !strings.Contains(exprs, guard) {
			t.Errorf("no guard %q refusing more spec.%s than are checked", guard, field)
		}
	}
}
