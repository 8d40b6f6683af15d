package modelsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/clawfarm/clawfarm/internal/clock"
)

// DefaultResponseTTL is how long modelsim keeps a stored response (ours:
// long enough for any scripted session; OpenAI keeps them 30 days).
const DefaultResponseTTL = time.Hour

// The OpenAI Responses wire, as much of it as modelsim reads and writes.

type responsesRequest struct {
	Model              string          `json:"model"`
	Instructions       string          `json:"instructions,omitempty"`
	Input              json.RawMessage `json:"input"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	Store              *bool           `json:"store,omitempty"`
	Stream             bool            `json:"stream,omitempty"`
	Tools              json.RawMessage `json:"tools,omitempty"`
	PromptCacheKey     string          `json:"prompt_cache_key,omitempty"`
}

// item is one input or output item, as much as the conversation needs.
type item struct {
	Type      string          `json:"type"`
	ID        string          `json:"id,omitempty"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Output    string          `json:"output,omitempty"`
	Status    string          `json:"status,omitempty"`
}

type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	TotalTokens        int `json:"total_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

type responseObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Model              string          `json:"model"`
	Output             []item          `json:"output"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	Store              bool            `json:"store"`
	Usage              *responsesUsage `json:"usage,omitempty"`
}

// storedResponse is a response's whole conversation: the items before it,
// its input and its output, and the input tokens they make (for cached).
type storedResponse struct {
	items   []item
	tokens  int
	expires time.Time
}

// responses serves POST /v1/responses: the conversation is the stored
// response it continues, if any, then its input; modelsim plays it as it
// plays a Chat Completions request, and stores the result under a new id
// unless store is false.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "read the request body: "+err.Error())
		return
	}
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the request body is not Responses JSON: "+err.Error())
		return
	}
	input, err := inputItems(req.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "input: "+err.Error())
		return
	}
	prior, found := storedResponse{}, true
	if req.PreviousResponseID != "" {
		prior, found = s.stored(req.PreviousResponseID)
	}
	items := append(prior.items[:len(prior.items):len(prior.items)], input...)
	stale, bad := s.checkScreens(req, input, items)
	if bad != "" {
		writeErrorCode(w, http.StatusBadRequest, "invalid_request_error", SupersededScreenCode, bad)
		return
	}
	if !found {
		writeErrorCode(w, http.StatusBadRequest, "invalid_request_error", "previous_response_not_found",
			fmt.Sprintf("Previous response with id '%s' not found.", req.PreviousResponseID))
		return
	}
	if stale > 0 {
		w.Header().Set(StaleScreensHeader, fmt.Sprint(stale))
	}
	creq := chatRequest{Model: req.Model, Messages: chatMessages(req.Instructions, items), Tools: req.Tools}
	if len(creq.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "input must not be empty")
		return
	}
	rep, stall, ok := s.play(w, r, creq, writeError)
	if !ok {
		return
	}
	// Without a stored response the prompt is cached as on the chat wire;
	// with one, the stored conversation is the cached prefix.
	var u usage
	if req.PreviousResponseID == "" {
		creq.PromptCacheKey = req.PromptCacheKey
		u = s.openAIUsage("responses", creq, rep)
	} else {
		p := chatPrompt("responses", creq)
		in, out := p.tokens(), completionTokens(rep)
		u = usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out,
			PromptTokensDetails: &promptTokensDetails{CachedTokens: openAIGranular(min(prior.tokens, in))}}
	}
	id := "resp_" + shortHash(body) + shortHash([]byte(s.now().String()))
	out := outputItems(id, rep)
	resp := responseObject{ID: id, Object: "response", CreatedAt: s.now().Unix(), Status: "completed", Model: req.Model,
		Output: out, PreviousResponseID: req.PreviousResponseID, Store: req.Store == nil || *req.Store}
	resp.Usage = &responsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	resp.Usage.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	if resp.Store {
		s.store(id, storedResponse{items: append(items, out...), tokens: u.PromptTokens, expires: s.now().Add(s.responseTTL())})
	}
	if !req.Stream {
		if stall > 0 {
			_ = clock.Sleep(r.Context(), stall)
			panic(http.ErrAbortHandler)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	s.streamResponse(w, r, resp, stall)
}

func (s *Server) responseTTL() time.Duration {
	if s.ResponseTTL > 0 {
		return s.ResponseTTL
	}
	return DefaultResponseTTL
}

// stored returns a stored response that has not expired, dropping the ones that have.
func (s *Server) stored(id string) (storedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, v := range s.kept {
		if !now.Before(v.expires) {
			delete(s.kept, k)
		}
	}
	v, ok := s.kept[id]
	return v, ok
}

func (s *Server) store(id string, v storedResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept[id] = v
}

// inputItems reads input: a string (one user message) or a list of items.
func inputItems(raw json.RawMessage) ([]item, error) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		c, _ := json.Marshal(text)
		return []item{{Type: "message", Role: "user", Content: c}}, nil
	}
	var items []item
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("want a string or a list of items: %w", err)
	}
	for i := range items {
		if items[i].Type == "" && items[i].Role != "" {
			items[i].Type = "message"
		}
	}
	return items, nil
}

