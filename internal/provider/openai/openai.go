// Package openai is the OpenAI adapter, through go-openai, with two wires:
// Chat Completions (the whole context every request), which OpenAI itself,
// Qwen, Moonshot, DeepSeek, Google's OpenAI-compatible endpoint, vLLM,
// Ollama and any other compatible server speak; and OpenAI's Responses API
// (responses.go), stateless by default (store: false, the whole compacted
// transcript every request, as on the chat wire) or chained on the
// service's stored responses (chain.go).
package openai

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// Config configures the adapter.
type Config struct {
	provider.Options
	// Name is the preset name, for events and errors.
	Name string
	// MaxCompletionTokensField sends max_completion_tokens instead of the
	// older max_tokens (OpenAI's reasoning models refuse max_tokens; most
	// compatible servers know only max_tokens).
	MaxCompletionTokensField bool
	// NoStreamUsage leaves out stream_options.include_usage for servers that refuse it.
	NoStreamUsage bool
	// API is the wire: APIChat (the default), APIResponses (stateless) or
	// APIResponsesChained (previous_response_id).
	API string
	// StaleScreens is how many superseded screens the chained Responses
	// wire may keep on the service before it starts over (chain.go); 0:
	// DefaultStaleScreens, <0: none.
	StaleScreens int
}

// Adapter is the Chat Completions adapter.
type Adapter struct {
	cfg    Config
	client *goopenai.Client
	now    func() time.Time
	chain  chain // the Responses wire's stored responses
}

// New builds an adapter.
func New(cfg Config) *Adapter {
	cfg.Options = cfg.Options.WithDefaults()
	if cfg.Name == "" {
		cfg.Name = "openai-compatible"
	}
	if cfg.API == "" {
		cfg.API = APIChat
	}
	stale := cfg.StaleScreens
	switch {
	case stale == 0:
		stale = DefaultStaleScreens
	case stale < 0:
		stale = 0
	}
	tr := provider.NewTransport(cfg.Options)
	tr.RewriteBody = nullContentForToolCalls
	cc := goopenai.DefaultConfig(cfg.APIKey)
	cc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	cc.HTTPClient = tr
	cc.EmptyMessagesLimit = 10000 // keep-alive comments are not an error
	return &Adapter{cfg: cfg, client: goopenai.NewClientWithConfig(cc), now: time.Now, chain: chain{staleScreens: stale}}
}

// Name is the preset name.
func (a *Adapter) Name() string { return a.cfg.Name }

// Model is the model name.
func (a *Adapter) Model() string { return a.cfg.Model }

// Stream sends one request and returns the normalised reply.
func (a *Adapter) Stream(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	if sink == nil {
		sink = provider.NopSink{}
	}
	if a.cfg.API == APIResponses || a.cfg.API == APIResponsesChained {
		return a.responses(ctx, req, sink)
	}
	sp := provider.NewSplicer()
	creq := a.encode(req, sp)
	ctx, x := provider.WithExchange(provider.WithSplicer(ctx, sp))
	var (
		reply *provider.Reply
		err   error
	)
	if a.cfg.NoStream {
		reply, err = a.complete(ctx, creq, sink)
	} else {
		reply, err = a.stream(ctx, creq, sink)
	}
	if err != nil {
		return nil, a.classify(ctx, err, x)
	}
	reply.RequestBytes = x.RequestBytes
	return reply, nil
}

func (a *Adapter) encode(req *provider.Request, sp *provider.Splicer) goopenai.ChatCompletionRequest {
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = a.cfg.MaxTokens
	}
	creq := goopenai.ChatCompletionRequest{
		Model:    a.cfg.Model,
		Messages: encodeMessages(req.System, req.Messages, sp),
		Stream:   !a.cfg.NoStream,
	}
	if a.cfg.MaxCompletionTokensField {
		creq.MaxCompletionTokens = maxTokens
	} else {
		// Deprecated by OpenAI, but the only field most OpenAI-compatible
		// servers (vLLM, Ollama, Qwen, DeepSeek…) know.
		//lint:ignore SA1019 max_tokens is what compatible servers read
		creq.MaxTokens = maxTokens
	}
	if creq.Stream && !a.cfg.NoStreamUsage {
		creq.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
	}
	for _, t := range req.Tools {
		creq.Tools = append(creq.Tools, goopenai.Tool{Type: goopenai.ToolTypeFunction, Function: &goopenai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: t.Schema,
		}})
	}
	return creq
}

// EncodeMessages converts the transcript to Chat Completions messages. Images
// travel in user messages only: Chat Completions refuses them in tool messages.
func EncodeMessages(system string, msgs []provider.Message) []goopenai.ChatCompletionMessage {
	return encodeMessages(system, msgs, nil)
}

