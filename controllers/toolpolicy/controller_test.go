package toolpolicy_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/toolpolicy"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// env is the suite's API server, with the ToolPolicy controller alone on it.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stop, err := env.RunManager(ctrl.Options{}, func(mgr ctrl.Manager) error {
		return (&toolpolicy.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	env.Stop()
	os.Exit(code)
}

// waitReady waits until the policy's status describes its generation and
// its Ready condition is status, and returns the policy.
func waitReady(t *testing.T, ns, name string, status metav1.ConditionStatus) *farmv1.ToolPolicy {
	t.Helper()
	var p farmv1.ToolPolicy
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p)
		c := conditions.Get(p.Status.Conditions, farmv1.ConditionReady)
		if err == nil && c != nil && c.Status == status && p.Status.ObservedGeneration == p.Generation && c.ObservedGeneration == p.Generation {
			return &p
		}
		if time.Now().After(deadline) {
			t.Fatalf("ToolPolicy %s: no Ready=%s for generation %d: err %v, status %+v", name, status, p.Generation, err, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kstatusOf is what kstatus says of the policy (testenv.Kstatus).
func kstatusOf(t *testing.T, ns, name string) status.Status {
	t.Helper()
	return testenv.Kstatus(t, env.Client, "ToolPolicy", ns, name).Status
}

func rule(name, expr string) farmv1.ToolRule {
	return farmv1.ToolRule{Name: name, Expression: expr, Action: farmv1.ToolBlock, Message: "no"}
}

// A policy that compiles is Ready; one whose rule's CEL or webhook's CA
// bundle does not is not, with the loop's error naming the rule; fixing it
// makes it Ready again, for the new generation.
func TestToolPolicyReadyTellsWhetherItCompiles(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	good := &farmv1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-pay"},
		Spec: farmv1.ToolPolicySpec{Rules: []farmv1.ToolRule{rule("pay", `targets.exists(e, e.label.matches('(?i)pay'))`)}}}
	if err := env.Client.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
	p := waitReady(t, ns, "no-pay", metav1.ConditionTrue)
	if c := conditions.Get(p.Status.Conditions, farmv1.ConditionReady); c.Reason != farmv1.ReasonCompiled || p.Status.Rules != 1 || p.Status.Webhooks != 0 {
		t.Errorf("a policy that compiles: %+v", p.Status)
	}
	if s := kstatusOf(t, ns, "no-pay"); s != status.CurrentStatus {
		t.Errorf("a policy that compiles: kstatus %s, want Current", s)
	}

	bad := &farmv1.ToolPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typo"},
		Spec: farmv1.ToolPolicySpec{
			Rules: []farmv1.ToolRule{rule("fine", `tool == "tap"`), rule("broken", `targets.exists(e, e.lable ==`)},
			Webhooks: []farmv1.ToolWebhook{{Name: "audit", ClientConfig: farmv1.ToolWebhookClientConfig{
				URL: "https://audit.example/hook", CABundle: []byte("not a PEM bundle")}}},
		}}
	if err := env.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	p = waitReady(t, ns, "typo", metav1.ConditionFalse)
	c := conditions.Get(p.Status.Conditions, farmv1.ConditionReady)
	if c.Reason != farmv1.ReasonInvalidPolicy || !strings.Contains(c.Message, "broken") || strings.Contains(c.Message, `"fine"`) ||
		!strings.Contains(c.Message, "audit") || p.Status.Rules != 2 || p.Status.Webhooks != 1 {
		t.Errorf("a policy with a broken rule and webhook: %+v (%s)", p.Status, c.Message)
	}
	if s := kstatusOf(t, ns, "typo"); s != status.FailedStatus {
		t.Errorf("a policy that does not compile: kstatus %s, want Failed", s)
	}

	p.Spec.Rules[1].Expression = `targets.exists(e, e.label == 'Buy')`
	p.Spec.Webhooks = nil
	if err := env.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	p = waitReady(t, ns, "typo", metav1.ConditionTrue)
	if p.Generation < 2 || p.Status.Webhooks != 0 {
		t.Errorf("the fixed policy: generation %d, %+v", p.Generation, p.Status)
	}
	if s := kstatusOf(t, ns, "typo"); s != status.CurrentStatus {
		t.Errorf("the fixed policy: kstatus %s, want Current", s)
	}
}
