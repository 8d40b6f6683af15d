package attempt

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// With an OTLP endpoint the loop gets it, the resource naming its rig and
// node after the farm's own attributes, and the headers from an optional
// Secret; without one, no OTEL_ variable at all.
func TestBuildPodOTel(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig-7"},
		Spec: farmv1.DeviceRigSpec{NodeName: "mac-1", Endpoint: farmv1.RigEndpoint{URL: "http://rig:8000/mcp"}}}
	pod := BuildPod(Spec{Run: run, Rig: rig, Attempt: 1, Defaults: Defaults{OTel: OTel{
		Endpoint: "http://collector.observability.svc:4318", HeadersSecret: "otlp-auth", ResourceAttributes: "deployment.environment.name=lab",
	}}})
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
		if e.Name == envOTelHeaders {
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil || ref.Name != "otlp-auth" || ref.Key != OTelHeadersKey || ref.Optional == nil || !*ref.Optional {
				t.Errorf("headers from %+v, want the optional key %s of otlp-auth", e.ValueFrom, OTelHeadersKey)
			}
			env[e.Name] = "from a secret"
		}
	}
	want := map[string]string{
		envOTelEndpoint: "http://collector.observability.svc:4318",
		envOTelResource: "deployment.environment.name=lab,clawfarm.rig.name=rig-7,k8s.node.name=mac-1",
		envOTelHeaders:  "from a secret",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}

	pod = BuildPod(Spec{Run: run, Rig: rig, Attempt: 1})
	for _, e := range pod.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("without an endpoint the pod sets %s", e.Name)
		}
	}
}