// encodeMessages is EncodeMessages with the screens left as placeholders for sp.
func encodeMessages(system string, msgs []provider.Message, sp *provider.Splicer) []goopenai.ChatCompletionMessage {
	out := make([]goopenai.ChatCompletionMessage, 0, len(msgs)+1)
	if system != "" {
		out = append(out, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleSystem, Content: system})
	}
	for _, m := range msgs {
		switch m.Role {
		case provider.RoleUser:
			if len(m.Images) == 0 {
				out = append(out, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, Content: nonEmpty(m.Text)})
				continue
			}
			parts := make([]goopenai.ChatMessagePart, 0, len(m.Images)+1)
			if m.Text != "" {
				parts = append(parts, goopenai.ChatMessagePart{Type: goopenai.ChatMessagePartTypeText, Text: m.Text})
			}
			for _, im := range m.Images {
				url := im.DataURL()
				if sp != nil && provider.SpliceSafe(im.MIMEType) {
					url = sp.Placeholder(url)
				}
				parts = append(parts, goopenai.ChatMessagePart{Type: goopenai.ChatMessagePartTypeImageURL,
					ImageURL: &goopenai.ChatMessageImageURL{URL: url, Detail: goopenai.ImageURLDetailAuto}})
			}
			out = append(out, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, MultiContent: parts})
		case provider.RoleAssistant:
			msg := goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleAssistant, Content: m.Text}
			for _, c := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, goopenai.ToolCall{ID: c.ID, Type: goopenai.ToolTypeFunction,
					Function: goopenai.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
			}
			if msg.Content == "" && len(msg.ToolCalls) == 0 {
				msg.Content = "(no reply)"
			}
			out = append(out, msg)
		case provider.RoleTool:
			out = append(out, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleTool,
				ToolCallID: m.ToolCallID, Content: nonEmpty(m.Text)})
		}
	}
	return out
}

func nonEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}

// nullContentForToolCalls gives a tool-call-only assistant message an
// explicit "content": null. go-openai leaves content out when it is empty;
// some servers (TGI, older vLLM, Mistral) then refuse the message, and others
// (Gemini and Bedrock behind proxies) refuse an empty string — null is what
// the Chat Completions specification names and what strict servers accept.
// The match is exact: inside a JSON string these quotes would be escaped.
func nullContentForToolCalls(body []byte) []byte {
	if !bytes.Contains(body, toolCallsOnly) {
		return body
	}
	return bytes.ReplaceAll(body, toolCallsOnly, toolCallsNullContent)
}

var (
	toolCallsOnly        = []byte(`{"role":"assistant","tool_calls":`)
	toolCallsNullContent = []byte(`{"role":"assistant","content":null,"tool_calls":`)
)

