package main

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/clawfarm/clawfarm/internal/pricing"
)

// pricing.prices ships as a ConfigMap the manager reads with the same parser
// it prices attempts with; pricing.configMap names one kept elsewhere. Either
// way the manager's flag names it and a Role lets it get that one only.
func TestChartPricing(t *testing.T) {
	t.Parallel()
	objs := renderChart(t)
	if f := chartManagerFlags(t, managerDeployment(t, objs)); *f.pricingConfigMap != "" {
		t.Errorf("--pricing-configmap=%q with no prices", *f.pricingConfigMap)
	}
	if find(objs, "Role", "farm", "t-clawfarm-manager-pricing") != nil {
		t.Error("a pricing Role with no prices")
	}

	objs = renderChart(t,
		"--set-string", "pricing.prices.anthropic/claude-sonnet-4-5.input=3",
		"--set-string", "pricing.prices.anthropic/claude-sonnet-4-5.cachedInput=0.30",
		"--set", "pricing.prices.anthropic/claude-sonnet-4-5.output=15",
		"--set", "pricing.prices.tiny.input=0.000001", "--set", "pricing.prices.tiny.output=0.000002")
	f := chartManagerFlags(t, managerDeployment(t, objs))
	if got, _ := f.pricingList(); got != (types.NamespacedName{Namespace: "farm", Name: "t-clawfarm-pricing"}) {
		t.Fatalf("--pricing-configmap=%q, want farm/t-clawfarm-pricing", *f.pricingConfigMap)
	}
	cm := find(objs, "ConfigMap", "farm", "t-clawfarm-pricing")
	if cm == nil {
		t.Fatal("no price list ConfigMap")
	}
	list, err := pricing.ParseList([]byte(dig(cm, "data", pricing.ListKey).(string)))
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string][4]string{
		"anthropic/claude-sonnet-4-5": {"3", "3/10", "3", "15"},
		"tiny":                        {"1/1000000", "1/1000000", "1/1000000", "1/500000"},
	} {
		p, ok, err := list.Lookup(model)
		if !ok || err != nil {
			t.Fatalf("%s: %v %v", model, ok, err)
		}
		if got := [4]string{p.Input.RatString(), p.CachedInput.RatString(), p.CacheWrite.RatString(), p.Output.RatString()}; got != want {
			t.Errorf("%s: prices %v, want %v", model, got, want)
		}
	}
	checkPricingRole(t, objs, "farm", "t-clawfarm-pricing")

	objs = renderChart(t, "--set", "pricing.configMap=finance/model-prices")
	if f := chartManagerFlags(t, managerDeployment(t, objs)); *f.pricingConfigMap != "finance/model-prices" {
		t.Errorf("--pricing-configmap=%q", *f.pricingConfigMap)
	}
	if find(objs, "ConfigMap", "finance", "model-prices") != nil {
		t.Error("the chart ships a ConfigMap the operator keeps")
	}
	checkPricingRole(t, objs, "finance", "model-prices")

	for _, set := range []string{"pricing.configMap=prices", "pricing.prices.m.input=-1", "pricing.prices.m.output=1"} {
		if _, _, err := renderChartErr(t, "--set", set); err == nil {
			t.Errorf("--set %s was accepted", set)
		}
	}
}

func checkPricingRole(t *testing.T, objs []object, ns, name string) {
	t.Helper()
	role := find(objs, "Role", ns, "t-clawfarm-manager-pricing")
	binding := find(objs, "RoleBinding", ns, "t-clawfarm-manager-pricing")
	if role == nil || binding == nil {
		t.Fatalf("no pricing Role and RoleBinding in %s", ns)
	}
	want := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{name}, "verbs": []any{"get"}}}
	if !reflect.DeepEqual(role["rules"], want) {
		t.Errorf("pricing Role rules %v, want %v", role["rules"], want)
	}
	subj := dig(binding, "subjects").([]any)[0]
	if dig(subj, "name") != "t-clawfarm-manager" || dig(subj, "namespace") != "farm" {
		t.Errorf("pricing RoleBinding subject %v", subj)
	}
}
