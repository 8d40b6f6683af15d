// Package provider is the one shape every model reply takes, and the adapter
// interface that produces it. The engine speaks only these types; the
// adapters in provider/openai and provider/anthropic translate them to and
// from each vendor's wire format (docs/engine.md, "Providers and the rig").
package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Role is who wrote a message.
type Role string

// The roles of a transcript.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one transcript entry in the normalised shape. Which fields are
// used depends on the role: an assistant message has Text, Reasoning and
// ToolCalls; a tool message answers one call (ToolCallID, ToolName, Text,
// IsError); a user message has Text and, right after tool results, the
// screen Images (Chat Completions refuses images inside tool messages).
type Message struct {
	Role       Role
	Text       string
	Reasoning  string
	ToolCalls  []ToolCall
	ToolCallID string
	ToolName   string
	IsError    bool
	Images     []*Image

	// ReasoningSignature and RedactedReasoning carry Anthropic's thinking
	// blocks back verbatim: a thinking model continuing after tool use must
	// be shown its own signed thinking.
	ReasoningSignature string
	RedactedReasoning  []string

	// ReasoningItems carry the Responses API's reasoning items back
	// verbatim (JSON): a reasoning model continuing after a function call
	// must be given the reasoning that led to it.
	ReasoningItems []json.RawMessage
}

// SupersededTag opens a tool result whose screen a newer one replaced
// (engine/compaction's latest-screen policy): the result became a stub and
// the screen's message left the transcript.
const SupersededTag = "(superseded "

// ToolCall is one call the model asked for. Arguments are the raw JSON text
// as the model sent it: it may be invalid, and the engine judges that.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Image is an image attachment (a screen). Its data URL is computed once:
// the same screen is sent with every request while it stays in the
// transcript, and the base64 form is a slice of the same string.
type Image struct {
	MIMEType string
	Data     []byte
	dataURL  string
	prefix   int
}

// NewImage wraps raw image bytes.
func NewImage(mime string, data []byte) *Image { return &Image{MIMEType: mime, Data: data} }

// DataURL is the image as a data: URL, cached.
func (im *Image) DataURL() string {
	if im.dataURL == "" {
		head := "data:" + im.MIMEType + ";base64,"
		b := make([]byte, len(head)+base64.StdEncoding.EncodedLen(len(im.Data)))
		copy(b, head)
		base64.StdEncoding.Encode(b[len(head):], im.Data)
		im.dataURL, im.prefix = string(b), len(head)
	}
	return im.dataURL
}

// Base64 is the image's standard base64 encoding, cached.
func (im *Image) Base64() string { return im.DataURL()[im.prefix:] }

// ToolSpec is a tool offered to the model: its name, description and JSON
// schema for the arguments, passed through as they are.
type ToolSpec struct {
	Name        string
	Description string
	Schema      json.RawMessage
}

// Request is one model request.
type Request struct {
	System   string
	Messages []Message
	Tools    []ToolSpec
	// MaxTokens bounds the reply; 0 means the adapter's default.
	MaxTokens int
	// Pinned is how many of the last Messages are the pinned tail (the plan,
	// the scratchpad, a nudge): rendered afresh for every request and never
	// part of the transcript. A wire that keeps the conversation on the
	// service sends them beside it, not in it.
	Pinned int
}

// FinishReason is why the model stopped, normalised across vendors.
type FinishReason string

// The finish reasons the engine acts on: the reply's real one, normalised
// across vendors (docs/engine.md, "Reading the loop", judge).
const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter"
	FinishOther         FinishReason = "other"
)

// Usage is the token usage of one reply. PromptTokens is the whole input,
// cached or not: the uncached tokens, the cache reads (CachedTokens) and the
// cache writes (CacheWriteTokens) together.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	// CachedTokens are the input tokens read from the provider's prompt
	// cache (OpenAI's cached_tokens, Anthropic's cache_read_input_tokens).
	CachedTokens int64
	// CacheWriteTokens are the input tokens written to the prompt cache by
	// this request (Anthropic's cache_creation_input_tokens, billed above
	// the base input price); OpenAI caches for free and reports none.
	CacheWriteTokens int64
}

// Reply is a model reply in the one shape: an assistant message, the real
// finish reason, and usage.
type Reply struct {
	Message      Message
	FinishReason FinishReason
	Usage        Usage
	// RequestBytes is the size of the encoded request body, for accounting.
	RequestBytes int
	// Model and ID are the model that answered and the reply's id, as the
	// service named them; empty when it did not (the OpenTelemetry chat
	// span's gen_ai.response.model and gen_ai.response.id).
	Model string
	ID    string
}

// Sink receives a reply's stream as it arrives. Thinking is the model's
// reasoning (native thinking, reasoning_content, or <think> text moved aside).
type Sink interface {
	Text(delta string)
	Thinking(delta string)
}

// Provider is the adapter interface: one request in, one normalised reply out.
// An error is always a *Error so the engine can act on its class.
type Provider interface {
	Name() string
	Model() string
	Stream(ctx context.Context, req *Request, sink Sink) (*Reply, error)
}

// Chained is a provider that keeps the conversation on the service (the
// Responses API's stored responses). Its state goes into the session's
// snapshot, so a resumed attempt continues the conversation instead of
// sending it again.
type Chained interface {
	Provider
	// ChainState is the state to save; nil when there is none.
	ChainState() []byte
	// RestoreChain continues from saved state.
	RestoreChain(state []byte) error
}

// Options are the transport settings every adapter takes.
type Options struct {
	BaseURL string
	APIKey  string
	Model   string
	// IdleTimeout aborts a reply when no stream data arrives for this long
	// (docs/engine.md, "Providers and the rig": the idle watchdog, default 120 s).
	IdleTimeout time.Duration
	// RequestTimeout bounds one whole request.
	RequestTimeout time.Duration
	// MaxTokens is the default reply bound.
	MaxTokens int
	// NoStream asks for a plain JSON reply instead of an SSE stream.
	NoStream bool
	// HTTPClient replaces the adapter's own client (tests, benchmarks); the
	// idle watchdog still applies.
	HTTPClient *http.Client
}

// Defaults for Options.
const (
	// DefaultIdleTimeout is the model idle window, the pod contract's default
	// for --model-timeout-seconds (docs/loop-contract.md, "Settings": 120 s).
	DefaultIdleTimeout = contract.DefaultModelTimeoutSeconds * time.Second
	// DefaultRequestTimeout bounds a whole model request (ours: generous, the idle
	// watchdog catches stalls long before it).
	DefaultRequestTimeout = 10 * time.Minute
	// DefaultMaxTokens bounds one reply (ours: a turn is a note and one action).
	DefaultMaxTokens = 4096
)

// WithDefaults fills the zero fields of o.
func (o Options) WithDefaults() Options {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	return o
}

// NopSink discards the stream.
type NopSink struct{}

// Text discards a text delta.
func (NopSink) Text(string) {}

// Thinking discards a thinking delta.
func (NopSink) Thinking(string) {}
