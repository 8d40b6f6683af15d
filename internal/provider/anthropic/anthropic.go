// Package anthropic is the Anthropic Messages adapter, with streaming and
// extended thinking.
//
// It speaks plain HTTP and server-sent events rather than the official SDK:
// the wire format is small and stable, the engine owns retries, backoff and
// the circuit breaker (the SDK retries on its own and would hide those
// failures from the breaker), and the idle watchdog and Retry-After capture
// come from the transport all adapters share.
package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// APIVersion is the anthropic-version header the adapter speaks.
const APIVersion = "2023-06-01"

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

// Config configures the adapter.
type Config struct {
	provider.Options
	// ThinkingBudget turns extended thinking on with this many tokens; 0 leaves it off.
	ThinkingBudget int
}

// Adapter is the Messages adapter.
type Adapter struct {
	cfg Config
	tr  *provider.Transport
	now func() time.Time
}

// New builds an adapter.
func New(cfg Config) *Adapter {
	cfg.Options = cfg.Options.WithDefaults()
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	return &Adapter{cfg: cfg, tr: provider.NewTransport(cfg.Options), now: time.Now}
}

// Name is the preset name.
func (a *Adapter) Name() string { return "anthropic" }

// Model is the model name.
func (a *Adapter) Model() string { return a.cfg.Model }

func (a *Adapter) endpoint() string {
	b := strings.TrimRight(a.cfg.BaseURL, "/")
	if strings.HasSuffix(b, "/v1") {
		return b + "/messages"
	}
	return b + "/v1/messages"
}

