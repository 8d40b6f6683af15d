//go:build physiclaw

package devicerig

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// The probe against a real PhysiClaw control plane with no hardware (make
// check-physiclaw): reachable, NotReady, and the message says what to do.
func TestPhysiClawProbe(t *testing.T) {
	base := os.Getenv("PHYSICLAW_URL")
	if base == "" {
		t.Fatal("PHYSICLAW_URL is not set: the control plane's base URL, e.g. http://127.0.0.1:18848")
	}
	r := &Reconciler{Config: Config{ProbeInterval: time.Minute, ProbeTimeout: 3 * time.Second}}
	r.HTTP = r.probeClient()
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-0"},
		Spec: farmv1.DeviceRigSpec{NodeName: "n1", Endpoint: farmv1.RigEndpoint{URL: base + "/mcp"}}}
	conditions.True(&rig.Status.Conditions, 0, farmv1.ConditionNodeReady, farmv1.ReasonNodeReady, "ready")
	r.probeIfDue(context.Background(), rig, time.Now(), false, false)
	rig.Status.Phase = r.phase(rig, "")
	if !conditions.IsTrue(rig.Status.Conditions, farmv1.ConditionEndpointReachable) || rig.Status.Health == nil {
		t.Fatalf("EndpointReachable %+v: the probe did not read the status JSON", conditions.Get(rig.Status.Conditions, farmv1.ConditionEndpointReachable))
	}
	msg := readyMessage(rig, "")
	if rig.Status.Phase != farmv1.RigNotReady || !strings.Contains(msg, "arm=false") {
		t.Errorf("phase %s, %q; want NotReady naming the missing arm", rig.Status.Phase, msg)
	}
	t.Logf("phase %s (%s): %s", rig.Status.Phase, readyReason(rig), msg)
}
