package modelsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/clock"
)

// The Anthropic Messages wire, as much of it as modelsim reads and writes.

type messagesRequest struct {
	Model     string             `json:"model"`
	MaxTokens int                `json:"max_tokens"`
	System    json.RawMessage    `json:"system,omitempty"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []json.RawMessage  `json:"tools,omitempty"`
	Stream    bool               `json:"stream,omitempty"`
	Thinking  *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking,omitempty"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a content block; raw is the block as sent, for the cache.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source,omitempty"`
	CacheControl *struct {
		Type string `json:"type"`
	} `json:"cache_control,omitempty"`
	raw json.RawMessage
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

type messagesResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// blocks reads content: a string (one text block) or a list of blocks.
func blocks(raw json.RawMessage) ([]anthropicBlock, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		b, _ := json.Marshal(map[string]string{"type": "text", "text": text})
		return []anthropicBlock{{Type: "text", Text: text, raw: b}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("want a string or a list of content blocks: %w", err)
	}
	out := make([]anthropicBlock, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, err
		}
		out[i].raw = r
	}
	return out, nil
}

// thinkingSignature signs a thinking block's text, as Anthropic signs its
// own: a request that sends the block back altered is refused.
func thinkingSignature(thinking string) string {
	return "modelsim-sig-" + shortHash([]byte("modelsim thinking\x00"+thinking))
}

// messages serves POST /v1/messages: the conversation converted to the
// chat shape and played as the other wires play it, then answered as
// Anthropic answers, with its prompt caching applied to the usage.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("x-api-key") == "" && r.Header.Get("authorization") == "" {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "read the request body: "+err.Error())
		return
	}
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "the request body is not Messages JSON: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "messages: at least one message is required")
		return
	}
	if req.MaxTokens <= 0 {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: field required")
		return
	}
	system, err := blocks(req.System)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "system: "+err.Error())
		return
	}
	msgs := make([][]anthropicBlock, len(req.Messages))
	for i, m := range req.Messages {
		if msgs[i], err = blocks(m.Content); err != nil {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages.%d.content: %v", i, err))
			return
		}
	}
	thinking := req.Thinking != nil && req.Thinking.Type == "enabled"
	if thinking {
		if req.Thinking.BudgetTokens < 1024 || req.Thinking.BudgetTokens >= req.MaxTokens {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "thinking.budget_tokens: must be at least 1024 and less than max_tokens")
			return
		}
		if msg := checkThinking(req.Messages, msgs); msg != "" {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
			return
		}
	}
	creq := chatRequest{Model: req.Model, Messages: anthropicToChat(system, req.Messages, msgs)}
	rep, stall, ok := s.play(w, r, creq, writeAnthropicError)
	if !ok {
		return
	}
	content, args := replyBlocks(rep, thinking)
	use := s.cache.anthropic(anthropicPrompt(req, system, msgs), s.now())
	out := 0
	for _, b := range content {
		for _, k := range []string{"text", "thinking", "name"} {
			if v, ok := b[k].(string); ok {
				out += len(v)
			}
		}
		if in, ok := b["input"].(json.RawMessage); ok {
			out += len(in)
		}
	}
	stop := "tool_use"
	if len(rep.calls) == 0 {
		stop = "end_turn"
	}
	resp := messagesResponse{ID: "msg_" + shortHash(body) + shortHash([]byte(s.now().String())), Type: "message", Role: "assistant", Model: req.Model,
		Content: content, StopReason: &stop,
		Usage: anthropicUsage{InputTokens: use.uncached, OutputTokens: textTokens(out), CacheReadInputTokens: use.read, CacheCreationInputTokens: use.written}}
	if !req.Stream {
		if stall > 0 {
			_ = clock.Sleep(r.Context(), stall)
			panic(http.ErrAbortHandler)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	s.streamMessages(w, r, resp, args, stall)
}

// checkThinking is Anthropic's rule for thinking in tool use: the last
// assistant message, when it calls tools, must start with its thinking
// block, sent back unaltered. It returns the error message, or "".
func checkThinking(raw []anthropicMessage, msgs [][]anthropicBlock) string {
	for i := len(raw) - 1; i >= 0; i-- {
		if raw[i].Role != "assistant" {
			continue
		}
		bs := msgs[i]
		uses := false
		for _, b := range bs {
			uses = uses || b.Type == "tool_use"
		}
		if !uses {
			return ""
		}
		switch first := bs[0]; first.Type {
		case "redacted_thinking":
			return ""
		case "thinking":
			if first.Signature != thinkingSignature(first.Thinking) {
				return fmt.Sprintf("messages.%d.content.0: Invalid `signature` in `thinking` block", i)
			}
			return ""
		default:
			return fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
				"When `thinking` is enabled, a final `assistant` message must start with a thinking block "+
				"(preceeding the lastmost set of `tool_use` and `tool_result` blocks). "+
				"We recommend you include thinking blocks from previous turns.", i, first.Type)
		}
	}
	return ""
}