// Wire types of the Messages API.
type (
	block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text,omitempty"`
		Thinking  string          `json:"thinking,omitempty"`
		Signature string          `json:"signature,omitempty"`
		Data      string          `json:"data,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
		ToolUseID string          `json:"tool_use_id,omitempty"`
		Content   []block         `json:"content,omitempty"`
		IsError   bool            `json:"is_error,omitempty"`
		Source    *imageSource    `json:"source,omitempty"`
		Cache     *cacheControl   `json:"cache_control,omitempty"`
	}
	imageSource struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}
	cacheControl struct {
		Type string `json:"type"`
	}
	message struct {
		Role    string  `json:"role"`
		Content []block `json:"content"`
	}
	tool struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	thinking struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	}
	request struct {
		Model     string    `json:"model"`
		MaxTokens int       `json:"max_tokens"`
		System    []block   `json:"system,omitempty"`
		Messages  []message `json:"messages"`
		Tools     []tool    `json:"tools,omitempty"`
		Stream    bool      `json:"stream,omitempty"`
		Thinking  *thinking `json:"thinking,omitempty"`
	}
	usage struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	}
	apiError struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	response struct {
		ID         string    `json:"id"`
		Model      string    `json:"model"`
		Content    []block   `json:"content"`
		StopReason string    `json:"stop_reason"`
		Usage      usage     `json:"usage"`
		Error      *apiError `json:"error"`
	}
)

// Encode converts a request to the Messages wire format.
func (a *Adapter) Encode(req *provider.Request) ([]byte, error) { return a.encode(req, nil) }

func (a *Adapter) encode(req *provider.Request, sp *provider.Splicer) ([]byte, error) {
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = a.cfg.MaxTokens
	}
	msgs, last := encodeMessages(req.Messages, sp)
	for _, i := range breakpoints(req.Messages, req.Pinned) {
		ref := last[i]
		msgs[ref.msg].Content[ref.block].Cache = &cacheControl{Type: "ephemeral"}
	}
	r := request{Model: a.cfg.Model, MaxTokens: maxTokens, Messages: msgs, Stream: !a.cfg.NoStream}
	if req.System != "" {
		// Tools come before the system prompt in the cache's order, so
		// this breakpoint covers both.
		r.System = []block{{Type: "text", Text: req.System, Cache: &cacheControl{Type: "ephemeral"}}}
	}
	if a.cfg.ThinkingBudget > 0 {
		r.Thinking = &thinking{Type: "enabled", BudgetTokens: a.cfg.ThinkingBudget}
		if r.MaxTokens <= a.cfg.ThinkingBudget {
			r.MaxTokens = a.cfg.ThinkingBudget + maxTokens
		}
	}
	for _, t := range req.Tools {
		schema := t.Schema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		r.Tools = append(r.Tools, tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return json.Marshal(r)
}

// EncodeMessages converts the transcript. Tool results, the screen image
// after them and any corrective text become one user message, tool results
// first, as the Messages API requires.
func EncodeMessages(msgs []provider.Message) []message {
	out, _ := encodeMessages(msgs, nil)
	return out
}

// blockRef is where a block landed in the encoded messages.
type blockRef struct{ msg, block int }

// encodeMessages is EncodeMessages with the screens left as placeholders
// for sp. It also returns, for each transcript message, where its last
// block landed (the place for a cache breakpoint).
func encodeMessages(msgs []provider.Message, sp *provider.Splicer) ([]message, []blockRef) {
	var out []message
	last := make([]blockRef, 0, len(msgs))
	push := func(role string, bs ...block) {
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, bs...)
		} else {
			out = append(out, message{Role: role, Content: bs})
		}
		n := len(out) - 1
		last = append(last, blockRef{msg: n, block: len(out[n].Content) - 1})
	}
	for _, m := range msgs {
		switch m.Role {
		case provider.RoleAssistant:
			var bs []block
			if m.ReasoningSignature != "" {
				bs = append(bs, block{Type: "thinking", Thinking: m.Reasoning, Signature: m.ReasoningSignature})
			}
			for _, d := range m.RedactedReasoning {
				bs = append(bs, block{Type: "redacted_thinking", Data: d})
			}
			if m.Text != "" {
				bs = append(bs, block{Type: "text", Text: m.Text})
			}
			for _, c := range m.ToolCalls {
				in := json.RawMessage(c.Arguments)
				if !json.Valid(in) || !bytes.HasPrefix(bytes.TrimSpace(in), []byte("{")) {
					in = json.RawMessage(`{}`)
				}
				bs = append(bs, block{Type: "tool_use", ID: c.ID, Name: c.Name, Input: in})
			}
			if len(bs) == 0 {
				bs = append(bs, block{Type: "text", Text: "(no reply)"})
			}
			push("assistant", bs...)
		case provider.RoleTool:
			text := m.Text
			if text == "" {
				text = "(empty)"
			}
			push("user", block{Type: "tool_result", ToolUseID: m.ToolCallID, IsError: m.IsError,
				Content: []block{{Type: "text", Text: text}}})
		case provider.RoleUser:
			var bs []block
			for _, im := range m.Images {
				data := im.Base64()
				if sp != nil {
					data = sp.Placeholder(data)
				}
				bs = append(bs, block{Type: "image", Source: &imageSource{Type: "base64", MediaType: im.MIMEType, Data: data}})
			}
			if m.Text != "" || len(bs) == 0 {
				t := m.Text
				if t == "" {
					t = "(empty)"
				}
				bs = append(bs, block{Type: "text", Text: t})
			}
			push("user", bs...)
		default:
			last = append(last, blockRef{msg: -1})
		}
	}
	return out, last
}

// Stream sends one request and returns the normalised reply.
func (a *Adapter) Stream(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	if sink == nil {
		sink = provider.NopSink{}
	}
	sp := provider.NewSplicer()
	encoded, err := a.encode(req, sp)
	if err != nil {
		return nil, &provider.Error{Class: provider.ClassInvalidRequest, Message: err.Error(), Err: err}
	}
	open, size := sp.Body(encoded, nil)
	ctx, x := provider.WithExchange(ctx)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, a.endpoint(), open())
	if err != nil {
		return nil, &provider.Error{Class: provider.ClassInvalidRequest, Message: err.Error(), Err: err}
	}
	hreq.ContentLength = size
	hreq.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
	hreq.Header.Set("content-type", "application/json")
	hreq.Header.Set("anthropic-version", APIVersion)
	hreq.Header.Set("x-api-key", a.cfg.APIKey)
	if !a.cfg.NoStream {
		hreq.Header.Set("accept", "text/event-stream")
	}
	resp, err := a.tr.Do(hreq)
	if err != nil {
		return nil, a.transportError(ctx, err, x)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, a.statusError(resp, x)
	}
	var reply *provider.Reply
	if a.cfg.NoStream || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		reply, err = decodeResponse(resp.Body, sink)
	} else {
		reply, err = decodeStream(resp.Body, sink)
	}
	if err != nil {
		var pe *provider.Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, a.transportError(ctx, err, x)
	}
	reply.RequestBytes = int(size)
	return reply, nil
}

func (a *Adapter) transportError(ctx context.Context, err error, x *provider.Exchange) error {
	if x.Idled() || errors.Is(err, provider.ErrIdleTimeout) {
		return &provider.Error{Class: provider.ClassTimeout, Message: provider.ErrIdleTimeout.Error(), Err: provider.ErrIdleTimeout}
	}
	if ctx.Err() != nil {
		return &provider.Error{Class: provider.ClassCanceled, Message: ctx.Err().Error(), Err: ctx.Err()}
	}
	return &provider.Error{Class: provider.ClassifyTransport(err), Message: err.Error(), Err: err}
}

func (a *Adapter) statusError(resp *http.Response, x *provider.Exchange) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var r response
	_ = json.Unmarshal(raw, &r)
	pe := &provider.Error{Status: resp.StatusCode}
	if r.Error != nil {
		pe.Message = r.Error.Message
		pe.Class = provider.Classify(resp.StatusCode, r.Error.Type, r.Error.Message)
	} else {
		pe.Message = strings.TrimSpace(string(raw))
		pe.Class = provider.Classify(resp.StatusCode, "", pe.Message)
	}
	if len(pe.Message) > 500 {
		pe.Message = pe.Message[:500]
	}
	x.RetryAfterFrom(&pe.RetryAfter, a.now())
	pe.Err = fmt.Errorf("anthropic messages: HTTP %d", resp.StatusCode)
	return pe
}

var _ provider.Provider = (*Adapter)(nil)
