// Package rig is the client of a phone rig: an MCP server over streamable
// HTTP (docs/rig-contract.md). It offers the rig's tools to the engine as they
// are, maps their results (text and JPEG screens) to the transcript's shape,
// retries a busy rig briefly, and reconnects a dropped connection with
// backoff until the rig is declared gone.
package rig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/clawfarm/clawfarm/internal/clock"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
)

// ErrUnavailable means the rig stayed unreachable for the whole reconnect
// window: the session ends STUCK with exit reason rig_unavailable.
var ErrUnavailable = errors.New("rig unavailable")

// ErrNotSetUp means the rig answered that its hardware is not set up (arm or
// camera not connected, not calibrated): no call can work until a person
// finishes the set-up, so the session ends with exit reason rig_not_ready,
// which the operator treats as the infrastructure's failure, not the task's.
var ErrNotSetUp = errors.New("the rig's hardware is not set up")

// Defaults of the client (docs/rig-contract.md, "What the loop does when the
// rig errors or disconnects"). They are ours: a rig promises only that it
// answers "busy, retry" while another call runs ("The busy lock"), and a
// session must survive a flaky rig.
const (
	// DefaultBusyRetries is how often a "busy" answer is retried.
	DefaultBusyRetries = 5
	// DefaultBusyDelay is the pause between busy retries.
	DefaultBusyDelay = 500 * time.Millisecond
	// DefaultReconnectWindow is how long a dropped rig may stay gone.
	DefaultReconnectWindow = 60 * time.Second
	// DefaultReconnectBackoff is the first pause between reconnects; it doubles up to 8×.
	DefaultReconnectBackoff = time.Second
	// DefaultCallTimeout bounds one tool call (unlock_phone takes up to 40 s).
	DefaultCallTimeout = 90 * time.Second
)

// Config configures the client.
type Config struct {
	Endpoint   string
	HTTPClient *http.Client
	// Run (namespace/name), Attempt and Pod say who is calling: they go out
	// as contract.HeaderRun, HeaderAttempt and HeaderPod on every request to
	// the rig, so a rig can tell one attempt reconnecting from two attempts
	// on one phone (docs/rig-contract.md, "Who is calling"). Empty ones (and
	// Attempt 0) are not sent.
	Run     string
	Attempt int
	Pod     string
	// TokenFile holds a token projected for the rig audience: its content
	// goes out as a bearer token on every request, for the gateway in front
	// of the rig (internal/riggate), read again each time as the kubelet
	// renews it. Empty, or a file that is not there: no credential.
	TokenFile        string
	BusyRetries      int
	BusyDelay        time.Duration
	ReconnectWindow  time.Duration
	ReconnectBackoff time.Duration
	CallTimeout      time.Duration
	// Sleep waits; tests make it instant. Nil: a real, cancellable sleep.
	Sleep func(context.Context, time.Duration) error
	// Now tells the time; nil: time.Now.
	Now func() time.Time
	// Tracer records each tool call as an MCP client span (the tools/call
	// span of the OpenTelemetry MCP conventions, docs/otel.md), a child of
	// the span the call's context carries; nil: none.
	Tracer trace.Tracer
}