// anthropicToChat is the conversation in the chat shape: the system blocks
// as the system message, a user message's tool results as tool messages
// followed by the rest of it (images and text), an assistant message's text
// and tool calls; thinking is left out.
func anthropicToChat(system []anthropicBlock, raw []anthropicMessage, msgs [][]anthropicBlock) []chatMessage {
	var out []chatMessage
	type part struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url,omitempty"`
	}
	if len(system) > 0 {
		var texts []string
		for _, b := range system {
			texts = append(texts, b.Text)
		}
		c, _ := json.Marshal(strings.Join(texts, "\n"))
		out = append(out, chatMessage{Role: "system", Content: c})
	}
	for i, m := range raw {
		if m.Role == "assistant" {
			am := chatMessage{Role: "assistant"}
			var text []string
			for _, b := range msgs[i] {
				switch b.Type {
				case "text":
					text = append(text, b.Text)
				case "tool_use":
					am.ToolCalls = append(am.ToolCalls, toolCall{ID: b.ID, Type: "function", Function: functionCall{Name: b.Name, Arguments: string(b.Input)}})
				}
			}
			if len(text) > 0 {
				am.Content, _ = json.Marshal(strings.Join(text, "\n"))
			}
			out = append(out, am)
			continue
		}
		var parts []part
		for _, b := range msgs[i] {
			switch b.Type {
			case "tool_result":
				c, _ := json.Marshal(resultText(b))
				out = append(out, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: c})
			case "text":
				parts = append(parts, part{Type: "text", Text: b.Text})
			case "image":
				if b.Source != nil {
					parts = append(parts, part{Type: "image_url", ImageURL: &struct {
						URL string `json:"url"`
					}{"data:" + b.Source.MediaType + ";base64," + b.Source.Data}})
				}
			}
		}
		if len(parts) > 0 {
			c, _ := json.Marshal(parts)
			out = append(out, chatMessage{Role: "user", Content: c})
		}
	}
	return out
}

