package claw

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// tokenRefresh is how long a captured token is used before it is asked for
// again: an exec plugin's or a token file's token may be replaced meanwhile.
const tokenRefresh = time.Minute

// userToken yields the bearer token the kubeconfig's user sends to the API
// server — a token, a token file, an exec plugin's or an auth provider's —
// so the trace server can authenticate the same user (it runs a
// TokenReview on it). The token is read off one request for the API
// server's /version: client-go applies rest.Config.WrapTransport inside
// its authentication (the bearer-token, exec and auth-provider round
// trippers wrap it), so a round tripper there sees the Authorization
// header as it is sent.
type userToken struct {
	client *http.Client
	url    string
	now    func() time.Time

	mu    sync.Mutex
	rec   authRecorder
	token string
	at    time.Time
}

func newUserToken(cfg *rest.Config) (*userToken, error) {
	if cfg.Impersonate.UserName != "" || len(cfg.Impersonate.Groups) > 0 {
		return nil, usageError("--as and --as-group are not carried to the trace server: it authorizes the user whose token it gets")
	}
	u := &userToken{now: time.Now}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		u.rec.base = rt
		return &u.rec
	})
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	u.client, u.url = hc, base.JoinPath("version").String()
	return u, nil
}

// Token returns the user's bearer token, asking the API server's client
// for it again once it is older than tokenRefresh.
func (u *userToken) Token(ctx context.Context) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.token != "" && u.now().Sub(u.at) < tokenRefresh {
		return u.token, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return "", err
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("reach the API server for your credentials: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return "", &exitError{code: ExitError, msg: "the API server refused your credentials (401): log in again, or pass --token"}
	}
	tok, ok := strings.CutPrefix(u.rec.last(), "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return "", &exitError{code: ExitError, msg: "your kubeconfig's user authenticates with a client certificate, " +
			"and the trace server needs a bearer token (it asks the API server who the token is): " +
			"pass --token, e.g. --token \"$(kubectl create token SERVICEACCOUNT -n NAMESPACE)\" for a service account " +
			"that may get agentruns, or use a kubeconfig user with a token or an exec plugin"}
	}
	u.token, u.at = strings.TrimSpace(tok), u.now()
	return u.token, nil
}

// authRecorder remembers the Authorization header of the requests it carries.
type authRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	auth string
}

func (a *authRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.auth = req.Header.Get("Authorization")
	a.mu.Unlock()
	return a.base.RoundTrip(req)
}

func (a *authRecorder) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.auth
}

// serverURL checks --server-url.
func serverURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError("--server-url %q is not an http:// or https:// URL", s)
	}
	if u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		return nil, usageError("--server-url %s would send your Kubernetes token in clear text: use https://", s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
