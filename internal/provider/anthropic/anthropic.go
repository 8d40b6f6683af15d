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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
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

// maxMessageBreakpoints is how many cache breakpoints the messages get: the
// Messages API allows four, and the system prompt takes one.
const maxMessageBreakpoints = 3

// breakpoints picks the transcript messages whose last block carries a
// cache breakpoint, at most maxMessageBreakpoints, each where the request's
// prefix stays the same in the next request:
//
//   - the head's end: the last message before the first assistant message
//     (the opening trigger and, after a fold, the fold message), which
//     changes only when the transcript folds;
//   - the previous turn's last tool result and the newest turn's, each the
//     last one the next request sends unchanged: not the result the newest
//     screen came from, which the engine's latest-screen compaction turns
//     into a stub once a newer screen arrives (provider.SupersededTag), and
//     never the screen itself, which that compaction drops.
//
// The pinned tail (plan, scratchpad, nudges) is rendered afresh for every
// request and never carries one. A request reads the longest cached prefix
// ending at or up to 20 blocks before one of its breakpoints, so the newest
// turn's breakpoint is what the next request reads.
func breakpoints(msgs []provider.Message, pinned int) []int {
	n := len(msgs) - max(0, min(pinned, len(msgs)))
	transcript := msgs[:n]
	var starts []int
	for i, m := range transcript {
		if m.Role == provider.RoleAssistant {
			starts = append(starts, i)
		}
	}
	var out []int
	add := func(i int) {
		if i >= 0 && !slices.Contains(out, i) && len(out) < maxMessageBreakpoints {
			out = append(out, i)
		}
	}
	headEnd := n
	if len(starts) > 0 {
		headEnd = starts[0]
	}
	if headEnd > 0 {
		add(headEnd - 1)
	}
	volatile := screenSource(transcript)
	if k := len(starts); k >= 2 {
		add(lastResult(transcript[:starts[k-1]], starts[k-2], volatile))
	}
	if k := len(starts); k >= 1 {
		add(lastResult(transcript, starts[k-1], volatile))
	}
	return out
}

// lastResult is the index of the last tool result in msgs[from:] other than
// skip; -1 if there is none.
func lastResult(msgs []provider.Message, from, skip int) int {
	for i := len(msgs) - 1; i >= from; i-- {
		if msgs[i].Role == provider.RoleTool && i != skip {
			return i
		}
	}
	return -1
}

// screenSource is the index of the tool result the transcript's newest
// screen came from, as the engine's latest-screen compaction finds it (the
// newest non-note result before the screen's message): the one result that
// still changes, into a stub, when a newer screen arrives. -1 when there is
// no screen.
func screenSource(msgs []provider.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != provider.RoleUser || len(msgs[i].Images) == 0 {
			continue
		}
		for k := i - 1; k >= 0 && msgs[k].Role == provider.RoleTool; k-- {
			if msgs[k].ToolName != contract.ToolNote && !strings.HasPrefix(msgs[k].Text, provider.SupersededTag) {
				return k
			}
		}
		return -1
	}
	return -1
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

func decodeResponse(body io.Reader, sink provider.Sink) (*provider.Reply, error) {
	var r response
	if err := json.NewDecoder(body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, &provider.Error{Class: provider.Classify(0, r.Error.Type, r.Error.Message), Message: r.Error.Message}
	}
	var b replyBuilder
	for _, c := range r.Content {
		b.start(c)
		switch c.Type {
		case "text":
			b.text(c.Text, sink)
		case "thinking":
			b.thinking(c.Thinking, sink)
			b.msg.ReasoningSignature = c.Signature
		case "tool_use":
			b.cur.args.Write(c.Input)
		}
		b.stop()
	}
	b.usage = r.Usage
	return b.reply(r.StopReason), nil
}

// streamEvent is one server-sent event's data.
type streamEvent struct {
	Type         string    `json:"type"`
	Index        int       `json:"index"`
	Message      *response `json:"message"`
	ContentBlock *block    `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
		Signature   string `json:"signature"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *usage    `json:"usage"`
	Error *apiError `json:"error"`
}

