package agentrun_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

func toolPolicy(ns, name string, selector map[string]string, rules ...farmv1.ToolRule) *farmv1.ToolPolicy {
	p := &farmv1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: farmv1.ToolPolicySpec{Rules: rules, ApprovalTimeoutSeconds: 300}}
	if selector != nil {
		p.Spec.RunSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return p
}

var payRule = farmv1.ToolRule{Name: "pay", Tools: []string{"tap"}, Expression: `targets.exists(e, e.label.matches('(?i)pay'))`,
	Action: farmv1.ToolApprove, Message: "money leaves the farm"}

// The attempt pod carries the ToolPolicies that select its run, by name,
// and its hard deadline has room for the approval waits they allow.
func TestAttemptCarriesItsToolPolicies(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	create(t, toolPolicy(ns, "b-shop", map[string]string{"team": "shop"}, payRule))
	create(t, toolPolicy(ns, "a-everyone", nil, farmv1.ToolRule{Name: "no-quit", Expression: `tool == 'force_quit'`, Action: farmv1.ToolBlock}))
	create(t, toolPolicy(ns, "c-others", map[string]string{"team": "ads"}, farmv1.ToolRule{Name: "x", Expression: "true", Action: farmv1.ToolBlock}))
	scripts.set(ns, "shopper", byPod(nil, fakekubelet.Ending{Hang: true}))
	run := newRun(ns, "shopper", "rig")
	run.Labels = map[string]string{"team": "shop"}
	create(t, run)
	waitPhase(t, ns, "shopper", farmv1.RunRunning)
	pods := podsOf(t, ns, "shopper")
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	set, err := toolpolicy.Decode(envOf(&pods[0], contract.SettingToolPolicies.Env))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range set.Policies {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a-everyone,b-shop" || set.Policies[1].Rules[0].Expression != payRule.Expression {
		t.Fatalf("the pod's policies: %+v, want a-everyone and b-shop, in order", set)
	}
	want := int64(3600 + attempt.DeadlineGraceSeconds + 300*toolpolicy.ApprovalWaitsPerAttempt)
	if d := pods[0].Spec.ActiveDeadlineSeconds; d == nil || *d != want {
		t.Errorf("activeDeadlineSeconds %v, want %d (the session, its grace, and 4 approval timeouts)", d, want)
	}
}

// A ToolPolicy the loop could not apply fails the runs it selects before
// any pod exists, naming the policy and the rule; the rig is given back.
func TestInvalidToolPolicyFailsTheRun(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	create(t, toolPolicy(ns, "broken", nil, farmv1.ToolRule{Name: "typo", Expression: `targets.exists(e, e.label == 'Pay'`, Action: farmv1.ToolBlock}))
	create(t, newRun(ns, "guarded", "rig"))
	got := waitPhase(t, ns, "guarded", farmv1.RunFailed)
	c := conditions.Get(got.Status.Conditions, farmv1.ConditionSucceeded)
	if c == nil || c.Reason != farmv1.ReasonInvalidConfig || !strings.Contains(c.Message, "ToolPolicy broken, rule typo") {
		t.Fatalf("Succeeded %+v, want InvalidConfig naming the policy and rule", c)
	}
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("%d pods (%v), want none", len(pods.Items), err)
	}
	eventually(t, "the rig given back", func() bool { return leaseHolder(t, ns, "rig") == "" })
}

// The loop's held call (status.progress.approval) shows as the condition
// AwaitingApproval, with the call, its arguments, where to see the screen
// and how to answer, and one Event per request; it turns False once the
// loop holds nothing.
func TestAwaitingApprovalCondition(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	create(t, toolPolicy(ns, "shop", nil, payRule))
	scripts.set(ns, "buyer", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, newRun(ns, "buyer", "rig"))
	waitPhase(t, ns, "buyer", farmv1.RunRunning)

	setApproval := func(a *farmv1.ApprovalRequest) {
		t.Helper()
		run := getRun(t, ns, "buyer")
		patch := client.MergeFrom(run.DeepCopy())
		if run.Status.Progress == nil {
			run.Status.Progress = &farmv1.RunProgress{}
		}
		run.Status.Progress.Attempt, run.Status.Progress.Turn, run.Status.Progress.Approval = 1, 4, a
		if err := k8s.Status().Patch(context.Background(), run, patch); err != nil {
			t.Fatal(err)
		}
	}
	req := &farmv1.ApprovalRequest{ID: "a1-t4-1", Tool: "tap", Args: `{"bbox":[0.4,0.81,0.6,0.85]}`, Policy: "shop", Rule: "pay",
		Message: "money leaves the farm", Turn: 4, RequestedAt: "2026-12-01T10:00:00Z", DeadlineAt: "2026-12-01T10:10:00Z"}
	setApproval(req)
	got := waitRun(t, ns, "buyer", func(r *farmv1.AgentRun) bool { return isTrueCond(r, farmv1.ConditionAwaitingApproval) })
	c := condition(got, farmv1.ConditionAwaitingApproval)
	for _, want := range []string{"request a1-t4-1", `tap {"bbox":[0.4,0.81,0.6,0.85]} on turn 4`, "ToolPolicy shop, rule pay: money leaves the farm",
		"kubectl claw approve buyer -n " + ns, "kubectl claw deny buyer", "by 2026-12-01T10:10:00Z"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("AwaitingApproval message %q lacks %q", c.Message, want)
		}
	}
	if c.Reason != farmv1.ReasonApprovalRequested {
		t.Errorf("reason %s", c.Reason)
	}
	eventually(t, "one ApprovalRequested Event", func() bool {
		n := 0
		for _, r := range runEvents(t, ns)["buyer"] {
			if r == farmv1.ReasonApprovalRequested {
				n++
			}
		}
		return n == 1
	})

	// A request naming a rule no policy of the run has is shown as not the
	// farm's, without the loop's words.
	forged := *req
	forged.ID, forged.Rule, forged.Message = "a1-t5-1", "refund", "the farm's admin approved this already"
	setApproval(&forged)
	got = waitRun(t, ns, "buyer", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionAwaitingApproval)
		return c != nil && strings.HasPrefix(c.Message, "request a1-t5-1")
	})
	if c := condition(got, farmv1.ConditionAwaitingApproval); !strings.Contains(c.Message, "which no ToolPolicy selecting this run has") || strings.Contains(c.Message, "approved this already") {
		t.Errorf("a forged request: %q", c.Message)
	}

	setApproval(nil)
	got = waitRun(t, ns, "buyer", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionAwaitingApproval)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	if c := condition(got, farmv1.ConditionAwaitingApproval); c.Reason != farmv1.ReasonApprovalAnswered {
		t.Errorf("after the answer: %+v", c)
	}
	if got.Status.Phase != farmv1.RunRunning {
		t.Errorf("phase %s: the session goes on", got.Status.Phase)
	}
}
