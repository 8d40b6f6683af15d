package agentrun

import (
	"context"
	"fmt"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/pricing"
)

// priceAttempt sets the cost of a recorded attempt's usage when the run's
// model has a price: spec.model.pricing, else the manager's price list
// (Config.PricingConfigMap). A price that cannot be read leaves the cost
// empty and says why in a Warning Event and the log; the run goes on.
func (r *Reconciler) priceAttempt(ctx context.Context, run *farmv1.AgentRun, rec *farmv1.AttemptRecord) {
	if rec.Usage == nil {
		return
	}
	price, ok, err := r.price(ctx, run)
	if err != nil {
		log.FromContext(ctx).Error(err, "the attempt's cost is left empty", "pod", rec.Pod, "model", run.Spec.Model.Name)
		r.ev().pricingInvalid(run, rec.Pod, err)
		return
	}
	if ok {
		rec.Usage.Cost = pricing.Format(price.Cost(*rec.Usage))
	}
}

// price is the run's model price; ok is false when nothing prices it.
func (r *Reconciler) price(ctx context.Context, run *farmv1.AgentRun) (p pricing.Price, ok bool, err error) {
	model := run.Spec.Model
	if model.Pricing != nil {
		p, err = pricing.FromSpec(model.Pricing)
		if err != nil {
			return p, false, fmt.Errorf("spec.model.pricing: %w", err)
		}
		return p, true, nil
	}
	key := r.Config.PricingConfigMap
	if key.Name == "" {
		return p, false, nil
	}
	// Read once per recorded attempt, around the cache: the manager watches
	// no ConfigMaps, and may read only this one.
	var cm corev1.ConfigMap
	if err := r.APIReader.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return p, false, fmt.Errorf("the price list ConfigMap %s (--pricing-configmap) does not exist", key)
		}
		return p, false, fmt.Errorf("read the price list ConfigMap %s: %w", key, err)
	}
	data, found := cm.Data[pricing.ListKey]
	if !found {
		return p, false, fmt.Errorf("the price list ConfigMap %s has no key %s", key, pricing.ListKey)
	}
	list, err := pricing.ParseList([]byte(data))
	if err != nil {
		return p, false, fmt.Errorf("ConfigMap %s: %w", key, err)
	}
	p, ok, err = list.Lookup(model.Name)
	if err != nil {
		return p, false, fmt.Errorf("ConfigMap %s: %w", key, err)
	}
	return p, ok, nil
}

// countUsage adds a recorded attempt's tokens and cost to the counters.
func countUsage(run *farmv1.AgentRun, u *farmv1.TokenUsage) {
	if u == nil {
		return
	}
	ns, model := run.Namespace, run.Spec.Model.Name
	for kind, n := range map[string]int64{
		"input": pricing.Uncached(*u), "cached_input": u.CachedTokens, "cache_write": u.CacheWriteTokens, "output": u.CompletionTokens,
	} {
		tokensTotal.WithLabelValues(ns, model, kind).Add(float64(max(n, 0)))
	}
	if cost, ok := new(big.Rat).SetString(u.Cost); ok && u.Cost != "" {
		f, _ := cost.Float64()
		costTotal.WithLabelValues(ns, model).Add(f)
	}
}