// resultText is a tool result's text: its string content or its text blocks joined.
func resultText(b anthropicBlock) string {
	inner, _ := blocks(b.Content)
	var texts []string
	for _, c := range inner {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// anthropicPrompt is the request as cache units in Anthropic's cache order:
// the tools, the system blocks, then every message's blocks. A block is
// compared as sent, less its cache_control; its tokens are its text (a
// tool result's, a tool call's name and input, a tool's definition), and
// an image costs the flat image price.
func anthropicPrompt(req messagesRequest, system []anthropicBlock, msgs [][]anthropicBlock) *prompt {
	p := newPrompt("anthropic", req.Model)
	for _, t := range req.Tools {
		var cc struct {
			CacheControl json.RawMessage `json:"cache_control"`
		}
		_ = json.Unmarshal(t, &cc)
		canon := canonicalBlock(t)
		p.add(textTokens(len(canon)), len(cc.CacheControl) > 0, []byte("tool"), canon)
	}
	for _, b := range system {
		p.add(textTokens(len(b.Text)), b.CacheControl != nil, []byte("system"), canonicalBlock(b.raw))
	}
	for i, m := range req.Messages {
		for j, b := range msgs[i] {
			role := []byte{}
			if j == 0 {
				role = []byte(m.Role) // a message boundary is part of the prefix
			}
			p.add(blockTokens(b), b.CacheControl != nil, role, canonicalBlock(b.raw))
		}
	}
	return p
}

// blockTokens counts a content block.
func blockTokens(b anthropicBlock) int {
	switch b.Type {
	case "image":
		return imageTokens
	case "tool_use":
		return textTokens(len(b.Name) + len(b.Input))
	case "thinking":
		return textTokens(len(b.Thinking))
	case "tool_result":
		n := textTokens(len(resultText(b)))
		inner, _ := blocks(b.Content)
		for _, c := range inner {
			if c.Type == "image" {
				n += imageTokens
			}
		}
		return n
	}
	return textTokens(len(b.Text))
}

// canonicalBlock is a block's JSON without its cache_control, keys sorted.
func canonicalBlock(raw json.RawMessage) []byte {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	delete(m, "cache_control")
	b, _ := json.Marshal(m)
	return b
}

// replyBlocks is the reply as content blocks: the thinking block (when
// thinking is on), the text, then one tool_use block per call; and, by
// block index, the input JSON a stream sends for each tool_use block.
func replyBlocks(rep reply, thinking bool) ([]map[string]any, map[int]string) {
	var out []map[string]any
	args := map[int]string{}
	if thinking {
		t := "Following the script: "
		var names []string
		for _, c := range rep.calls {
			names = append(names, c.Function.Name+" "+c.Function.Arguments)
		}
		t += strings.Join(names, ", then ")
		if len(names) == 0 {
			t += "a reply in prose"
		}
		out = append(out, map[string]any{"type": "thinking", "thinking": t, "signature": thinkingSignature(t)})
	}
	if rep.content != "" {
		out = append(out, map[string]any{"type": "text", "text": rep.content})
	}
	for _, c := range rep.calls {
		// A misbehaving turn's cut-off arguments: the stream carries the
		// fragments as sent; the plain reply's input, always an object on
		// this wire, is empty.
		args[len(out)] = c.Function.Arguments
		in := json.RawMessage(c.Function.Arguments)
		if !json.Valid(in) {
			in = json.RawMessage(`{}`)
		}
		out = append(out, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Function.Name, "input": in})
	}
	return out, args
}

// streamMessages writes the response as Anthropic's events: message_start
// (with the input usage), per block content_block_start, its deltas
// (text_delta, thinking_delta then signature_delta, input_json_delta) and
// content_block_stop, then message_delta with the stop reason and the
// usage, and message_stop. A stall stops after message_start, waits, and
// breaks the connection.
func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, resp messagesResponse, args map[int]string, stall time.Duration) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(ev map[string]any) {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	started := resp
	started.Content, started.StopReason = []map[string]any{}, nil
	started.Usage.OutputTokens = 1
	send(map[string]any{"type": "message_start", "message": started})
	if stall > 0 {
		_ = clock.Sleep(r.Context(), stall)
		panic(http.ErrAbortHandler)
	}
	send(map[string]any{"type": "ping"})
	for i, b := range resp.Content {
		delta := func(d map[string]any) {
			send(map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		switch b["type"] {
		case "thinking":
			send(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": ""}})
			for _, frag := range fragments(b["thinking"].(string)) {
				delta(map[string]any{"type": "thinking_delta", "thinking": frag})
			}
			delta(map[string]any{"type": "signature_delta", "signature": b["signature"]})
		case "text":
			send(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, frag := range fragments(b["text"].(string)) {
				delta(map[string]any{"type": "text_delta", "text": frag})
			}
		case "tool_use":
			send(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			for _, frag := range fragments(args[i]) {
				delta(map[string]any{"type": "input_json_delta", "partial_json": frag})
			}
		}
		send(map[string]any{"type": "content_block_stop", "index": i})
	}
	send(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": resp.StopReason, "stop_sequence": nil}, "usage": resp.Usage})
	send(map[string]any{"type": "message_stop"})
}

// writeAnthropicError answers with Anthropic's error shape; the type
// follows the status as Anthropic's does.
func writeAnthropicError(w http.ResponseWriter, status int, _, msg string) {
	typ := "api_error"
	switch status {
	case http.StatusBadRequest:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case 529:
		typ = "overloaded_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}
