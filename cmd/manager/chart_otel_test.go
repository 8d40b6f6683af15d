package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
)

// The chart's otel values reach loop pods as the OpenTelemetry SDK's
// variables, through the manager's --loop-otel-* flags; by default loop
// pods get none.
func TestChartOTelReachesLoopPods(t *testing.T) {
	t.Parallel()
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "run", UID: "u"},
		Spec: farmv1.AgentRunSpec{Trigger: "go", Model: farmv1.ModelSpec{Name: "m"}}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-0"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node-a", Endpoint: farmv1.RigEndpoint{URL: "http://rig/mcp"}}}
	loopEnv := func(args ...string) []corev1.EnvVar {
		loop, _ := chartManagerFlags(t, managerDeployment(t, renderChart(t, args...))).podDefaults()
		return attempt.BuildPod(attempt.Spec{Run: run, Rig: rig, Attempt: 1, Defaults: loop}).Spec.Containers[0].Env
	}
	for _, e := range loopEnv() {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("by default the loop pod sets %s", e.Name)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range loopEnv("--set", "otel.endpoint=http://otel-collector.observability.svc:4318",
		"--set", "otel.headersSecret=otlp-auth",
		"--set", "otel.resourceAttributes.deployment\\.environment\\.name=lab",
		"--set", "otel.resourceAttributes.team=phones one") {
		env[e.Name] = e
	}
	if v := env["OTEL_EXPORTER_OTLP_ENDPOINT"].Value; v != "http://otel-collector.observability.svc:4318" {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT %q", v)
	}
	if v := env["OTEL_RESOURCE_ATTRIBUTES"].Value; v != "deployment.environment.name=lab,team=phones+one,clawfarm.rig.name=rig-0,k8s.node.name=node-a" {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES %q", v)
	}
	if h := env["OTEL_EXPORTER_OTLP_HEADERS"].ValueFrom; h == nil || h.SecretKeyRef == nil || h.SecretKeyRef.Name != "otlp-auth" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS from %+v, want the Secret otlp-auth", h)
	}

	for _, bad := range [][]string{
		{"--set", "otel.endpoint=otel-collector:4318"},
		{"--set", "otel.headersSecret=Not_A_Name"},
		{"--set", "otel.insecure=true"},
	} {
		if _, stderr, err := renderChartErr(t, bad...); err == nil || !strings.Contains(stderr, "otel") {
			t.Errorf("%v: rendered (%v), want the schema to refuse it naming otel: %s", bad, err, stderr)
		}
	}
}
