//go:build physiclaw

package devicerig

import (
	"os"
	"strings"
	"testing"

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
	rig := probeRig(t, base+"/mcp")
	if !conditions.IsTrue(rig.Status.Conditions, farmv1.ConditionEndpointReachable) || rig.Status.Health == nil {
		t.Fatalf("EndpointReachable %+v: the probe did not read the status JSON", conditions.Get(rig.Status.Conditions, farmv1.ConditionEndpointReachable))
	}
	msg := readyMessage(rig, "")
	if rig.Status.Phase != farmv1.RigNotReady || !strings.Contains(msg, "arm=false") {
		t.Errorf("phase %s, %q; want NotReady naming the missing arm", rig.Status.Phase, msg)
	}
	t.Logf("phase %s (%s): %s", rig.Status.Phase, readyReason(rig), msg)
}
