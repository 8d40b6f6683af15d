// Package modelsim is a model server that plays scripted scenarios against a rig, on three
// wires: OpenAI's Chat Completions, OpenAI's Responses API with its stored responses, and
// Anthropic's Messages API with extended thinking. Each reply is the [note, one-other] turn
// the script's next step asks for, resolved against the newest element listing in the
// conversation; every wire converts its request to the chat shape the script logic reads.
// The script's progress is read from the conversation, so one server serves a whole farm;
// the scenario comes from the model name ("sim/timer") or a marker in the trigger
// ("[scenario:timer]").
//
// Usage emulates the providers' prompt caching as their prompt-caching documentation
// describes it (details and sources in docs/modelsim.md, "Prompt caching"). Tokens are
// counted from content: four bytes of text a token, 765 per image. A prompt is a chain of
// block hashes in the provider's cache order (tools, system, messages), so a change in any
// block changes every prefix after it.
//
//   - OpenAI (chat, and Responses without previous_response_id): automatic for prompts of
//     1024 tokens or more; cached is the longest prefix, at a block boundary, that an
//     earlier request with the same wire, model and prompt_cache_key sent, reported as 1024
//     plus whole 128-token steps. With previous_response_id the stored conversation is the
//     cached prefix, in the same steps.
//   - Anthropic: only at cache_control breakpoints. A breakpoint reads the longest entry
//     among its own block and the 19 before it; each breakpoint after the read whose
//     prefix has 1024 tokens or more writes it. cache_read_input_tokens is the read,
//     cache_creation_input_tokens the tokens from the read to the last write, input_tokens
//     the rest.
//
// Entries live five minutes from their last write or read, on the server's clock, and the
// least recently used go first beyond a fixed number.
package modelsim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/clawfarm/clawfarm/internal/clock"
)

// ModelPrefix names scenarios as models: "sim/timer".
const ModelPrefix = "sim/"

// maxRequestBytes bounds a request body (transcripts with images can be large).
const maxRequestBytes = 64 << 20

var scenarioMarker = regexp.MustCompile(`\[scenario:([A-Za-z0-9_.-]+)\]`)

// Server serves the scenarios of a library.
type Server struct {
	lib Library
	now func() time.Time

	// ResponseTTL is how long a stored response (the Responses wire) can
	// be continued; 0: DefaultResponseTTL.
	ResponseTTL time.Duration

	mu     sync.Mutex
	served map[string]int            // fault key → times served
	kept   map[string]storedResponse // stored responses by id
	cache  *promptCache              // prompt prefixes, for the cached tokens in usage
	report ResponsesReport           // what the Responses wire saw
	accts  accounts                  // requests per model key
}

// NewServer serves lib.
func NewServer(lib Library) *Server {
	return &Server{lib: lib, now: time.Now, served: map[string]int{}, kept: map[string]storedResponse{}, cache: newPromptCache(maxCacheEntries)}
}

// Handler serves POST /v1/chat/completions, POST /v1/responses, POST /v1/messages and GET /v1/models,
// and GET /api/sim/accounts (the requests per model key, Accounts).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.accts.count(s.chatCompletions))
	mux.HandleFunc("POST /v1/responses", s.accts.count(s.responses))
	mux.HandleFunc("POST /v1/messages", s.accts.count(s.messages))
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /api/sim/accounts", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Accounts()) })
	return mux
}

// Accounts are the requests served per model key, by AccountID.
func (s *Server) Accounts() map[string]Account { return s.accts.snapshot() }

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, n := range s.lib.Names() {
		out.Data = append(out.Data, model{ID: ModelPrefix + n, Object: "model", Created: 0, OwnedBy: "modelsim"})
	}
	writeJSON(w, http.StatusOK, out)
}

// scenarioFor picks the scenario: a [scenario:name] marker in the user messages wins,
// else the model name ("sim/name" or "name").
func (s *Server) scenarioFor(req chatRequest, t transcript) (*Scenario, error) {
	if m := scenarioMarker.FindStringSubmatch(t.trigger); m != nil {
		if sc, ok := s.lib[m[1]]; ok {
			return sc, nil
		}
		return nil, fmt.Errorf("the trigger names scenario %q, which does not exist; scenarios: %s", m[1], strings.Join(s.lib.Names(), ", "))
	}
	if sc, ok := s.lib[strings.TrimPrefix(req.Model, ModelPrefix)]; ok {
		return sc, nil
	}
	return nil, fmt.Errorf("the model `%s` does not exist: use %s<scenario> or put [scenario:<name>] in the trigger; scenarios: %s", req.Model, ModelPrefix, strings.Join(s.lib.Names(), ", "))
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "read the request body: "+err.Error())
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the request body is not Chat Completions JSON: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "messages must not be empty")
		return
	}
	rep, stall, ok := s.play(w, r, req, writeError)
	if !ok {
		return
	}
	u := s.openAIUsage("chat", req, rep)
	id := "chatcmpl-" + shortHash(body)
	if req.Stream {
		s.stream(w, r, req, id, rep, u, stall)
		return
	}
	if stall > 0 {
		_ = clock.Sleep(r.Context(), stall)
		panic(http.ErrAbortHandler) // the connection breaks without an answer
	}
	msg := responseMessage{Role: "assistant", ToolCalls: rep.calls}
	if rep.content != "" {
		msg.Content = &rep.content
	}
	writeJSON(w, http.StatusOK, chatResponse{ID: id, Object: "chat.completion", Created: s.now().Unix(), Model: req.Model,
		Choices: []choice{{Index: 0, Message: msg, FinishReason: rep.finish}}, Usage: u})
}

