package toolpolicy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// DefaultWebhookTimeoutSeconds bounds one webhook call when the policy says nothing.
const DefaultWebhookTimeoutSeconds = 10

// maxWebhookResponse bounds what is read of a webhook's answer.
const maxWebhookResponse = 64 << 10

// ReviewAPIVersion and ReviewKind name the webhook's request and answer.
const (
	ReviewAPIVersion = "farm.clawfarm.dev/v1alpha1"
	ReviewKind       = "ToolCallReview"
)

// Review is what a webhook receives (Request) and answers (Response), in the
// shape of Kubernetes' AdmissionReview.
type Review struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Request    *ReviewRequest  `json:"request,omitempty"`
	Response   *ReviewResponse `json:"response,omitempty"`
}

// ReviewRequest describes the event.
type ReviewRequest struct {
	UID     string `json:"uid"`
	Event   string `json:"event"`
	Policy  string `json:"policy"`
	Webhook string `json:"webhook"`
	Run     string `json:"run"` // namespace/name
	Attempt int    `json:"attempt"`
	Turn    int    `json:"turn,omitempty"`
	// Tool and Args: the call (BeforeToolCall, AfterToolCall).
	Tool string          `json:"tool,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
	// Screen is the latest listing before the call.
	Screen []listing.Element `json:"screen,omitempty"`
	// Result is the call's result text (AfterToolCall).
	Result        string `json:"result,omitempty"`
	ResultIsError bool   `json:"resultIsError,omitempty"`
	// Sentinel and Recap end the session (SessionEnd).
	Sentinel string `json:"sentinel,omitempty"`
	Recap    string `json:"recap,omitempty"`
}

// ReviewResponse is a BeforeToolCall webhook's answer; the other events'
// answers are not read.
type ReviewResponse struct {
	UID     string `json:"uid"`
	Action  Action `json:"action"`
	Message string `json:"message,omitempty"`
}

type webhookClient struct {
	Webhook
	policy string
	client *http.Client
}

func newWebhookClient(policy string, w Webhook) (*webhookClient, error) {
	u, err := url.Parse(w.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("ToolPolicy %s, webhook %s: URL %q is not an https URL", policy, w.Name, w.URL)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(w.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(w.CABundle) {
			return nil, fmt.Errorf("ToolPolicy %s, webhook %s: caBundle holds no PEM certificate", policy, w.Name)
		}
		tlsConfig.RootCAs = pool
	}
	switch w.FailurePolicy {
	case "", FailurePolicyFail, FailurePolicyIgnore:
	default:
		return nil, fmt.Errorf("ToolPolicy %s, webhook %s: failurePolicy %q: want Fail or Ignore", policy, w.Name, w.FailurePolicy)
	}
	timeout := w.TimeoutSeconds
	if timeout <= 0 {
		timeout = DefaultWebhookTimeoutSeconds
	}
	return &webhookClient{Webhook: w, policy: policy, client: &http.Client{
		Timeout:   time.Duration(timeout) * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil},
		// A webhook answers; it does not send the loop elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

func (w *webhookClient) failClosed() bool { return w.FailurePolicy != FailurePolicyIgnore }

// call posts the review and returns the answer; any failure is an error
// that says what went wrong.
func (w *webhookClient) call(ctx context.Context, req ReviewRequest) (*ReviewResponse, error) {
	req.UID = newUID()
	req.Policy, req.Webhook = w.policy, w.Name
	body, err := json.Marshal(Review{APIVersion: ReviewAPIVersion, Kind: ReviewKind, Request: &req})
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(hr)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ue.Timeout() {
			return nil, fmt.Errorf("no answer within %s", w.client.Timeout)
		}
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxWebhookResponse+1))
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if len(raw) > maxWebhookResponse {
		return nil, fmt.Errorf("the answer is over %d bytes", maxWebhookResponse)
	}
	if req.Event != EventBeforeToolCall {
		return nil, nil
	}
	var review Review
	if err := json.Unmarshal(raw, &review); err != nil {
		return nil, fmt.Errorf("the answer is not a ToolCallReview: %w", err)
	}
	r := review.Response
	switch {
	case r == nil:
		return nil, errors.New("the answer has no response")
	case r.UID != req.UID:
		return nil, fmt.Errorf("the answer's uid %q is not the request's %q", r.UID, req.UID)
	case r.Action != Block && r.Action != Approve && r.Action != Allow:
		return nil, fmt.Errorf("the answer's action %q is none of Allow, Block, Approve", r.Action)
	}
	return r, nil
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
