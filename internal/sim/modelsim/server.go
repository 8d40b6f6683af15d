// Package modelsim is an OpenAI-compatible server that plays scripted scenarios against a
// rig, on both OpenAI wires (Chat Completions, and the Responses API with its stored
// responses): each reply is the [note, one-other] turn the script's next step asks for,
// resolved against the newest element listing in the conversation. The script's progress is
// read from the conversation, so one server serves a whole farm; the scenario comes from the
// model name ("sim/timer") or a marker in the trigger ("[scenario:timer]").
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
}

// NewServer serves lib.
func NewServer(lib Library) *Server {
	return &Server{lib: lib, now: time.Now, served: map[string]int{}, kept: map[string]storedResponse{}}
}

// Handler serves POST /v1/chat/completions, POST /v1/responses and GET /v1/models.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("GET /v1/models", s.models)
	return mux
}

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
	rep, u, stall, ok := s.play(w, r, req)
	if !ok {
		return
	}
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
// (the Responses wire converts to it): the scenario's next turn, its usage,
// and the fault the step asks for. It answers the request itself when the
// fault is an error status or the request names no scenario (ok false).
func (s *Server) play(w http.ResponseWriter, r *http.Request, req chatRequest) (rep reply, u usage, stall time.Duration, ok bool) {
	t := readTranscript(req.Messages)
	sc, err := s.scenarioFor(req, t)
	if err != nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", err.Error())
		return rep, u, 0, false
	}
	sess := sc.session(t.trigger)
	if sess == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("scenario %s has no session for this trigger and no default", sc.Name))
		return rep, u, 0, false
	}
	rep, st := sess.next(t)
	rep = expandTemplates(rep, s.now())

	if st != nil && st.Fault != nil && s.serveFault(st.Fault, sc.Name, req.Messages) {
		f := st.Fault
		if f.SlowFirstByte != "" {
			d, _ := time.ParseDuration(f.SlowFirstByte)
			if clock.Sleep(r.Context(), d) != nil {
				return rep, u, 0, false // the client went away
			}
		}
		switch f.Status {
		case http.StatusTooManyRequests:
			if f.RetryAfter > 0 {
				w.Header().Set("Retry-After", fmt.Sprint(f.RetryAfter))
			}
			writeError(w, f.Status, "rate_limit_error", "Rate limit reached for requests (modelsim fault). Please try again later.")
			return rep, u, 0, false
		case 0:
		default:
			writeError(w, f.Status, "server_error", "The server had an error while processing your request (modelsim fault).")
			return rep, u, 0, false
		}
		stall, _ = time.ParseDuration(f.Stall)
	}
	return rep, usageOf(req, rep), stall, true
}

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

// usageOf estimates the tokens of a request and its reply: text, tool calls and the tool
// definitions count by their bytes, images by the flat cost (not their base64 size).
func usageOf(req chatRequest, rep reply) usage {
	in := len(req.Tools)
	images := 0
	for _, m := range req.Messages {
		in += len(m.text())
		images += m.images()
		for _, c := range m.ToolCalls {
			in += len(c.Function.Name) + len(c.Function.Arguments)
		}
	}
	out := len(rep.content)
	for _, c := range rep.calls {
		out += len(c.Function.Name) + len(c.Function.Arguments)
	}
	p := (in+bytesPerToken-1)/bytesPerToken + images*imageTokens
	c := (out + bytesPerToken - 1) / bytesPerToken
	return usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c, PromptTokensDetails: &promptTokensDetails{}}
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
