package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsAuth is the metrics endpoint's filter: each caller's bearer token
// is reviewed by the API server (TokenReview, cached a minute) and its
// right to get the path checked (SubjectAccessReview), as
// controller-runtime's filters.WithAuthenticationAndAuthorization does. It
// answers as the API server itself does: any token that does not
// authenticate — missing, malformed, expired or revoked — is 401 (that
// filter answers all but a missing one with 500, which pages whoever
// watches the scrape for a caller's mistake); a subject without the right
// is 403; only a review that could not be made is 500.
func metricsAuth(config *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationv1.NewForConfigAndClient(config, hc)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(config, hc)
	if err != nil {
		return nil, err
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	authorize, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("metrics authorization: %w", err)
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			res, ok, err := authenticator.AuthenticateRequest(req)
			if err != nil || !ok {
				if err != nil {
					log.V(1).Info("metrics request not authenticated", "remote", req.RemoteAddr, "reason", err.Error())
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="clawfarm metrics"`)
				http.Error(w, "Unauthorized: send a bearer token the API server accepts", http.StatusUnauthorized)
				return
			}
			attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
			decision, reason, err := authorize.Authorize(req.Context(), attrs)
			if err != nil {
				log.Error(err, "metrics authorization could not be checked", "user", res.User.GetName())
				http.Error(w, "authorization could not be checked: "+err.Error(), http.StatusInternalServerError)
				return
			}
			if decision != authorizer.DecisionAllow {
				log.V(1).Info("metrics request denied", "user", res.User.GetName(), "reason", reason)
				http.Error(w, fmt.Sprintf("Forbidden: %s may not %s %s", res.User.GetName(), attrs.Verb, attrs.Path), http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}, nil
}
