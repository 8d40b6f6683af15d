package devicerig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// lastProbe is when the rig was last probed: by this manager if it has,
// else as the status records it (zero: never).
func (r *Reconciler) lastProbe(key types.NamespacedName, recorded *metav1.Time) time.Time {
	var t time.Time
	if recorded != nil {
		t = recorded.Time
	}
	if v, ok := r.probed.Load(key); ok && v.(time.Time).After(t) {
		t = v.(time.Time)
	}
	return t
}

func (r *Reconciler) recordInterval() time.Duration {
	if r.Config.ProbeRecordInterval > 0 {
		return r.Config.ProbeRecordInterval
	}
	return DefaultProbeRecordInterval
}

// probe asks the rig's health route (the PhysiClaw /api/status JSON).
func (r *Reconciler) probe(ctx context.Context, rig *farmv1.DeviceRig) (*farmv1.RigHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Config.ProbeTimeout)
	defer cancel()
	u := healthURL(rig)
	if err := sameHost(u, rig.Spec.Endpoint.URL); err != nil {
		// The API refuses such a rig; one stored before that rule is not probed.
		return nil, fmt.Errorf("health URL %q: %w", u, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("health URL %q: %w", u, err)
	}
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("probe rig %s: %w", rig.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthBody))
	if err != nil {
		return nil, fmt.Errorf("probe rig %s: read body: %w", rig.Name, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, fmt.Errorf("probe rig %s: GET %s answered %s (to %q); redirects are not followed: set endpoint.healthURL to the route itself",
			rig.Name, u, resp.Status, resp.Header.Get("Location"))
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusMisdirectedRequest, http.StatusForbidden:
		return nil, refusedHost{fmt.Errorf("probe rig %s: GET %s answered %s: the rig's server accepts only a loopback Host "+
			"and no foreign Origin (PhysiClaw answers 421 and 403 so), so the manager cannot reach it directly; put the rig "+
			"gateway (rignode gateway) beside it on the rig host and set spec.endpoint.url to the gateway's /rigs/<namespace>/<name>/mcp "+
			"(docs/rig-contract.md, \"The rig gateway\")", rig.Name, u, resp.Status)}
	default:
		return nil, fmt.Errorf("probe rig %s: GET %s answered %s", rig.Name, u, resp.Status)
	}
	var s contract.RigStatus
	if err := json.Unmarshal(body, &s); err != nil {
		// Nothing of the answer is echoed: the status is world-readable to
		// whoever may read rigs, and the answer may come from anywhere.
		return nil, fmt.Errorf("probe rig %s: GET %s did not answer the PhysiClaw status JSON (%d bytes of %s)",
			rig.Name, u, len(body), orNone(resp.Header.Get("Content-Type")))
	}
	return &farmv1.RigHealth{Arm: s.Arm, Camera: s.Camera, Bridge: s.Bridge, Calibrated: s.Calibrated,
		OriginPinned: s.OriginPinned, Ready: s.Ready, LayoutLearned: s.LayoutLearned,
		StepsDone: s.StepsDone(), AssistiveTouch: clip(s.AssistiveTouchAt(), 64)}, nil
}

// refusedHost is a probe the rig's server refused for its Host or Origin header.
type refusedHost struct{ error }

func (e refusedHost) Unwrap() error { return e.error }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// maxHealthBody is the most of a health answer the manager reads.
const maxHealthBody = 64 << 10

// sameHost refuses a health URL on another host than the rig's endpoint,
// either URL with user information (user:password@, which can make two
// URLs look alike to a reader and carries credentials no rig needs), and a
// host that answers for the cloud rather than for a rig (forbiddenHost):
// the manager fetches the health URL from its own network position. The API
// refuses such a rig; one stored before those rules is not probed.
func sameHost(health, endpoint string) error {
	h, err := url.Parse(health)
	if err != nil {
		return err
	}
	e, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("the endpoint URL: %w", err)
	}
	if h.User != nil || e.User != nil {
		return errors.New("a URL with user information (user:password@): not probed")
	}
	if (h.Scheme != "http" && h.Scheme != "https") || !strings.EqualFold(h.Hostname(), e.Hostname()) {
		return fmt.Errorf("not an http(s) URL on the endpoint's host %q: not probed", e.Hostname())
	}
	if why := forbiddenHost(h.Hostname()); why != "" {
		return fmt.Errorf("%s: not probed", why)
	}
	return nil
}

// metadataNames and metadataAddrs answer for a cloud's instance metadata
// rather than for a rig; link-local addresses (169.254.0.0/16, fe80::/10,
// where most clouds serve it) are refused by forbiddenIP.
var (
	metadataNames = []string{"metadata", "metadata.google.internal", "metadata.goog"}
	metadataAddrs = []netip.Addr{netip.MustParseAddr("100.100.100.200"), netip.MustParseAddr("fd00:ec2::254")}
)

