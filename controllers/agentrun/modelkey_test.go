package agentrun_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// Only a Secret labelled farm.clawfarm.dev/model-key=true may be a run's
// model key: a run naming another Secret of the namespace fails
// InvalidConfig before any pod exists, with the label in the message, and
// gives its rig back; a labelled one starts.
func TestModelKeyMustBeLabelled(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "labelled", byPod(nil, fakekubelet.Ending{Hang: true}))
	for name, labels := range map[string]map[string]string{
		"db-password": nil,
		"model-key":   {admission.LabelModelKey: "true"},
	} {
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			StringData: map[string]string{"key": "s3cret"}})
	}
	failed := testenv.MetricValue(t, metrics.Registry, "clawfarm_agentruns_finished_total", "phase", "Failed", "sentinel", "")
	run := newRun(ns, "exfil", "rig")
	run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}, Key: "key"}
	create(t, run)
	got := waitPhase(t, ns, "exfil", farmv1.RunFailed)
	c := conditions.Get(got.Status.Conditions, farmv1.ConditionSucceeded)
	if c == nil || c.Reason != farmv1.ReasonInvalidConfig || !strings.Contains(c.Message, "farm.clawfarm.dev/model-key=true") {
		t.Fatalf("Succeeded %+v, want InvalidConfig naming the label", c)
	}
	// The end is counted, though no attempt ever ended: the status write that
	// says Failed counts it, once the API server has answered it, which can
	// be after this test sees the phase.
	eventually(t, "clawfarm_agentruns_finished_total{Failed} up by at least 1", func() bool {
		return testenv.MetricValue(t, metrics.Registry, "clawfarm_agentruns_finished_total", "phase", "Failed", "sentinel", "") >= failed+1
	})
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("%d pods (%v), want none", len(pods.Items), err)
	}

	run = newRun(ns, "labelled", "rig")
	run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "key"}
	create(t, run)
	waitPhase(t, ns, "labelled", farmv1.RunRunning)
}