// play decides the reply to a conversation in the Chat Completions shape
// (the other wires convert to it): the scenario's next turn and the fault
// the step asks for. It answers the request itself when the
// fault is an error status or the request names no scenario (ok false).
func (s *Server) play(w http.ResponseWriter, r *http.Request, req chatRequest, fail failure) (rep reply, stall time.Duration, ok bool) {
	t := readTranscript(req.Messages)
	sc, err := s.scenarioFor(req, t)
	if err != nil {
		fail(w, http.StatusNotFound, "invalid_request_error", err.Error())
		return rep, 0, false
	}
	sess := sc.session(t.trigger)
	if sess == nil {
		fail(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("scenario %s has no session for this trigger and no default", sc.Name))
		return rep, 0, false
	}
	rep, st := sess.next(t)
	rep = expandTemplates(rep, s.now())

	if st != nil && st.Fault != nil && s.serveFault(st.Fault, sc.Name, req.Messages) {
		f := st.Fault
		if f.SlowFirstByte != "" {
			d, _ := time.ParseDuration(f.SlowFirstByte)
			if clock.Sleep(r.Context(), d) != nil {
				return rep, 0, false // the client went away
			}
		}
		switch f.Status {
		case http.StatusTooManyRequests:
			if f.RetryAfter > 0 {
				w.Header().Set("Retry-After", fmt.Sprint(f.RetryAfter))
			}
			fail(w, f.Status, "rate_limit_error", "Rate limit reached for requests (modelsim fault). Please try again later.")
			return rep, 0, false
		case 0:
		default:
			fail(w, f.Status, "server_error", "The server had an error while processing your request (modelsim fault).")
			return rep, 0, false
		}
		stall, _ = time.ParseDuration(f.Stall)
	}
	return rep, stall, true
}

// failure writes an error answer in a wire's shape.
type failure func(w http.ResponseWriter, status int, typ, msg string)

// serveFault reports whether the fault is still due for this exact request, and counts it.
// Retries resend the same messages, so a fault with Times 1 is served once and the retry passes.
func (s *Server) serveFault(f *Fault, scenario string, msgs []chatMessage) bool {
	b, _ := json.Marshal(msgs)
	key := scenario + "/" + shortHash(b)
	times := f.Times
	if times == 0 {
		times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.served[key] >= times {
		return false
	}
	s.served[key]++
	return true
}

// Token estimates: four bytes of text per token, the way a tokenizer roughly counts English,
// and a flat cost per image, as providers bill a phone screenshot.
const (
	bytesPerToken = 4
	imageTokens   = 765
)

// chatPrompt is a Chat Completions conversation as cache units: the tool
// definitions, then each message (its role, text, tool calls and the call
// it answers) followed by a unit per image. Text counts by its bytes, images
// by the flat cost (not their base64 size).
func chatPrompt(wire string, req chatRequest) *prompt {
	p := newPrompt(wire, req.Model, req.PromptCacheKey)
	if len(req.Tools) > 0 {
		p.add(textTokens(len(req.Tools)), false, req.Tools)
	}
	for _, m := range req.Messages {
		text := m.text()
		n := len(text)
		parts := [][]byte{[]byte(m.Role), []byte(m.ToolCallID), []byte(text)}
		for _, c := range m.ToolCalls {
			n += len(c.Function.Name) + len(c.Function.Arguments)
			parts = append(parts, []byte(c.ID), []byte(c.Function.Name), []byte(c.Function.Arguments))
		}
		p.add(textTokens(n), false, parts...)
		for _, url := range m.imageURLs() {
			p.add(imageTokens, false, []byte(url))
		}
	}
	return p
}

// completionTokens counts the reply as the prompt is counted.
func completionTokens(rep reply) int {
	out := len(rep.content)
	for _, c := range rep.calls {
		out += len(c.Function.Name) + len(c.Function.Arguments)
	}
	return textTokens(out)
}

// openAIUsage is the usage of a chat-shaped request with OpenAI's automatic
// prompt caching applied.
func (s *Server) openAIUsage(wire string, req chatRequest, rep reply) usage {
	p := chatPrompt(wire, req)
	in, out := p.tokens(), completionTokens(rep)
	cached := s.cache.openAI(p, s.now())
	return usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out, PromptTokensDetails: &promptTokensDetails{CachedTokens: cached}}
}

func shortHash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, apiError{Error: apiErrorBody{Message: msg, Type: typ}})
}
