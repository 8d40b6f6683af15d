// Package toolpolicy is the ToolPolicy controller: it compiles each policy
// as the loop would and says in its Ready condition whether it can be
// applied, so a rule that does not compile is seen on the policy, at once,
// and not only when a run it selects fails InvalidConfig.
package toolpolicy

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=toolpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=toolpolicies/status,verbs=get;update;patch

// Reconciler writes each ToolPolicy's status.
type Reconciler struct {
	client.Client
}

// SetupWithManager watches ToolPolicies; only a spec change (a new
// generation) needs a new verdict.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&farmv1.ToolPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("toolpolicy").
		Complete(r)
}

// Reconcile compiles the policy and writes the verdict when it changed.
// Managers of several shards may all do so: the verdict is the same, and
// a write that lost a conflict finds it already there.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p farmv1.ToolPolicy
	if err := r.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if p.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	before := p.Status.DeepCopy()
	st := &p.Status
	st.ObservedGeneration = p.Generation
	st.Rules, st.Webhooks = int32(len(p.Spec.Rules)), int32(len(p.Spec.Webhooks))
	// Stalled mirrors a policy that cannot be applied for kstatus (Flux,
	// Argo CD's health checks), which reads it and not Ready: only a spec
	// change can fix it.
	if err := attempt.CheckToolPolicy(&p); err != nil {
		msg := "the loop cannot apply this policy, and a run it selects fails InvalidConfig: " + err.Error()
		conditions.False(&st.Conditions, p.Generation, farmv1.ConditionReady, farmv1.ReasonInvalidPolicy, msg)
		conditions.True(&st.Conditions, p.Generation, farmv1.ConditionStalled, farmv1.ReasonInvalidPolicy, msg)
	} else {
		msg := fmt.Sprintf("%d rules and %d webhooks compile", st.Rules, st.Webhooks)
		conditions.True(&st.Conditions, p.Generation, farmv1.ConditionReady, farmv1.ReasonCompiled, msg)
		conditions.Remove(&st.Conditions, farmv1.ConditionStalled) // abnormal-true: present only while True
	}
	if apiequality.Semantic.DeepEqual(before, st) {
		return ctrl.Result{}, nil
	}
	if err := r.Status().Update(ctx, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		// A conflict too: the next reconcile, on the newer copy, decides again.
		return ctrl.Result{}, fmt.Errorf("update status: %w", err)
	}
	return ctrl.Result{}, nil
}