func decodeStream(body io.Reader, sink provider.Sink) (*provider.Reply, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var (
		b          replyBuilder
		stopReason string
		stopped    bool
	)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		data := bytes.TrimSpace(line[len("data:"):])
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("anthropic stream: bad event: %w", err)
		}
		switch ev.Type {
		case "message_start":
			if ev.Message != nil {
				b.usage = ev.Message.Usage
			}
		case "content_block_start":
			if ev.ContentBlock != nil {
				b.start(*ev.ContentBlock)
				if ev.ContentBlock.Type == "redacted_thinking" {
					b.msg.RedactedReasoning = append(b.msg.RedactedReasoning, ev.ContentBlock.Data)
				}
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				b.text(ev.Delta.Text, sink)
			case "thinking_delta":
				b.thinking(ev.Delta.Thinking, sink)
			case "signature_delta":
				b.msg.ReasoningSignature += ev.Delta.Signature
			case "input_json_delta":
				if b.cur != nil {
					b.cur.args.WriteString(ev.Delta.PartialJSON)
				}
			}
		case "content_block_stop":
			b.stop()
		case "message_delta":
			if ev.Delta.StopReason != "" {
				stopReason = ev.Delta.StopReason
			}
			if u := ev.Usage; u != nil {
				// message_delta's usage is cumulative: newer API versions
				// repeat the input and cache counts there, older ones only
				// the output; a count it leaves out stays as message_start said.
				for _, f := range []struct{ dst, src *int64 }{
					{&b.usage.OutputTokens, &u.OutputTokens},
					{&b.usage.InputTokens, &u.InputTokens},
					{&b.usage.CacheReadInputTokens, &u.CacheReadInputTokens},
					{&b.usage.CacheCreationInputTokens, &u.CacheCreationInputTokens},
				} {
					if *f.src > 0 {
						*f.dst = *f.src
					}
				}
			}
		case "message_stop":
			stopped = true
		case "error":
			if ev.Error != nil {
				return nil, &provider.Error{Class: provider.Classify(0, ev.Error.Type, ev.Error.Message), Message: ev.Error.Message}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !stopped && stopReason == "" {
		return nil, &provider.Error{Class: provider.ClassTimeout, Message: "anthropic stream ended before message_stop"}
	}
	b.stop()
	return b.reply(stopReason), nil
}

// replyBuilder assembles content blocks into the normalised message.
type replyBuilder struct {
	split provider.ThinkSplitter
	msg   provider.Message
	body  strings.Builder
	think strings.Builder
	cur   *pendingCall
	calls []provider.ToolCall
	usage usage
}

type pendingCall struct {
	id, name string
	args     bytes.Buffer
}

func (b *replyBuilder) start(c block) {
	b.stop()
	if c.Type == "tool_use" {
		b.cur = &pendingCall{id: c.ID, name: c.Name}
	}
}

func (b *replyBuilder) stop() {
	if b.cur == nil {
		return
	}
	args := strings.TrimSpace(b.cur.args.String())
	if args == "" {
		args = "{}"
	}
	b.calls = append(b.calls, provider.ToolCall{ID: b.cur.id, Name: b.cur.name, Arguments: args})
	b.cur = nil
}

func (b *replyBuilder) text(s string, sink provider.Sink) {
	t, r := b.split.Feed(s)
	b.body.WriteString(t)
	b.think.WriteString(r)
	if t != "" {
		sink.Text(t)
	}
	if r != "" {
		sink.Thinking(r)
	}
}

func (b *replyBuilder) thinking(s string, sink provider.Sink) {
	b.think.WriteString(s)
	sink.Thinking(s)
}

func (b *replyBuilder) reply(stop string) *provider.Reply {
	t, r := b.split.Flush()
	b.body.WriteString(t)
	b.think.WriteString(r)
	b.msg.Role = provider.RoleAssistant
	b.msg.Text = strings.TrimSpace(b.body.String())
	b.msg.Reasoning = strings.TrimSpace(b.think.String())
	b.msg.ToolCalls = b.calls
	return &provider.Reply{
		Message:      b.msg,
		FinishReason: finish(stop, len(b.calls) > 0),
		Usage: provider.Usage{
			PromptTokens:     b.usage.InputTokens + b.usage.CacheReadInputTokens + b.usage.CacheCreationInputTokens,
			CompletionTokens: b.usage.OutputTokens,
			CachedTokens:     b.usage.CacheReadInputTokens,
			CacheWriteTokens: b.usage.CacheCreationInputTokens,
		},
	}
}

func finish(stop string, hasCalls bool) provider.FinishReason {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return provider.FinishLength
	case "refusal":
		return provider.FinishContentFilter
	case "tool_use":
		return provider.FinishToolCalls
	case "end_turn", "stop_sequence":
		if hasCalls {
			return provider.FinishToolCalls
		}
		return provider.FinishStop
	}
	if hasCalls {
		return provider.FinishToolCalls
	}
	return provider.FinishOther
}

var _ provider.Provider = (*Adapter)(nil)
