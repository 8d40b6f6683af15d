package agentrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// The pod carries the budgets and the model's tuning from the spec, and the
// run's input token budget shrinks by what each recorded attempt used. Once
// it is spent no attempt starts: the run fails BudgetExhausted, as a loop
// that spent it would end it, and says so with the figures.
func TestRunInputTokenBudget(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	// Every attempt ends STUCK (retryable) having used 1000 input tokens.
	scripts.set(ns, "budget", byPod(nil, ends(contract.Stuck, true, "lost", 50*time.Millisecond)))
	run := newRun(ns, "budget", "rig")
	run.Spec.Model = farmv1.ModelSpec{Provider: "anthropic", Name: "claude-sonnet-4-5",
		ThinkingBudgetTokens: 2048, Fold: &farmv1.FoldPolicy{AtTurns: 20, KeepTurns: 5}}
	run.Spec.Limits.MaxAttempts = 5
	run.Spec.Limits.MaxErrors = 4
	run.Spec.Limits.MaxInputTokens = 1200
	run.Spec.Limits.MaxRunInputTokens = 1500
	create(t, run)
	got := waitRun(t, ns, "budget", func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })

	succ := condition(got, farmv1.ConditionSucceeded)
	if got.Status.Phase != farmv1.RunFailed || succ.Reason != farmv1.ReasonBudgetExhausted {
		t.Fatalf("phase %s, Succeeded %+v; want Failed BudgetExhausted", got.Status.Phase, succ)
	}
	for _, want := range []string{"maxRunInputTokens 1500", "used 2000 input tokens", "no attempt 3"} {
		if !strings.Contains(succ.Message, want) {
			t.Errorf("message %q does not say %q", succ.Message, want)
		}
	}
	if got.Status.Sentinel != "STUCK" || got.Status.ExitReason != string(contract.ReasonBudgetExhausted) {
		t.Errorf("sentinel %q exit reason %q, want STUCK budget_exhausted", got.Status.Sentinel, got.Status.ExitReason)
	}
	if n := len(got.Status.Attempts); n != 2 {
		t.Fatalf("%d attempts, want 2 (the third would have had nothing left): %+v", n, got.Status.Attempts)
	}
	if _, err := getPod(ns, "budget-a3"); err == nil {
		t.Fatal("pod budget-a3 exists: an attempt started with the budget spent")
	}

	left := map[string]string{"budget-a1": "1500", "budget-a2": "500"}
	for name, want := range left {
		pod, err := getPod(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			contract.SettingRunInputTokensLeft.Env: want,
			contract.SettingMaxInputTokens.Env:     "1200",
			contract.SettingMaxErrors.Env:          "4",
			contract.SettingThinkingBudget.Env:     "2048",
			contract.SettingFold.Env:               "20/5",
		} {
			if got := envOf(pod, k); got != v {
				t.Errorf("pod %s: env %s = %q, want %q", name, k, got, v)
			}
		}
	}
	eventually(t, "a BudgetExhausted Warning event with the figures", func() bool {
		for _, e := range runEventsOf(t, ns, "budget") {
			if e.Reason == farmv1.ReasonBudgetExhausted && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "maxRunInputTokens 1500") {
				return true
			}
		}
		return false
	})
	eventually(t, "lease release", func() bool { return leaseHolder(t, ns, "rig") == "" })
}

// Without a run budget the pod says nothing of one, and maxErrors has its default.
func TestNoRunInputTokenBudget(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "free", byPod(map[string]fakekubelet.Ending{"free-a1": ends(contract.Stuck, true, "lost", 50*time.Millisecond)},
		ends(contract.Done, true, "ok", 50*time.Millisecond)))
	run := newRun(ns, "free", "rig")
	create(t, run)
	waitPhase(t, ns, "free", farmv1.RunSucceeded)
	for _, name := range []string{"free-a1", "free-a2"} {
		pod, err := getPod(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if v := envOf(pod, contract.SettingRunInputTokensLeft.Env); v != "" {
			t.Errorf("pod %s: %s = %q with no run budget", name, contract.SettingRunInputTokensLeft.Env, v)
		}
		if v := envOf(pod, contract.SettingMaxErrors.Env); v != "8" {
			t.Errorf("pod %s: %s = %q, want the default 8", name, contract.SettingMaxErrors.Env, v)
		}
		if v := envOf(pod, contract.SettingFold.Env); v != "" {
			t.Errorf("pod %s: %s = %q with no fold in the spec", name, contract.SettingFold.Env, v)
		}
	}
}

func getPod(ns, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &pod)
	return &pod, err
}

// runEventsOf lists the Events about one run.
func runEventsOf(t *testing.T, ns, run string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "AgentRun" && e.Regarding.Name == run {
			out = append(out, e)
		}
	}
	return out
}