// chatMessages is the conversation in the Chat Completions shape: the
// instructions as the system message, function calls joined to the
// assistant message before them, reasoning left out.
func chatMessages(instructions string, items []item) []chatMessage {
	var out []chatMessage
	if instructions != "" {
		c, _ := json.Marshal(instructions)
		out = append(out, chatMessage{Role: "system", Content: c})
	}
	lastAssistant := func() *chatMessage {
		if n := len(out); n > 0 && out[n-1].Role == "assistant" {
			return &out[n-1]
		}
		return nil
	}
	for _, it := range items {
		switch it.Type {
		case "message":
			m := chatMessage{Role: it.Role, Content: chatContent(it.Content)}
			if it.Role == "developer" {
				m.Role = "system"
			}
			out = append(out, m)
		case "function_call":
			a := lastAssistant()
			if a == nil {
				out = append(out, chatMessage{Role: "assistant"})
				a = &out[len(out)-1]
			}
			a.ToolCalls = append(a.ToolCalls, toolCall{ID: it.CallID, Type: "function", Function: functionCall{Name: it.Name, Arguments: it.Arguments}})
		case "function_call_output":
			c, _ := json.Marshal(it.Output)
			out = append(out, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: c})
		}
	}
	return out
}

// chatContent converts a message's content to chat parts: text parts and image parts.
func chatContent(raw json.RawMessage) json.RawMessage {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return raw
	}
	var parts []contentPart
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	type chatPart struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url,omitempty"`
	}
	var out []chatPart
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, chatPart{Type: "text", Text: p.Text})
		case "input_image":
			out = append(out, chatPart{Type: "image_url", ImageURL: &struct {
				URL string `json:"url"`
			}{p.ImageURL}})
		}
	}
	b, _ := json.Marshal(out)
	return b
}

// outputItems is the reply as output items: a message when it has text,
// then one function call per tool call.
func outputItems(id string, rep reply) []item {
	var out []item
	if rep.content != "" {
		c, _ := json.Marshal([]contentPart{{Type: "output_text", Text: rep.content}})
		out = append(out, item{Type: "message", ID: "msg_" + id, Role: "assistant", Content: c, Status: "completed"})
	}
	for i, c := range rep.calls {
		out = append(out, item{Type: "function_call", ID: fmt.Sprintf("fc_%s_%d", id, i), CallID: c.ID, Name: c.Function.Name,
			Arguments: c.Function.Arguments, Status: "completed"})
	}
	return out
}

