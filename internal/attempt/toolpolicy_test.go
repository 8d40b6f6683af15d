package attempt

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// The set a run gets: the policies of its namespace whose selector matches
// it, by name; a Service reference becomes its HTTPS URL.
func TestToolPolicySetSelectsAndConverts(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "r", Labels: map[string]string{"team": "shop"}}}
	pol := func(ns, name string, sel map[string]string) farmv1.ToolPolicy {
		p := farmv1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if sel != nil {
			p.Spec.RunSelector = &metav1.LabelSelector{MatchLabels: sel}
		}
		return p
	}
	hooked := pol("farm", "a-hooked", nil)
	hooked.Spec.Webhooks = []farmv1.ToolWebhook{{Name: "audit", ClientConfig: farmv1.ToolWebhookClientConfig{
		Service: &farmv1.ToolWebhookService{Namespace: "audit", Name: "reviewer", Path: "/review"}}, FailurePolicy: farmv1.WebhookIgnore,
		Events: []farmv1.ToolHookEvent{farmv1.HookBeforeToolCall, farmv1.HookSessionEnd}, TimeoutSeconds: 3}}
	set, err := ToolPolicySet(run, []farmv1.ToolPolicy{
		pol("farm", "c-shop", map[string]string{"team": "shop"}), pol("farm", "b-ads", map[string]string{"team": "ads"}),
		hooked, pol("elsewhere", "a-other-namespace", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(set)
	if len(set.Policies) != 2 || set.Policies[0].Name != "a-hooked" || set.Policies[1].Name != "c-shop" {
		t.Fatalf("set %s", b)
	}
	w := set.Policies[0].Webhooks[0]
	if w.URL != "https://reviewer.audit.svc:443/review" || w.FailurePolicy != "Ignore" || w.TimeoutSeconds != 3 || strings.Join(w.Events, ",") != "BeforeToolCall,SessionEnd" {
		t.Errorf("webhook %+v", w)
	}
	if set.Policies[0].ApprovalTimeoutSeconds != int(farmv1.DefaultApprovalTimeoutSeconds) {
		t.Errorf("approval timeout %d", set.Policies[0].ApprovalTimeoutSeconds)
	}
}

// The sample users copy compiles, and does what its comments say.
func TestToolPolicySample(t *testing.T) {
	b, err := os.ReadFile("../../config/samples/farm_v1alpha1_toolpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var p farmv1.ToolPolicy
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "shop"}}}
	set, err := ToolPolicySet(run, []farmv1.ToolPolicy{p})
	if err != nil || len(set.Policies) != 1 {
		t.Fatalf("the sample: %v (%d policies)", err, len(set.Policies))
	}
	compiled, err := toolpolicy.Compile(set)
	if err != nil {
		t.Fatal(err)
	}
	screen := listing.Parse(listing.Header + `
0 [text] "Add to cart" [0.100,0.700,0.400,0.760] 0.96
1 [text] "Buy now" [0.500,0.700,0.900,0.760] 0.97`)
	tap := func(x0, x1 float64) toolpolicy.Call {
		args, _ := json.Marshal(map[string]any{"bbox": []float64{x0, 0.71, x1, 0.75}})
		return toolpolicy.Call{Tool: "tap", Args: args, Screen: screen}
	}
	for name, c := range map[string]struct {
		call toolpolicy.Call
		want toolpolicy.Action
	}{
		"add to cart":   {tap(0.15, 0.35), toolpolicy.Allow},
		"buy now":       {tap(0.55, 0.85), toolpolicy.Approve},
		"a card number": {toolpolicy.Call{Tool: "send_to_clipboard", Args: json.RawMessage(`{"text":"4111 1111 1111 1111"}`)}, toolpolicy.Block},
		"a greeting":    {toolpolicy.Call{Tool: "send_to_clipboard", Args: json.RawMessage(`{"text":"hello"}`)}, ""},
	} {
		if d := compiled.Before(t.Context(), 1, c.call); d.Action != c.want {
			t.Errorf("%s: %+v, want %q", name, d, c.want)
		}
	}
}
