// Package riggate is the gateway in front of a rig host's phones: the rig's
// MCP server listens on the host's loopback only, and the gateway admits a
// call only from the attempt pod of the run that holds the rig's Lease now
// (docs/security.md, "Limits of these controls"). Everyone else gets
// 403; a session whose Lease moves (the run cancelled, the rig handed on) is
// cut at once, its streams closed.
//
// Who is calling comes from the API server: the loop presents a service
// account token projected for its pod with the rig audience
// (contract.DefaultRigAudience); a TokenReview names the pod it is bound
// to, and the pod's labels and owner name the run and the rig. Who may call
// comes from the rig's Lease, read on every request from a watch-fed cache.
package riggate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// Caller is the attempt a token is bound to.
type Caller struct {
	Namespace string
	Pod       string
	Run       string
	RunUID    types.UID
	Rig       string
	// Policies are the ToolPolicies the manager gave the pod (its
	// CLAWFARM_TOOL_POLICIES), JSON; empty: none.
	Policies string
}

// ErrUnauthenticated is a token the API server does not accept (401);
// ErrForbidden a caller it accepts that is not a rig's session (403).
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

// Authority says who a token belongs to.
type Authority interface {
	Caller(ctx context.Context, token string) (*Caller, error)
}

// Gateway serves /rigs/<namespace>/<rig>/... and forwards what it admits
// to the rig's MCP server.
type Gateway struct {
	// Upstream is the rig's own server (on the host's loopback), or false
	// when this gateway does not front that rig.
	Upstream func(namespace, rig string) (*url.URL, bool)
	Auth     Authority
	// Leases reads the rigs' Leases (a watch-fed cache in production).
	Leases client.Reader
	// Public are the paths (after /rigs/<namespace>/<rig>) a GET or HEAD
	// reaches without a token: the health route the manager probes, which
	// says whether the rig is ready and shows nothing of the phone.
	Public []string
	// Runs reads AgentRuns (a watch-fed cache in production): a call that
	// the run's ToolPolicies hold for approval needs the run's answer.
	Runs client.Reader
	Logf func(format string, args ...any)
	// WatchInterval is how often a watched rig's own watch route is polled
	// while the rig is free (wake.go); zero: the gateway keeps no record of
	// wakes and its watch route is not served.
	WatchInterval time.Duration

	guard guard
	wakes wakeBook

	mu       sync.Mutex
	sessions map[string]map[*session]struct{} // namespace/rig → requests in flight
}

// session is one admitted request in flight: a call, or an open stream.
type session struct {
	runUID types.UID
	pod    string
	cancel context.CancelFunc
}

func rigKey(ns, rig string) string { return ns + "/" + rig }

// ServeHTTP admits or refuses one request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns, rig, rest, ok := splitPath(r.URL.Path)
	if !ok {
		http.Error(w, "not found: the gateway serves /rigs/<namespace>/<rig>/…", http.StatusNotFound)
		return
	}
	up, ok := g.Upstream(ns, rig)
	if !ok {
		http.Error(w, fmt.Sprintf("rig %s/%s is not behind this gateway", ns, rig), http.StatusNotFound)
		return
	}
	if r.Method == http.MethodGet && rest == contract.RigWatchPath && g.WatchInterval > 0 {
		g.serveWake(w, ns, rig, up)
		return
	}
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && slices.Contains(g.Public, rest) {
		g.forward(w, r, ns, rig, up, rest)
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		g.refuse(w, fmt.Errorf("%w: no bearer token: a loop pod sends its token projected for the rig audience", ErrUnauthenticated))
		return
	}
	c, err := g.Auth.Caller(r.Context(), strings.TrimSpace(tok))
	if err != nil {
		g.refuse(w, err)
		return
	}
	if c.Namespace != ns || c.Rig != rig {
		g.refuse(w, fmt.Errorf("%w: pod %s/%s drives rig %s/%s, not %s/%s", ErrForbidden, c.Namespace, c.Pod, c.Namespace, c.Rig, ns, rig))
		return
	}
	if err := g.holds(r.Context(), c); err != nil {
		g.refuse(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s := &session{runUID: c.RunUID, pod: c.Pod, cancel: cancel}
	g.track(ns, rig, s)
	defer g.untrack(ns, rig, s)
	// The Lease may have moved between the check and the tracking: check
	// again now that a move would cut this request.
	if err := g.holds(ctx, c); err != nil {
		g.refuse(w, err)
		return
	}
	call, err := readCall(r)
	switch {
	case errors.Is(err, errTooLarge):
		http.Error(w, "the request is over the gateway's 4 MiB", http.StatusRequestEntityTooLarge)
		return
	case errors.Is(err, ErrForbidden):
		g.refuse(w, err)
		return
	case errors.Is(err, errMalformed):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if call == nil || c.Policies == "" {
		g.forward(w, r.WithContext(ctx), ns, rig, up, rest)
		return
	}
	t, err := g.check(ctx, c, call)
	if err != nil {
		g.refuse(w, err)
		return
	}
	cw := &capture{ResponseWriter: w}
	g.forward(cw, r.WithContext(ctx), ns, rig, up, rest)
	g.guard.replied(c, cw.Header().Get("Content-Type"), cw.buf.Bytes(), !cw.overflow && ctx.Err() == nil, t)
}

// forward proxies r to the rig's own server, without the caller's
// credential. A request whose context ends (the Lease moved) is cut
// without a word.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, ns, rig string, up *url.URL, rest string) {
	ctx := r.Context()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.URL.Path = strings.TrimSuffix(up.Path, "/") + rest
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del("Authorization") // the rig needs no credential of the cluster's
			// PhysiClaw answers 421 to a Host that is not a loopback name
			// with a port, and 403 to a foreign Origin (docs/rig-contract.md,
			// "Topology"): the rig hears a loopback Host and no Origin,
			// whoever called the gateway.
			pr.Out.Host = loopbackHost(up)
			pr.Out.Header.Del("Origin")
		},
		FlushInterval: -1, // server-sent events go out as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if ctx.Err() != nil {
				return // cut: the Lease moved
			}
			g.logf("rig %s/%s: %v", ns, rig, err)
			http.Error(w, "the rig's server did not answer: "+err.Error(), http.StatusBadGateway)
		},
	}
	proxy.ServeHTTP(w, r)
}

