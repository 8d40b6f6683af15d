// Package providertest has in-process scripted model servers for tests and
// benchmarks: an OpenAI-compatible Chat Completions server (SSE or plain
// JSON) and an Anthropic Messages server. Each request is answered by the
// next Step of a script.
package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"sync"
	"time"
)

// Call is a scripted tool call.
type Call struct {
	ID, Name, Args string
	// NoIndex leaves the index out of the stream deltas (some servers do).
	NoIndex bool
}

// Step is one scripted answer.
type Step struct {
	Text      string
	Reasoning string // Anthropic: a thinking block; OpenAI: reasoning_content
	Calls     []Call
	Finish    string // default: tool_calls when there are calls, else stop (Anthropic: tool_use / end_turn)

	// A failure instead of a reply.
	Status     int
	ErrType    string
	ErrMessage string
	RetryAfter string

	// Stall sends the first chunk and then nothing until the client gives up.
	Stall bool
	// JSON answers with a plain JSON body even to a streaming request.
	JSON bool

	PromptTokens, CompletionTokens, CachedTokens int
	// CacheWriteTokens are reported as Anthropic's cache_creation_input_tokens.
	CacheWriteTokens int
}

// Script picks the answer to request n (from 0) with the given body.
type Script func(n int, body []byte) Step

// Steps scripts a fixed list; past its end it repeats the last step.
func Steps(steps ...Step) Script {
	return func(n int, _ []byte) Step {
		if n >= len(steps) {
			n = len(steps) - 1
		}
		return steps[n]
	}
}

// Server is a scripted model server.
type Server struct {
	*httptest.Server
	script Script
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	keep   bool
}

func newServer(script Script, keepBodies bool, h func(s *Server, w http.ResponseWriter, r *http.Request, st Step, stream bool)) *Server {
	s := &Server{script: script, keep: keepBodies}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.heads)
		s.heads = append(s.heads, r.Header.Clone())
		if s.keep {
			s.bodies = append(s.bodies, body)
		} else {
			s.bodies = append(s.bodies, nil)
		}
		s.mu.Unlock()
		var probe struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(body, &probe)
		st := s.script(n, body)
		if st.Status != 0 {
			if st.RetryAfter != "" {
				w.Header().Set("Retry-After", st.RetryAfter)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(st.Status)
			h(s, w, r, st, false)
			return
		}
		h(s, w, r, st, probe.Stream && !st.JSON)
	}))
	return s
}

// Requests is how many requests arrived.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heads)
}

// Body is request n's body (kept only when the server keeps bodies).
func (s *Server) Body(n int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[n]
}

// Header is request n's headers.
func (s *Server) Header(n int) http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads[n]
}

func sse(w http.ResponseWriter) func(event string, v any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return func(event string, v any) {
		if event != "" {
			fmt.Fprintf(w, "event: %s\n", event)
		}
		b, _ := json.Marshal(v)
		if s, ok := v.(string); ok {
			b = []byte(s)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
}

func stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(30 * time.Second):
	}
}

func halves(s string) (string, string) {
	if len(s) < 2 {
		return s, ""
	}
	return s[:len(s)/2], s[len(s)/2:]
}

func chunks(s string, n int) []string {
	if s == "" {
		return nil
	}
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}
