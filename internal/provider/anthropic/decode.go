package anthropic

// Decoding a reply: a plain JSON response or a server-sent event stream,
// assembled into the normalised reply.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/clawfarm/clawfarm/internal/provider"
)

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
	b.usage, b.model, b.id = r.Usage, r.Model, r.ID
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
				b.model, b.id = ev.Message.Model, ev.Message.ID
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
	model string // the model that answered, and the message's id
	id    string
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
		Model:        b.model,
		ID:           b.id,
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
