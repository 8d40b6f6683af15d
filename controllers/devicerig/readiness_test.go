package devicerig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
)

// physiclawStatus is what a PhysiClaw rig's /api/status answered, set up or
// not (docs/rig-contract.md, "Health route"): bridge false, as it is during a
// task and whenever the phone's bridge page is in the background.
const (
	setUp = `{"arm":true,"camera":true,"bridge":false,"steps":{"viewport_shift":"dpr=3, offset=(0, 0)","rotation":"none",` +
		`"mapping_a":"OK","mapping_b":"OK","validated":true,"alignment":"OK","assistive_touch":"(0.930, 0.643)"},` +
		`"calibrated":true,"ready":true,"origin_pinned":true,"layout_learned":false}`
	halfway = `{"arm":true,"camera":true,"bridge":true,"steps":{"viewport_shift":"dpr=3, offset=(0, 0)","mapping_a":"OK"},` +
		`"calibrated":false,"ready":false,"origin_pinned":false,"layout_learned":false}`
	bare = `{"arm":false,"camera":false,"bridge":false,"steps":{},"calibrated":false,"ready":false,"origin_pinned":false,"layout_learned":false}`
)

// probeAnswer probes a rig whose health route answers code and body, and
// returns its status after the phase is derived.
func probeAnswer(t *testing.T, code int, body string) *farmv1.DeviceRig {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return probeRig(t, srv.URL+"/mcp")
}

// probeRig probes a free rig on a Ready node whose MCP URL is endpoint, and
// returns it with its phase derived.
func probeRig(t *testing.T, endpoint string) *farmv1.DeviceRig {
	t.Helper()
	r := &Reconciler{Config: Config{ProbeInterval: time.Minute, ProbeTimeout: 3 * time.Second}}
	r.HTTP = r.probeClient()
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-0"},
		Spec: farmv1.DeviceRigSpec{NodeName: "n1", Endpoint: farmv1.RigEndpoint{URL: endpoint}}}
	conditions.True(&rig.Status.Conditions, 0, farmv1.ConditionNodeReady, farmv1.ReasonNodeReady, "ready")
	if probed, _ := r.probeIfDue(context.Background(), rig, time.Now(), false, false); !probed {
		t.Fatal("no probe")
	}
	rig.Status.Phase = r.phase(rig, "")
	return rig
}

// A rig whose server says ready, with bridge false, is Ready: bridge gates
// nothing, and BridgeConnected says it.
func TestReadyFromTheRigsOwnWord(t *testing.T) {
	rig := probeAnswer(t, http.StatusOK, setUp)
	st := rig.Status
	if st.Phase != farmv1.RigReady {
		t.Fatalf("phase %s (%s), want Ready", st.Phase, readyMessage(rig, ""))
	}
	if c := conditions.Get(st.Conditions, farmv1.ConditionBridgeConnected); c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonBridgeIdle {
		t.Errorf("BridgeConnected %+v, want False BridgeIdle", c)
	}
	h := st.Health
	if want := "viewport_shift,rotation,mapping_a,mapping_b,validated,alignment,assistive_touch"; strings.Join(h.StepsDone, ",") != want || h.AssistiveTouch != "(0.930, 0.643)" {
		t.Errorf("steps %v, AssistiveTouch %q; want %s and the button's place", h.StepsDone, h.AssistiveTouch, want)
	}
}

// A rig that is not set up is NotReady, and says which step a person must
// do next.
func TestNotReadyNamesTheMissingStep(t *testing.T) {
	for _, c := range []struct {
		name, body, reason, want string
	}{
		{"nothing connected", bare, farmv1.ReasonNotCalibrated, "no stylus arm (arm=false)"},
		{"calibration half done", halfway, farmv1.ReasonNotCalibrated, "set-up step mapping_b is not done: map the screen to the camera (camera calibration) on the rig's /setup page (done: viewport_shift, mapping_a)"},
		{"every step done, not declared ready", strings.Replace(setUp, `"ready":true`, `"ready":false`, 1), farmv1.ReasonNotSetUp, "has not declared itself ready (ready=false)"},
		{"the assistive touch step missing", strings.Replace(strings.Replace(setUp, `,"assistive_touch":"(0.930, 0.643)"`, "", 1), `"ready":true`, `"ready":false`, 1),
			farmv1.ReasonNotSetUp, "set-up step assistive_touch is not done"},
		{"origin not pinned", strings.Replace(setUp, `"origin_pinned":true`, `"origin_pinned":false`, 1), farmv1.ReasonNotCalibrated, "work frame is not pinned"},
	} {
		rig := probeAnswer(t, http.StatusOK, c.body)
		if rig.Status.Phase != farmv1.RigNotReady || readyReason(rig) != c.reason || !strings.Contains(readyMessage(rig, ""), c.want) {
			t.Errorf("%s: %s %s %q; want NotReady %s saying %q", c.name, rig.Status.Phase, readyReason(rig), readyMessage(rig, ""), c.reason, c.want)
		}
	}
}

// A rig's own server answers 421 to a Host that is not loopback and 403 to
// a foreign Origin: the probe says what to fix.
func TestProbeSaysToPutTheGatewayInFront(t *testing.T) {
	for _, code := range []int{http.StatusMisdirectedRequest, http.StatusForbidden} {
		rig := probeAnswer(t, code, `{"error":"unrecognized Host"}`)
		c := conditions.Get(rig.Status.Conditions, farmv1.ConditionEndpointReachable)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonRigRefusedHost ||
			!strings.Contains(c.Message, "loopback Host") || !strings.Contains(c.Message, "rig gateway") || rig.Status.Phase != farmv1.RigNotReady {
			t.Errorf("answer %d: EndpointReachable %+v, phase %s; want False RigRefusedHost naming the gateway", code, c, rig.Status.Phase)
		}
	}
}

// While a run holds the rig, the bridge's reading stands as it was before
// the session: the page stops polling whenever a task drives the phone, and
// recording that would write the rig's status twice a session.
func TestBridgeReadingStandsWhileInUse(t *testing.T) {
	body := strings.Replace(setUp, `"bridge":false`, `"bridge":true`, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer srv.Close()
	r := &Reconciler{Config: Config{ProbeInterval: time.Minute, ProbeTimeout: time.Second}}
	r.HTTP = r.probeClient()
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-0"},
		Spec: farmv1.DeviceRigSpec{NodeName: "n1", Endpoint: farmv1.RigEndpoint{URL: srv.URL + "/mcp"}}}
	now := time.Now()
	r.probeIfDue(context.Background(), rig, now, false, false)
	body = setUp // bridge false: a session runs
	r.probeIfDue(context.Background(), rig, now.Add(2*time.Minute), true, false)
	if c := conditions.Get(rig.Status.Conditions, farmv1.ConditionBridgeConnected); c.Status != metav1.ConditionTrue || !rig.Status.Health.Bridge {
		t.Errorf("in use: BridgeConnected %s, health.bridge %v; want the reading before the session (True, true)", c.Status, rig.Status.Health.Bridge)
	}
	r.probeIfDue(context.Background(), rig, now.Add(4*time.Minute), false, false)
	if c := conditions.Get(rig.Status.Conditions, farmv1.ConditionBridgeConnected); c.Status != metav1.ConditionFalse || rig.Status.Health.Bridge {
		t.Errorf("free again: BridgeConnected %s, health.bridge %v; want False, false", c.Status, rig.Status.Health.Bridge)
	}
}