func (c Config) withDefaults() Config {
	if c.BusyRetries == 0 {
		c.BusyRetries = DefaultBusyRetries
	}
	if c.BusyDelay == 0 {
		c.BusyDelay = DefaultBusyDelay
	}
	if c.ReconnectWindow == 0 {
		c.ReconnectWindow = DefaultReconnectWindow
	}
	if c.ReconnectBackoff == 0 {
		c.ReconnectBackoff = DefaultReconnectBackoff
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Sleep == nil {
		c.Sleep = clock.Sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
	c.HTTPClient = identified(c.HTTPClient, c.Run, c.Attempt, c.Pod, c.TokenFile)
	return c
}

// identified is hc (nil: the default client) sending the caller's identity
// headers, and the token in tokenFile, on every request; hc itself when
// there is nothing to send.
func identified(hc *http.Client, run string, attempt int, pod, tokenFile string) *http.Client {
	h := http.Header{}
	if run != "" {
		h.Set(contract.HeaderRun, run)
	}
	if attempt > 0 {
		h.Set(contract.HeaderAttempt, strconv.Itoa(attempt))
	}
	if pod != "" {
		h.Set(contract.HeaderPod, pod)
	}
	if len(h) == 0 && tokenFile == "" {
		return hc
	}
	var out http.Client
	if hc != nil {
		out = *hc
	}
	next := out.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = &identityTransport{next: next, header: h, tokenFile: tokenFile}
	return &out
}

// identityTransport adds fixed headers, and the token file's token, to
// every request it carries.
type identityTransport struct {
	next      http.RoundTripper
	header    http.Header
	tokenFile string
}

// RoundTrip sends a copy of req with the headers set: a RoundTripper must not
// change the request it was given.
func (t *identityTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.header {
		req.Header[k] = v
	}
	if t.tokenFile != "" {
		if b, err := os.ReadFile(t.tokenFile); err == nil {
			if tok := strings.TrimSpace(string(b)); tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		}
	}
	return t.next.RoundTrip(req)
}

// Result is what a rig tool returned, in the transcript's terms.
type Result struct {
	Text    string
	Images  []*provider.Image
	IsError bool
	// Verdict is what the first text block says of the screen after a
	// gesture (wire.None for a look, an error, or a gesture whose frames
	// could not be compared).
	Verdict wire.Verdict
	// first is the first text block, the only one read for busy and not set up.
	first string
}

// Client is a connection to one rig.
type Client struct {
	cfg          Config
	mcp          *mcp.Client
	mu           sync.Mutex
	session      *mcp.ClientSession
	tools        []provider.ToolSpec
	readOnly     map[string]bool
	instructions string
}

// Dial connects to the rig and lists its tools, retrying for the reconnect window.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c := &Client{cfg: cfg.withDefaults(), readOnly: map[string]bool{}}
	c.mcp = mcp.NewClient(&mcp.Implementation{Name: "clawfarm-loop", Version: "v1"}, nil)
	if _, err := c.ensure(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Tools are the rig's tools, with their schemas as tools/list gave them.
func (c *Client) Tools() []provider.ToolSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools
}

// Instructions is the rig's doctrine text (the MCP server's instructions).
func (c *Client) Instructions() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instructions
}

// Close ends the session.
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.session
	c.session = nil
	c.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// ensure returns a live session, connecting with backoff when there is none.
func (c *Client) ensure(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s != nil {
		return s, nil
	}
	deadline := c.cfg.Now().Add(c.cfg.ReconnectWindow)
	wait := c.cfg.ReconnectBackoff
	var last error
	for {
		s, err := c.connect(ctx)
		if err == nil {
			return s, nil
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !c.cfg.Now().Add(wait).Before(deadline) {
			return nil, fmt.Errorf("%w: %s unreachable for %s: %v", ErrUnavailable, c.cfg.Endpoint, c.cfg.ReconnectWindow, last)
		}
		if err := c.cfg.Sleep(ctx, wait); err != nil {
			return nil, err
		}
		if wait < 8*c.cfg.ReconnectBackoff {
			wait *= 2
		}
	}
}

func (c *Client) connect(ctx context.Context) (*mcp.ClientSession, error) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: c.cfg.Endpoint, HTTPClient: c.cfg.HTTPClient, MaxRetries: -1, DisableStandaloneSSE: true}
	s, err := c.mcp.Connect(cctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to rig %s: %w", c.cfg.Endpoint, err)
	}
	var specs []provider.ToolSpec
	ro := map[string]bool{contract.ToolPeek: true}
	for t, err := range s.Tools(cctx, nil) {
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("list the rig's tools: %w", err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		specs = append(specs, provider.ToolSpec{Name: t.Name, Description: t.Description, Schema: schema})
		if t.Annotations != nil && t.Annotations.ReadOnlyHint {
			ro[t.Name] = true
		}
	}
	c.mu.Lock()
	c.session, c.tools, c.readOnly = s, specs, ro
	if ir := s.InitializeResult(); ir != nil {
		c.instructions = ir.Instructions
	}
	c.mu.Unlock()
	return s, nil
}

func (c *Client) drop(s *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	c.mu.Unlock()
	s.Close()
}

// Call runs one rig tool. Tool failures come back as an error Result for the
// model to read; the returned error is only ErrUnavailable, ErrNotSetUp or
// the context's.
func (c *Client) Call(ctx context.Context, name string, args json.RawMessage) (Result, error) {
	attrs := append([]attribute.KeyValue{
		attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("network.transport", "tcp"), attribute.String("network.protocol.name", "http"),
	}, serverAttributes(c.cfg.Endpoint)...)
	ctx, span := c.cfg.Tracer.Start(ctx, "tools/call "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	r, err := c.call(ctx, span, name, args)
	switch {
	case err != nil:
		class := "canceled"
		switch {
		case errors.Is(err, ErrUnavailable):
			class = "rig_unavailable"
		case errors.Is(err, ErrNotSetUp):
			class = "rig_not_ready"
		}
		span.SetAttributes(attribute.String("error.type", class))
		span.SetStatus(codes.Error, err.Error())
	case r.IsError:
		span.SetAttributes(attribute.String("error.type", "tool_error"))
		span.SetStatus(codes.Error, "the tool returned an error")
	}
	return r, err
}

// serverAttributes are server.address and server.port of the rig's endpoint.
func serverAttributes(endpoint string) []attribute.KeyValue {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	port, _ := strconv.Atoi(u.Port())
	if port == 0 && u.Scheme == "https" {
		port = 443
	} else if port == 0 {
		port = 80
	}
	return []attribute.KeyValue{attribute.String("server.address", u.Hostname()), attribute.Int("server.port", port)}
}

// call is Call without its span: busy answers and dropped connections,
// each an event on the span.
func (c *Client) call(ctx context.Context, span trace.Span, name string, args json.RawMessage) (Result, error) {
	for busy := 0; ; busy++ {
		s, err := c.ensure(ctx)
		if err != nil {
			return Result{}, err
		}
		if id := s.ID(); id != "" {
			span.SetAttributes(attribute.String("mcp.session.id", id))
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		res, err := s.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			// A JSON-RPC error from the rig is an answer; the SDK marks a
			// failed exchange (dropped connection, HTTP error) as "rejected by transport".
			var werr *jsonrpc.Error
			if errors.As(err, &werr) && werr.Code != codeRejected {
				if wire.IsNotSetUp(werr.Message) {
					span.AddEvent("rig not set up")
					return Result{}, fmt.Errorf("%w: %s answered %s: %q", ErrNotSetUp, c.cfg.Endpoint, name, clip(werr.Message, 200))
				}
				if wire.IsBusy(werr.Message) && busy < c.cfg.BusyRetries {
					span.AddEvent("rig busy: retrying")
					if err := c.cfg.Sleep(ctx, c.cfg.BusyDelay); err != nil {
						return Result{}, err
					}
					continue
				}
				return Result{IsError: true, Text: fmt.Sprintf("rig error from %s: %s", name, werr.Message)}, nil
			}
			// The connection broke: reconnect, then re-run only a tool that changes nothing.
			span.AddEvent("connection dropped: reconnecting")
			c.drop(s)
			if _, err := c.ensure(ctx); err != nil {
				return Result{}, err
			}
			c.mu.Lock()
			ro := c.readOnly[name]
			c.mu.Unlock()
			if ro && busy < c.cfg.BusyRetries {
				continue
			}
			return Result{IsError: true, Text: fmt.Sprintf("the connection to the rig dropped during %s and came back; "+
				"the action may or may not have happened: look at the screen before you act again", name)}, nil
		}
		r := convert(res)
		if r.IsError && wire.IsNotSetUp(r.first) {
			span.AddEvent("rig not set up")
			return r, fmt.Errorf("%w: %s answered %s: %q", ErrNotSetUp, c.cfg.Endpoint, name, clip(r.first, 200))
		}
		if r.IsError && wire.IsBusy(r.first) && busy < c.cfg.BusyRetries {
			span.AddEvent("rig busy: retrying")
			if err := c.cfg.Sleep(ctx, c.cfg.BusyDelay); err != nil {
				return Result{}, err
			}
			continue
		}
		return r, nil
	}
}

// codeRejected is the MCP SDK's "rejected by transport" code (jsonrpc2.ErrRejected).
const codeRejected = -32005

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func convert(res *mcp.CallToolResult) Result {
	r := Result{IsError: res.IsError}
	var texts []string
	for _, c := range res.Content {
		switch v := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, v.Text)
		case *mcp.ImageContent:
			mime := v.MIMEType
			if mime == "" {
				mime = "image/jpeg"
			}
			r.Images = append(r.Images, provider.NewImage(mime, v.Data))
		}
	}
	if len(texts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			texts = append(texts, string(b))
		}
	}
	r.Text = strings.Join(texts, "\n")
	if len(texts) > 0 {
		r.first = texts[0]
	}
	if !r.IsError {
		r.Verdict = wire.VerdictOf(r.first)
	}
	return r
}