// forbiddenHost says why the manager must not fetch from host, or "".
func forbiddenHost(host string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		return forbiddenIP(ip)
	}
	for _, m := range metadataNames {
		if strings.EqualFold(strings.TrimSuffix(host, "."), m) {
			return fmt.Sprintf("%s answers for the cloud's instance metadata, not for a rig", host)
		}
	}
	return ""
}

// forbiddenIP says why the manager must not connect to ip, or "".
func forbiddenIP(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Sprintf("%s is a link-local address, where clouds serve instance metadata", ip)
	case ip.IsUnspecified():
		return fmt.Sprintf("%s is the unspecified address", ip)
	case slices.Contains(metadataAddrs, ip.WithZone("")):
		return fmt.Sprintf("%s answers for the cloud's instance metadata, not for a rig", ip)
	}
	return ""
}

// refuseForbidden is the probe dialer's check of the address it is about to
// connect to, after name resolution: a rig's name that resolves to a
// link-local or metadata address is refused as its literal address would be.
func refuseForbidden(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil // not an IP socket address: nothing to check
	}
	if why := forbiddenIP(ap.Addr()); why != "" {
		return fmt.Errorf("refused to connect: %s", why)
	}
	return nil
}

// noRedirects makes a client stop at the first answer: a health route that
// redirects could send the manager anywhere.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// healthURL is the rig's health route: spec.endpoint.healthURL, else /api/status on the MCP URL's host.
func healthURL(rig *farmv1.DeviceRig) string {
	if rig.Spec.Endpoint.HealthURL != "" {
		return rig.Spec.Endpoint.HealthURL
	}
	u, err := url.Parse(rig.Spec.Endpoint.URL)
	if err != nil {
		return rig.Spec.Endpoint.URL
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: contract.RigStatusPath}).String()
}

// probeIfDue asks the rig's health route when a probe is due (every
// Config.ProbeInterval) and sets the health, EndpointReachable and
// Calibrated conditions from the answer; now, whatever the interval, when
// asked. It says whether it probed, and when the rig was last probed (now, if
// it did). While a run holds the rig (inUse), the bridge's reading stands as
// it was: the phone's bridge page stops polling whenever a task drives the
// phone, so a false then says nothing, and writing it would cost every
// session two status writes.
func (r *Reconciler) probeIfDue(ctx context.Context, rig *farmv1.DeviceRig, now time.Time, inUse, asked bool) (probed bool, last time.Time) {
	key := client.ObjectKeyFromObject(rig)
	st, gen := &rig.Status, rig.Generation
	last = r.lastProbe(key, st.LastProbeTime)
	if !asked && !last.IsZero() && now.Before(last.Add(r.Config.ProbeInterval)) {
		return false, last
	}
	health, err := r.probe(ctx, rig)
	r.probed.Store(key, now)
	if err != nil {
		probeFailures.WithLabelValues(rig.Namespace, rig.Name).Inc()
		st.Health = nil
		reason := farmv1.ReasonProbeFailed
		if errors.As(err, new(refusedHost)) {
			reason = farmv1.ReasonRigRefusedHost
		}
		conditions.False(&st.Conditions, gen, farmv1.ConditionEndpointReachable, reason, err.Error())
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonUnknown, "the health route did not answer")
		conditions.Unknown(&st.Conditions, gen, farmv1.ConditionBridgeConnected, farmv1.ReasonUnknown, "the health route did not answer")
		log.FromContext(ctx).V(1).Info("probe failed", "rig", rig.Name, "reason", farmv1.ReasonProbeFailed, "error", err.Error())
		return true, now
	}
	if prev := st.Health; inUse && prev != nil {
		health.Bridge = prev.Bridge
	}
	st.Health = health
	conditions.True(&st.Conditions, gen, farmv1.ConditionEndpointReachable, farmv1.ReasonProbeSucceeded, "GET "+healthURL(rig)+" answered")
	switch {
	case !health.Calibrated:
		conditions.False(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonNotCalibrated, "not calibrated: "+notSetUp(health))
	case !health.OriginPinned:
		conditions.False(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonNotCalibrated,
			"the arm's work frame is not pinned to the calibration (origin_pinned=false): restart the rig server with the arm at its park spot (--hot-start), or recalibrate")
	default:
		conditions.True(&st.Conditions, gen, farmv1.ConditionCalibrated, farmv1.ReasonCalibrated, "calibrated, origin pinned")
	}
	switch {
	case inUse && conditions.Get(st.Conditions, farmv1.ConditionBridgeConnected) != nil:
		// the reading before the session stands
	case health.Bridge:
		conditions.True(&st.Conditions, gen, farmv1.ConditionBridgeConnected, farmv1.ReasonBridgePolling, "the phone's bridge page polls the rig")
	default:
		conditions.False(&st.Conditions, gen, farmv1.ConditionBridgeConnected, farmv1.ReasonBridgeIdle,
			"the phone's bridge page is not polling (in the background, or during a task): screenshot and clipboard calls may fail; nothing waits for it")
	}
	return true, now
}

func orNone(contentType string) string {
	if contentType == "" {
		return "no stated content type"
	}
	return contentType
}
