package agentrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

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

	// A labelled Secret without the key named fails the run at once, saying
	// which keys it has, rather than leaving the pod to the kubelet.
	makeRig(t, ns, "rig-2", nil)
	run = newRun(ns, "wrong-key", "rig-2")
	run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "api-key"}
	create(t, run)
	got = waitPhase(t, ns, "wrong-key", farmv1.RunFailed)
	if c := conditions.Get(got.Status.Conditions, farmv1.ConditionSucceeded); c == nil || c.Reason != farmv1.ReasonInvalidConfig ||
		!strings.Contains(c.Message, `Secret model-key has no key "api-key" (its keys: key)`) {
		t.Fatalf("Succeeded %+v, want InvalidConfig naming the missing key", c)
	}
}

// The key is checked when the pod is about to be made, not when the run was
// created: a run naming a Secret that does not exist yet makes no pod — the
// kubelet would take whatever Secret of that name appears later — and says
// what it waits for; a Secret that then appears without the label is
// refused like one that was there, one that never appears fails the run
// after the config-error grace, and a labelled one starts the attempt.
func TestModelKeyIsCheckedWhenUsed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, name := range []string{"late", "never", "arrives"} {
		makeRig(t, ns, "rig-"+name, nil)
		scripts.set(ns, name, byPod(nil, fakekubelet.Ending{Hang: true}))
		run := newRun(ns, name, "rig-"+name)
		run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-key"}, Key: "key"}
		create(t, run)
	}
	// The suite's config-error grace is two seconds: each key Secret is made
	// the moment its run says it waits for it — the late one without the
	// label, the arriving one with it.
	made := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(made) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("runs late and arrives never said they wait for their key Secrets (made: %v)", made)
		}
		for _, name := range []string{"arrives", "late"} {
			if made[name] {
				continue
			}
			got := getRun(t, ns, name)
			c := conditions.Get(got.Status.Conditions, farmv1.ConditionModelKey)
			if c == nil || c.Reason != farmv1.ReasonModelKeyMissing || c.Status != metav1.ConditionFalse {
				continue
			}
			// Counted before the Secret exists: once it does, the labelled
			// one's pod may come at once.
			if n, _ := podAttempts(t, ns, name); n != 0 {
				t.Errorf("%s: %d pods while its key Secret did not exist, want none", name, n)
			}
			labels := map[string]string{admission.LabelModelKey: "true"}
			if name == "late" {
				labels = nil
			}
			create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-key", Labels: labels},
				StringData: map[string]string{"key": "s3cret"}})
			made[name] = true
			if !strings.Contains(c.Message, "waiting for Secret "+name+"-key") {
				t.Errorf("%s: ModelKey %q, want it to name the Secret it waits for", name, c.Message)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}

	got := waitPhase(t, ns, "late", farmv1.RunFailed)
	if c := conditions.Get(got.Status.Conditions, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonInvalidConfig || !strings.Contains(c.Message, admission.LabelModelKey+"=true") {
		t.Errorf("late: Succeeded %+v, want InvalidConfig naming the label", c)
	}
	got = waitPhase(t, ns, "never", farmv1.RunFailed)
	if c := conditions.Get(got.Status.Conditions, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonInvalidConfig || !strings.Contains(c.Message, "Secret "+ns+"/never-key does not exist") {
		t.Errorf("never: Succeeded %+v, want InvalidConfig saying the Secret does not exist", c)
	}
	got = waitPhase(t, ns, "arrives", farmv1.RunRunning)
	if c := conditions.Get(got.Status.Conditions, farmv1.ConditionModelKey); c == nil || c.Status != metav1.ConditionTrue || c.Reason != farmv1.ReasonModelKeyFound {
		t.Errorf("arrives: ModelKey %+v, want True ModelKeyFound", c)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, "arrives-") {
			t.Errorf("pod %s exists; only run arrives, whose key is labelled, may have one", p.Name)
		}
	}
}

// podAttempts counts the pods of run (by its label).
func podAttempts(t *testing.T, ns, run string) (int, error) {
	t.Helper()
	var pods corev1.PodList
	err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelRun: run})
	return len(pods.Items), err
}
