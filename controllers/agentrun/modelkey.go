package agentrun

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// keyCheck is what checking a run's model key found.
type keyCheck struct {
	// refused says why the Secret may not be the key ("" when it may).
	refused string
	// missing: the Secret does not exist (yet).
	missing bool
	// account is the run's model account, its cap read from the same
	// metadata (account.go).
	account modelAccount
	// sha256 pins the key the check saw (contract.KeySHA256): the loop
	// refuses to start with another, as the kubelet resolves the Secret
	// only when the container starts.
	sha256 string
}

// checkModelKey reads the Secret the run's spec.model.apiKeySecretRef names
// (around the cache: the manager keeps no Secrets). Only
// a Secret labelled farm.clawfarm.dev/model-key=true can be a model key, or
// a run creator could have the loop send any Secret of the namespace to the
// model's endpoint; and the check is made when the pod is about to be made,
// not when the run was created, so a Secret that appears later, unlabelled,
// is refused like one that was there.
func (r *Reconciler) checkModelKey(ctx context.Context, run *farmv1.AgentRun) (keyCheck, error) {
	ref := run.Spec.Model.APIKeySecretRef
	if ref == nil {
		return keyCheck{}, nil
	}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ref.Name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return keyCheck{missing: true}, nil
	case err != nil:
		return keyCheck{}, fmt.Errorf("read the model key Secret %s: %w", ref.Name, err)
	}
	if err := admission.CheckModelKeySecret(secret); err != nil {
		return keyCheck{refused: "spec.model.apiKeySecretRef: " + err.Error()}, nil
	}
	meta := &metav1.PartialObjectMetadata{ObjectMeta: secret.ObjectMeta}
	check := keyCheck{account: accountFrom(ref.Name, meta)}
	value, ok := secret.Data[ref.Key]
	switch {
	case ok:
		check.sha256 = contract.KeySHA256(string(value))
	case ref.Optional == nil || !*ref.Optional:
		return keyCheck{refused: fmt.Sprintf("spec.model.apiKeySecretRef: Secret %s has no key %q (its keys: %s)", ref.Name, ref.Key, keysOf(secret))}, nil
	}
	return check, nil
}

// modelKeyPoll is how often a run whose model-key Secret does not exist
// looks again: the manager watches no Secrets.
const modelKeyPoll = 2 * time.Second

// awaitModelKey holds the attempt while the run's model-key Secret does not
// exist: no pod is made — the kubelet would take whatever Secret of that
// name appears later, labelled or not — and the ModelKey condition says
// what the run waits for, until Config.ConfigErrorGrace after it began
// waiting; then the run fails InvalidConfig, as for any missing Secret.
func (r *Reconciler) awaitModelKey(ctx context.Context, run *farmv1.AgentRun, w world) (decision, error) {
	st := &run.Status
	gen := run.Generation
	ref := run.Spec.Model.APIKeySecretRef
	grace := r.Config.configErrorGrace()
	since := w.now
	c := conditions.Get(st.Conditions, farmv1.ConditionModelKey)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason == farmv1.ReasonModelKeyMissing {
		since = c.LastTransitionTime.Time
	}
	failAt := since.Add(grace)
	if !w.now.Before(failAt) {
		why := fmt.Sprintf("spec.model.apiKeySecretRef: Secret %s/%s does not exist (waited %s): create it with the label %s=true, or name a Secret that exists",
			run.Namespace, ref.Name, grace, admission.LabelModelKey)
		conditions.False(&st.Conditions, gen, farmv1.ConditionModelKey, farmv1.ReasonModelKeyMissing, why)
		return r.refuse(ctx, run, w, errors.New(why), why)
	}
	msg := fmt.Sprintf("waiting for Secret %s (spec.model.apiKeySecretRef) to exist, labelled %s=true; attempt %d starts once it does, and the run fails InvalidConfig at %s if it does not",
		ref.Name, admission.LabelModelKey, attempt.Next(st).Attempt, failAt.UTC().Format(time.RFC3339))
	conditions.False(&st.Conditions, gen, farmv1.ConditionModelKey, farmv1.ReasonModelKeyMissing, msg)
	// The wait counts on the manager's clock, from the reconcile that began it.
	meta.FindStatusCondition(st.Conditions, farmv1.ConditionModelKey).LastTransitionTime = metav1.NewTime(since)
	st.Phase = farmv1.RunRetrying
	conditions.Unknown(&st.Conditions, gen, farmv1.ConditionSucceeded, farmv1.ReasonModelKeyMissing, msg)
	decided(ctx, run, "waiting for the model key", farmv1.ReasonModelKeyMissing, "secret", ref.Name)
	return wakeAt(earliest(failAt, w.now.Add(modelKeyPoll))), nil
}

// keyFound turns a run's ModelKey condition True once its key Secret was
// found; a run that never waited for it has no such condition.
func keyFound(run *farmv1.AgentRun) {
	c := conditions.Get(run.Status.Conditions, farmv1.ConditionModelKey)
	if c == nil || c.Status == metav1.ConditionTrue || run.Spec.Model.APIKeySecretRef == nil {
		return
	}
	conditions.True(&run.Status.Conditions, run.Generation, farmv1.ConditionModelKey, farmv1.ReasonModelKeyFound,
		fmt.Sprintf("Secret %s exists and is labelled a model key", run.Spec.Model.APIKeySecretRef.Name))
}

// keysOf lists a Secret's keys, sorted, for a message.
func keysOf(s *corev1.Secret) string {
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}
