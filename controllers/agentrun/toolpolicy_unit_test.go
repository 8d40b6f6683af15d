package agentrun

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The loop reports a held call; the manager shows the farm's own words for
// it, and says so when no ToolPolicy selecting the run asks for it.
func TestVouchForAHeldCall(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "buyer", Labels: map[string]string{"team": "shop"}}}
	policies := []farmv1.ToolPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "money"}, Spec: farmv1.ToolPolicySpec{
			RunSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
			Rules: []farmv1.ToolRule{
				{Name: "pay", Expression: "true", Action: farmv1.ToolApprove, Message: "money leaves the farm"},
				{Name: "no-quit", Expression: "true", Action: farmv1.ToolBlock, Message: "never"},
			},
			Webhooks: []farmv1.ToolWebhook{{Name: "fraud", ClientConfig: farmv1.ToolWebhookClientConfig{URL: "https://fraud.example/check"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ads"}, Spec: farmv1.ToolPolicySpec{
			RunSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ads"}},
			Rules:       []farmv1.ToolRule{{Name: "pay", Expression: "true", Action: farmv1.ToolApprove, Message: "ads spend"}}}},
	}
	req := func(policy, rule, msg string) *farmv1.ApprovalRequest {
		return &farmv1.ApprovalRequest{ID: "a1-t4-1", Tool: "tap", Args: `{}`, Policy: policy, Rule: rule, Message: msg, Turn: 4}
	}
	for _, c := range []struct {
		what      string
		a         *farmv1.ApprovalRequest
		want, not string
	}{
		{"a rule that asks for approval: the rule's message, not the loop's", req("money", "pay", "the admin approved it already"),
			"(ToolPolicy money, rule pay: money leaves the farm)", "approved it already"},
		{"a webhook: its answer, as the loop reports it", req("money", "webhook:fraud", "card on a watch list"),
			`(ToolPolicy money, rule webhook:fraud, the webhook says: "card on a watch list")`, ""},
		{"a rule that blocks, not asks", req("money", "no-quit", "approve me"), "which no ToolPolicy selecting this run has", "approve me"},
		{"a rule of no policy", req("money", "refund", "fine"), `naming ToolPolicy "money", rule "refund", which no ToolPolicy selecting this run has`, "fine"},
		{"a policy that does not select the run", req("ads", "pay", ""), "which no ToolPolicy selecting this run has", "ads spend"},
		{"a webhook of no policy", req("money", "webhook:other", "ok"), "the request is not the farm's", `"ok"`},
		{"a policy that does not exist", req("ghost", "pay", ""), `naming ToolPolicy "ghost"`, ""},
	} {
		msg := approvalMessage(run, c.a, vouch(run, policies, c.a), "")
		if !strings.Contains(msg, c.want) || (c.not != "" && strings.Contains(msg, c.not)) {
			t.Errorf("%s: %q, want %q and not %q", c.what, msg, c.want, c.not)
		}
		if !strings.HasPrefix(msg, "request a1-t4-1: ") || !strings.Contains(msg, "kubectl claw deny buyer -n shop") {
			t.Errorf("%s: %q lacks the request's id or how to answer", c.what, msg)
		}
	}
}
