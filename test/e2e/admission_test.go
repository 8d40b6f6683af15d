//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// The chart's admission policies are in force on the dev cluster: a run
// that would send its key to a foreign URL, a run with an image from an
// unlisted registry, a rig that would mount a node's root are refused at
// the API with a message that says what to change; the suite's own runs
// (modelsim, the dev registry, .dev/rigs) all pass them.
func TestAdmissionPolicies(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	exfil := newRun("e2e-exfil", rigDone, "timer", "Set a 5 minute timer.")
	exfil.Spec.Model.BaseURL = "https://exfil.example.org/v1"
	foreign := newRun("e2e-foreign-registry", rigDone, "timer", "Set a 5 minute timer.")
	foreign.Spec.Pod = &farmv1.PodOverrides{Image: "evil.example.org/loop:v0"}
	root := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: devcluster.RunNamespace, Name: "e2e-root"},
		Spec: farmv1.DeviceRigSpec{NodeName: "rig-0", Endpoint: farmv1.RigEndpoint{URL: "http://127.0.0.1:1/mcp"},
			StateVolume: farmv1.StateVolume{HostPath: "/"}}}
	for _, c := range []struct {
		what string
		obj  interface {
			GetName() string
		}
		want string
	}{
		{"a foreign model URL", exfil, "is not an allowed model endpoint"},
		{"an image from an unlisted registry", foreign, "is not from an allowed registry"},
		{"a rig on a node's root", root, "hostPath"},
	} {
		var err error
		switch o := c.obj.(type) {
		case *farmv1.AgentRun:
			err = cluster.Client.Create(ctx, o)
		case *farmv1.DeviceRig:
			err = cluster.Client.Create(ctx, o)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (%s): %v, want refused with %q", c.what, c.obj.GetName(), err, c.want)
			continue
		}
		t.Logf("%s refused: %v", c.what, err)
	}
	var key corev1.Secret
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: devcluster.RunNamespace, Name: devcluster.ModelSecret}, &key); err != nil || key.Labels["farm.clawfarm.dev/model-key"] != "true" {
		t.Errorf("the dev model key %v is not labelled as one (%v)", key.Labels, err)
	}
}
