package rignode_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
)

// An attempt pod exactly as the operator builds it runs on rignode: the
// state volume, the API key from a Secret, the termination message the loop
// writes to CLAWFARM_TERMINATION_LOG (/dev/termination-log), the finalizer.
func TestAttemptPodAsTheOperatorBuildsIt(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "model-key"}, StringData: map[string]string{"key": "sk-attempt"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "rigs", "rig-a")
	run := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "run-1", UID: "0b9e7a3c-0000-4000-8000-000000000001"},
		Spec: farmv1.AgentRunSpec{
			Trigger: "open the app",
			Model: farmv1.ModelSpec{Name: "m", APIKeySecretRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "key"}},
		},
	}
	run.Spec.Limits.AttemptTimeoutSeconds = 600
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Name: "rig-a"},
		Spec: farmv1.DeviceRigSpec{
			NodeName:    nodeName,
			Endpoint:    farmv1.RigEndpoint{URL: "http://127.0.0.1:1/mcp"},
			StateVolume: farmv1.StateVolume{HostPath: state},
		},
	}
	pod := attempt.BuildPod(attempt.Spec{Run: run, Rig: rig, Attempt: 1, Defaults: attempt.Defaults{Image: "example.com/helper:v1"}})
	pod.Spec.NodeName = nodeName // what the scheduler does with the pod's node affinity
	c := &pod.Spec.Containers[0]
	c.Args = []string{"attempt"}
	c.Env = append(c.Env, corev1.EnvVar{Name: "RIGNODE_TEST_HELPER", Value: "1"})
	pod = create(t, pod)

	p := waitPod(t, pod, 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	if term := terminated(t, p); term.ExitCode != 0 || term.Message != `{"sentinel":"DONE"}` {
		t.Fatalf("terminated = %+v, want exit 0 and the loop's message", term)
	}
	b, err := os.ReadFile(filepath.Join(state, "memory.md"))
	if err != nil || string(b) != "key=sk-attempt" {
		t.Fatalf("state volume file = %q, %v; want the key written into the rig's hostPath", b, err)
	}
	if len(p.Finalizers) != 1 || p.Finalizers[0] != farmv1.FinalizerOutcome {
		t.Fatalf("finalizers %v", p.Finalizers)
	}
	removeFinalizer(t, p)
}