func (a *Adapter) stream(ctx context.Context, creq goopenai.ChatCompletionRequest, sink provider.Sink) (*provider.Reply, error) {
	st, err := a.client.CreateChatCompletionStream(ctx, creq)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var (
		acc    callAccumulator
		split  provider.ThinkSplitter
		text   strings.Builder
		reason strings.Builder
		finish goopenai.FinishReason
		usage  provider.Usage
		model  string
		id     string
	)
	emit := func(t, r string) {
		if t != "" {
			text.WriteString(t)
			sink.Text(t)
		}
		if r != "" {
			reason.WriteString(r)
			sink.Thinking(r)
		}
	}
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if chunk.Usage != nil {
			usage = convertUsage(chunk.Usage)
		}
		if chunk.Model != "" {
			model = chunk.Model
		}
		if chunk.ID != "" {
			id = chunk.ID
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			d := ch.Delta
			if d.ReasoningContent != "" {
				emit("", d.ReasoningContent)
			}
			if d.Content != "" {
				emit(split.Feed(d.Content))
			}
			if d.Refusal != "" {
				emit(d.Refusal, "")
			}
			for i, tc := range d.ToolCalls {
				acc.add(i, tc)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	emit(split.Flush())
	msg := provider.Message{Role: provider.RoleAssistant, Text: strings.TrimSpace(text.String()),
		Reasoning: strings.TrimSpace(reason.String()), ToolCalls: acc.calls()}
	return &provider.Reply{Message: msg, FinishReason: normaliseFinish(finish, len(msg.ToolCalls) > 0), Usage: usage, Model: model, ID: id}, nil
}

func (a *Adapter) complete(ctx context.Context, creq goopenai.ChatCompletionRequest, sink provider.Sink) (*provider.Reply, error) {
	resp, err := a.client.CreateChatCompletion(ctx, creq)
	if err != nil {
		return nil, err
	}
	reply := &provider.Reply{Usage: convertUsage(&resp.Usage), Model: resp.Model, ID: resp.ID}
	reply.Message.Role = provider.RoleAssistant
	if len(resp.Choices) == 0 {
		reply.FinishReason = provider.FinishOther
		return reply, nil
	}
	ch := resp.Choices[0]
	text, reasoning := provider.SplitThink(ch.Message.Content)
	if ch.Message.ReasoningContent != "" {
		reasoning = strings.TrimSpace(ch.Message.ReasoningContent + "\n" + reasoning)
	}
	reply.Message.Text, reply.Message.Reasoning = text, reasoning
	if reasoning != "" {
		sink.Thinking(reasoning)
	}
	if text != "" {
		sink.Text(text)
	}
	for _, tc := range ch.Message.ToolCalls {
		reply.Message.ToolCalls = append(reply.Message.ToolCalls, provider.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	reply.FinishReason = normaliseFinish(ch.FinishReason, len(reply.Message.ToolCalls) > 0)
	return reply, nil
}

func convertUsage(u *goopenai.Usage) provider.Usage {
	out := provider.Usage{PromptTokens: int64(u.PromptTokens), CompletionTokens: int64(u.CompletionTokens)}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = int64(u.PromptTokensDetails.CachedTokens)
	}
	return out
}

// normaliseFinish maps the server's finish reason. Several servers (vLLM,
// Ollama) say "stop" after tool calls; the calls are what count.
func normaliseFinish(f goopenai.FinishReason, hasCalls bool) provider.FinishReason {
	switch f {
	case goopenai.FinishReasonLength:
		return provider.FinishLength
	case goopenai.FinishReasonContentFilter:
		return provider.FinishContentFilter
	case goopenai.FinishReasonToolCalls, goopenai.FinishReasonFunctionCall:
		return provider.FinishToolCalls
	case goopenai.FinishReasonStop:
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

// callAccumulator joins streamed tool-call deltas. A delta names its call by
// index; when a server leaves the index out, its position in the chunk's
// list is the index, unless it carries a new id (a server that sends one
// whole call per chunk, each at position 0).
type callAccumulator struct {
	order []int
	byIdx map[int]*provider.ToolCall
}

func (a *callAccumulator) add(pos int, tc goopenai.ToolCall) {
	if a.byIdx == nil {
		a.byIdx = map[int]*provider.ToolCall{}
	}
	idx := pos
	if tc.Index != nil {
		idx = *tc.Index
	} else if tc.ID != "" {
		idx = -1
		for _, i := range a.order {
			if a.byIdx[i].ID == tc.ID {
				idx = i
				break
			}
		}
		if idx < 0 {
			if c, ok := a.byIdx[pos]; ok && c.ID != "" {
				idx = a.next()
			} else {
				idx = pos
			}
		}
	} else if len(a.order) > 0 && pos == 0 {
		// A continuation without index or id belongs to the newest call.
		idx = a.order[len(a.order)-1]
	}
	c, ok := a.byIdx[idx]
	if !ok {
		c = &provider.ToolCall{}
		a.byIdx[idx] = c
		a.order = append(a.order, idx)
	}
	if tc.ID != "" && c.ID == "" {
		c.ID = tc.ID
	}
	if tc.Function.Name != "" {
		if c.Name == "" || c.Arguments == "" && c.Name != tc.Function.Name {
			c.Name += tc.Function.Name
		}
	}
	c.Arguments += tc.Function.Arguments
}

func (a *callAccumulator) next() int {
	m := -1
	for _, i := range a.order {
		if i > m {
			m = i
		}
	}
	return m + 1
}

func (a *callAccumulator) calls() []provider.ToolCall {
	if len(a.order) == 0 {
		return nil
	}
	out := make([]provider.ToolCall, 0, len(a.order))
	for _, i := range a.order {
		out = append(out, *a.byIdx[i])
	}
	return out
}

// classify turns go-openai's errors into a *provider.Error.
func (a *Adapter) classify(ctx context.Context, err error, x *provider.Exchange) error {
	if x.Idled() || errors.Is(err, provider.ErrIdleTimeout) {
		return &provider.Error{Class: provider.ClassTimeout, Message: provider.ErrIdleTimeout.Error(), Err: provider.ErrIdleTimeout}
	}
	if ctx.Err() != nil {
		return &provider.Error{Class: provider.ClassCanceled, Message: ctx.Err().Error(), Err: ctx.Err()}
	}
	pe := &provider.Error{Err: err}
	x.RetryAfterFrom(&pe.RetryAfter, a.now())
	var apiErr *goopenai.APIError
	var reqErr *goopenai.RequestError
	var se *streamError
	switch {
	case errors.As(err, &se):
		pe.Message = se.Message
		pe.Class = provider.Classify(streamStatus(se.Code), se.Code, se.Message)
	case errors.As(err, &apiErr):
		pe.Status = apiErr.HTTPStatusCode
		code, _ := apiErr.Code.(string)
		pe.Message = apiErr.Message
		pe.Class = provider.Classify(pe.Status, apiErr.Type+" "+code, apiErr.Message)
	case errors.As(err, &reqErr):
		pe.Status = reqErr.HTTPStatusCode
		pe.Message = strings.TrimSpace(string(reqErr.Body))
		if pe.Message == "" && reqErr.Err != nil {
			pe.Message = reqErr.Err.Error()
		}
		pe.Class = provider.Classify(pe.Status, "", pe.Message)
	default:
		pe.Class = provider.ClassifyTransport(err)
		pe.Message = err.Error()
	}
	if len(pe.Message) > 500 {
		pe.Message = pe.Message[:500]
	}
	return pe
}

// compile-time check
var _ provider.Chained = (*Adapter)(nil)