// holds checks that the caller's run holds the rig's Lease now.
func (g *Gateway) holds(ctx context.Context, c *Caller) error {
	var l coordinationv1.Lease
	err := g.Leases.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Rig}, &l)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: rig %s/%s is held by no run; run %s may not drive it", ErrForbidden, c.Namespace, c.Rig, c.Run)
	case err != nil:
		return fmt.Errorf("the Lease of rig %s/%s: %w", c.Namespace, c.Rig, err)
	}
	if holder := holderOf(&l); holder != string(c.RunUID) || l.DeletionTimestamp != nil {
		return fmt.Errorf("%w: rig %s/%s is held by %s, not by run %s", ErrForbidden, c.Namespace, c.Rig, heldBy(&l), c.Run)
	}
	return nil
}

// LeaseChanged cuts every request in flight on the rig whose run no longer
// holds its Lease (l nil: the Lease is gone). The binary calls it from the
// Leases' watch.
func (g *Gateway) LeaseChanged(namespace, rig string, l *coordinationv1.Lease) {
	holder := ""
	if l != nil && l.DeletionTimestamp == nil {
		holder = holderOf(l)
	}
	if holder != "" {
		g.takeWake(namespace, rig)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := range g.sessions[rigKey(namespace, rig)] {
		if string(s.runUID) != holder {
			s.cancel()
		}
	}
}

// PodGone cuts every request in flight from the pod, which is being
// deleted or is gone: a pod on its way out drives no phone, although its
// run still holds the Lease until the pod has ended. The binary calls it
// from the pods' watch.
func (g *Gateway) PodGone(namespace, pod string) {
	g.guard.forgetPod(namespace, pod)
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, sessions := range g.sessions {
		if ns, _, _ := strings.Cut(key, "/"); ns != namespace {
			continue
		}
		for s := range sessions {
			if s.pod == pod {
				s.cancel()
			}
		}
	}
}

// InFlight is how many admitted requests are in flight on the rig.
func (g *Gateway) InFlight(namespace, rig string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions[rigKey(namespace, rig)])
}

func (g *Gateway) track(ns, rig string, s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sessions == nil {
		g.sessions = map[string]map[*session]struct{}{}
	}
	k := rigKey(ns, rig)
	if g.sessions[k] == nil {
		g.sessions[k] = map[*session]struct{}{}
	}
	g.sessions[k][s] = struct{}{}
}

func (g *Gateway) untrack(ns, rig string, s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := rigKey(ns, rig)
	delete(g.sessions[k], s)
	if len(g.sessions[k]) == 0 {
		delete(g.sessions, k)
	}
}

func (g *Gateway) refuse(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="clawfarm rig"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
	case errors.Is(err, ErrForbidden):
		http.Error(w, err.Error(), http.StatusForbidden)
	default:
		g.logf("%v", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (g *Gateway) logf(format string, args ...any) {
	if g.Logf != nil {
		g.Logf(format, args...)
	}
}

// splitPath reads /rigs/<namespace>/<rig><rest>.
func splitPath(p string) (ns, rig, rest string, ok bool) {
	tail, ok := strings.CutPrefix(p, "/rigs/")
	if !ok {
		return "", "", "", false
	}
	parts := strings.SplitN(tail, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", "", false
	}
	rest = "/"
	if len(parts) == 3 {
		rest += parts[2]
	}
	return parts[0], parts[1], rest, true
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// heldBy names the run holding a Lease, as its labels say.
func heldBy(l *coordinationv1.Lease) string {
	if run := l.Labels[farmv1.LabelRun]; run != "" {
		return "run " + run
	}
	return "holder " + holderOf(l)
}

// loopbackHost is the Host the rig's server hears: its URL's own host when
// that is a loopback name, else 127.0.0.1 at its port; always with the port,
// which PhysiClaw's MCP transport requires.
func loopbackHost(up *url.URL) string {
	port := up.Port()
	if port == "" {
		port = "80"
		if up.Scheme == "https" {
			port = "443"
		}
	}
	host := up.Hostname()
	if ip, err := netip.ParseAddr(host); !(host == "localhost" || err == nil && ip.IsLoopback()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
