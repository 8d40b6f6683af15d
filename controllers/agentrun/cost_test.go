package agentrun_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/pricing"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// priceList is the suite manager's --pricing-configmap. It names only the
// models of the tests below, so other tests' runs are not priced.
var priceList = types.NamespacedName{Namespace: "clawfarm-pricing", Name: "prices"}

func makePriceList() error {
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: priceList.Namespace}}); err != nil {
		return err
	}
	return k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: priceList.Namespace, Name: priceList.Name},
		Data: map[string]string{pricing.ListKey: `
lab/listed-model: {input: 2, cachedInput: "0.5", output: "8"}
lab/broken-price: {input: "two", output: "8"}
`}})
}

// usedTokens ends a pod with sentinel s and this usage.
func usedTokens(s contract.Sentinel, u contract.Usage) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: s, Retryable: true, Recap: "r", ExitReason: contract.ReasonEndTurn, Turns: 3, Usage: u}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// Each recorded attempt is priced, by the run's own price or the manager's
// list; the run's usage is the sum of its attempts', cost included; the
// token and cost counters move once per attempt. A malformed price in the
// list leaves the cost empty and says why; the run goes on.
func TestAttemptCostAndUsageCounters(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	u := contract.Usage{PromptTokens: 1000, CompletionTokens: 100, CachedTokens: 400, CacheWriteTokens: 100}
	cases := []struct {
		name, model string
		pricing     *farmv1.ModelPricing
		attemptCost string // each attempt's
		runCost     string
	}{
		// (1000−400−100)·3 + 400·0.3 + 100·3.75 + 100·15 = 3495 per million, twice
		{"own", "lab/own-price", &farmv1.ModelPricing{Input: "3", CachedInput: "0.3", CacheWrite: "3.75", Output: "15"}, "0.003495", "0.00699"},
		// (1000−400−100)·2 + 400·0.5 + 100·2 + 100·8 = 2200 per million, twice
		{"listed", "lab/listed-model", nil, "0.0022", "0.0044"},
		{"broken", "lab/broken-price", nil, "", ""},
		{"unpriced", "lab/unlisted", nil, "", ""},
	}
	for _, c := range cases {
		makeRig(t, ns, "rig-"+c.name, nil)
		scripts.set(ns, c.name, byPod(map[string]fakekubelet.Ending{c.name + "-a1": usedTokens(contract.Stuck, u)}, usedTokens(contract.Done, u)))
		run := newRun(ns, c.name, "rig-"+c.name)
		run.Spec.Model.Name = c.model
		run.Spec.Model.Pricing = c.pricing
		create(t, run)
	}
	for _, c := range cases {
		got := waitRun(t, ns, c.name, func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
		if got.Status.Phase != farmv1.RunSucceeded || len(got.Status.Attempts) != 2 {
			t.Fatalf("%s: phase %s, %d attempts; want Succeeded after 2", c.name, got.Status.Phase, len(got.Status.Attempts))
		}
		for _, a := range got.Status.Attempts {
			if a.Usage == nil || a.Usage.CacheWriteTokens != 100 || a.Usage.Cost != c.attemptCost {
				t.Errorf("%s: attempt %s usage %+v, want cache writes 100 and cost %q", c.name, a.Pod, a.Usage, c.attemptCost)
			}
		}
		want := farmv1.TokenUsage{PromptTokens: 2000, CompletionTokens: 200, CachedTokens: 800, CacheWriteTokens: 200, Cost: c.runCost}
		if got.Status.Usage == nil || *got.Status.Usage != want {
			t.Errorf("%s: run usage %+v, want %+v", c.name, got.Status.Usage, want)
		}
	}
	eventually(t, "a PricingInvalid event that says what is wrong", func() bool {
		for _, e := range runEventsOf(t, ns, "broken") {
			if e.Reason == farmv1.EventPricingInvalid && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, `input "two"`) && strings.Contains(e.Note, priceList.String()) {
				return true
			}
		}
		return false
	})
	for _, e := range runEventsOf(t, ns, "unpriced") {
		if e.Reason == farmv1.EventPricingInvalid {
			t.Errorf("a model the list does not name is not an error: %s", e.Note)
		}
	}

	// The counters: exactly the two attempts, even after more reconciles.
	for _, c := range cases {
		touch(t, ns, c.name)
	}
	time.Sleep(300 * time.Millisecond) // the reconciles the touches bring
	for _, c := range cases {
		for kind, want := range map[string]float64{"input": 1000, "cached_input": 800, "cache_write": 200, "output": 200} {
			if got := testenv.MetricValue(t, metrics.Registry, "clawfarm_tokens_total", "namespace", ns, "model", c.model, "kind", kind); got != want {
				t.Errorf("%s: clawfarm_tokens_total{kind=%q} = %v, want %v", c.name, kind, got, want)
			}
		}
		want := map[string]float64{"own": 0.00699, "listed": 0.0044}[c.name]
		if got := testenv.MetricValue(t, metrics.Registry, "clawfarm_cost_usd_total", "namespace", ns, "model", c.model); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: clawfarm_cost_usd_total = %v, want %v", c.name, got, want)
		}
	}
}