// streamResponse writes the response as Responses events: created, each
// output item (text and arguments in fragments), completed. A stall stops
// after response.created, waits, and breaks the connection.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, resp responseObject, stall time.Duration) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	seq := 0
	send := func(ev map[string]any) {
		ev["sequence_number"] = seq
		seq++
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	started := resp
	started.Status, started.Output, started.Usage = "in_progress", []item{}, nil
	send(map[string]any{"type": "response.created", "response": started})
	if stall > 0 {
		_ = clock.Sleep(r.Context(), stall)
		panic(http.ErrAbortHandler)
	}
	for i, it := range resp.Output {
		added := it
		added.Status, added.Arguments, added.Content = "in_progress", "", nil
		send(map[string]any{"type": "response.output_item.added", "output_index": i, "item": added})
		switch it.Type {
		case "message":
			var parts []contentPart
			_ = json.Unmarshal(it.Content, &parts)
			for _, p := range parts {
				for _, frag := range fragments(p.Text) {
					send(map[string]any{"type": "response.output_text.delta", "item_id": it.ID, "output_index": i, "content_index": 0, "delta": frag})
				}
			}
		case "function_call":
			for _, frag := range fragments(it.Arguments) {
				send(map[string]any{"type": "response.function_call_arguments.delta", "item_id": it.ID, "output_index": i, "delta": frag})
			}
			send(map[string]any{"type": "response.function_call_arguments.done", "item_id": it.ID, "output_index": i, "arguments": it.Arguments})
		}
		send(map[string]any{"type": "response.output_item.done", "output_index": i, "item": it})
	}
	send(map[string]any{"type": "response.completed", "response": resp})
}

func writeErrorCode(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, apiError{Error: apiErrorBody{Message: msg, Type: typ, Code: &code}})
}

// SupersededScreenCode is the error code of a Responses request that
// breaks the latest-screen rule where it must hold: a request without
// previous_response_id that carries a superseded screen, or a store:false
// request that refers to anything stored (docs/modelsim.md, "Endpoints").
const SupersededScreenCode = "modelsim_superseded_screen"

// StaleScreensHeader is the response header that tells how many superseded
// screens the conversation of a chained request holds.
const StaleScreensHeader = "X-Modelsim-Stale-Screens"

// ResponsesReport is what modelsim saw on the Responses wire: the requests,
// the stateless ones (store false) and the ones that continued a stored
// response, the superseded screens the chains held, and every request it
// refused for carrying or referring to a superseded screen.
type ResponsesReport struct {
	Requests, Stateless, Continued int
	// StaleScreens is the superseded screens of every continued request's
	// conversation, added up; MaxStaleScreens the most in one.
	StaleScreens, MaxStaleScreens int
	// Violations are the refused requests, each with why.
	Violations []string
}

// ResponsesReport returns what modelsim saw on the Responses wire so far.
func (s *Server) ResponsesReport() ResponsesReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Violations = append([]string(nil), r.Violations...)
	return r
}

// checkScreens holds a Responses request to the latest-screen rule: only
// the newest screen is alive. A request that continues no stored response
// must carry no other screen, and one with store false must not refer to
// anything stored (a previous response, an item reference, an item id) —
// bad says how it broke the rule. A chained request's conversation holds
// the screens superseded since they were sent: stale counts them.
func (s *Server) checkScreens(req responsesRequest, input, conversation []item) (stale int, bad string) {
	stateless := req.Store != nil && !*req.Store
	switch {
	case stateless && req.PreviousResponseID != "":
		bad = fmt.Sprintf("a store:false request continues the stored response %s", req.PreviousResponseID)
	case req.PreviousResponseID == "":
		if n := screenMessages(input); n > 1 {
			bad = fmt.Sprintf("a request without previous_response_id carries %d screens: every one but the newest is superseded and must be a stub", n)
		}
	default:
		stale = max(0, screenMessages(conversation)-1)
	}
	if bad == "" && stateless {
		for i, it := range input {
			if it.Type == "item_reference" || it.ID != "" {
				bad = fmt.Sprintf("a store:false request refers to the stored item %q (input[%d], %s)", it.ID, i, it.Type)
				break
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report.Requests++
	if stateless {
		s.report.Stateless++
	}
	if req.PreviousResponseID != "" && bad == "" {
		s.report.Continued++
		s.report.StaleScreens += stale
		s.report.MaxStaleScreens = max(s.report.MaxStaleScreens, stale)
	}
	if bad != "" {
		s.report.Violations = append(s.report.Violations, "modelsim: "+bad)
	}
	return stale, bad
}

// screenMessages counts the messages that carry an image: each is a screen.
func screenMessages(items []item) int {
	n := 0
	for _, it := range items {
		if it.Type != "message" {
			continue
		}
		var parts []contentPart
		if json.Unmarshal(it.Content, &parts) != nil {
			continue
		}
		for _, p := range parts {
			if p.Type == "input_image" {
				n++
				break
			}
		}
	}
	return n
}
