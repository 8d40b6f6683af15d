package modelsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/clawfarm/clawfarm/internal/clock"
)

// argumentFragment is how many bytes of a tool call's arguments each stream chunk carries.
const argumentFragment = 16

// stream writes the reply as server-sent events: the role, then each tool call (its id and name,
// then its arguments in fragments), a final chunk with the finish reason, the usage chunk if
// asked for, and [DONE]. A stall stops after the first chunks, waits, and breaks the connection.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req chatRequest, id string, rep reply, u usage, stall time.Duration) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := s.now().Unix()
	send := func(c chatChunk) {
		c.ID, c.Object, c.Created, c.Model = id, "chat.completion.chunk", created, req.Model
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	one := func(d delta, finish *string) chatChunk {
		return chatChunk{Choices: []chunkChoice{{Index: 0, Delta: d, FinishReason: finish}}}
	}
	empty := ""
	send(one(delta{Role: "assistant", Content: &empty}, nil))
	if stall > 0 {
		_ = clock.Sleep(r.Context(), stall)
		panic(http.ErrAbortHandler)
	}
	if rep.content != "" {
		for _, frag := range fragments(rep.content) {
			send(one(delta{Content: &frag}, nil))
		}
	}
	for i, c := range rep.calls {
		idx := i
		send(one(delta{ToolCalls: []toolCall{{Index: &idx, ID: c.ID, Type: "function", Function: functionCall{Name: c.Function.Name}}}}, nil))
		for _, frag := range fragments(c.Function.Arguments) {
			send(one(delta{ToolCalls: []toolCall{{Index: &idx, Function: functionCall{Arguments: frag}}}}, nil))
		}
	}
	finish := rep.finish
	send(one(delta{}, &finish))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(chatChunk{Choices: []chunkChoice{}, Usage: &u})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func fragments(s string) []string {
	var out []string
	r := []rune(s)
	for len(r) > argumentFragment {
		out = append(out, string(r[:argumentFragment]))
		r = r[argumentFragment:]
	}
	if len(r) > 0 {
		out = append(out, string(r))
	}
	return out
}
