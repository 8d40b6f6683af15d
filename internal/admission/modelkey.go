// Package admission holds the farm's admission rules that a
// ValidatingAdmissionPolicy cannot express because they need another object
// than the one admitted. The controller applies them when it acts; the
// policies themselves live in charts/clawfarm/templates/admission.yaml and
// config/admission/ (docs/security.md).
package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// LabelModelKey marks a Secret as a model API key that runs may reference
// in spec.model.apiKeySecretRef. A run creator who may create runs but not
// read Secrets could otherwise have the loop read any Secret of the
// namespace and send it, as an API key, to the model endpoint.
const LabelModelKey = "farm.clawfarm.dev/model-key"

// LabelCustomPods on a namespace lets its runs set spec.pod.image (from an
// allowed registry) and spec.pod.serviceAccountName; the admission policy
// refuses both elsewhere. A cluster administrator sets it.
const LabelCustomPods = "farm.clawfarm.dev/custom-pods"

// CheckModelKeySecret reports whether a run may use secret as its model API
// key: only a Secret labelled farm.clawfarm.dev/model-key: "true" may be.
// The error says what to change; the run fails InvalidConfig with it.
func CheckModelKeySecret(secret *corev1.Secret) error {
	if secret == nil {
		return fmt.Errorf("spec.model.apiKeySecretRef names no Secret")
	}
	if v := secret.Labels[LabelModelKey]; v != "true" {
		return fmt.Errorf("secret %s/%s is not a model key: label it %s=true (kubectl label secret -n %s %s %s=true) or reference a Secret that is",
			secret.Namespace, secret.Name, LabelModelKey, secret.Namespace, secret.Name, LabelModelKey)
	}
	return nil
}
