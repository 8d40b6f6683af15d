package agentrun

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
)

// modelKeyRefused says why the run's spec.model.apiKeySecretRef may not be
// used, or "" when it may: only a Secret labelled
// farm.clawfarm.dev/model-key=true can be a model key, or a run creator could
// have the loop send any Secret of the namespace to the model's endpoint.
// Only the Secret's metadata is read, around the cache (the manager keeps no
// Secrets). A Secret that does not exist yet is left to the kubelet, which
// reports it within --pod-startup-timeout as for any missing Secret.
func (r *Reconciler) modelKeyRefused(ctx context.Context, run *farmv1.AgentRun) (string, error) {
	ref := run.Spec.Model.APIKeySecretRef
	if ref == nil {
		return "", nil
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: ref.Name}, meta)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read the model key Secret %s: %w", ref.Name, err)
	}
	secret := &corev1.Secret{ObjectMeta: meta.ObjectMeta}
	if err := admission.CheckModelKeySecret(secret); err != nil {
		return "spec.model.apiKeySecretRef: " + err.Error(), nil
	}
	return "", nil
}
