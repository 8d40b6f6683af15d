package openai_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
)

// responsesServer is a Responses API service that stores each response's
// conversation (the items before it, its input, its output), the way the
// service does, so a test can read the conversation a request continued.
type responsesServer struct {
	mu      sync.Mutex
	stored  map[string][]json.RawMessage
	n       int
	reqs    []responsesCall
	failure func(n int, w http.ResponseWriter) bool // answers instead when true
	action  func(n int) (name, args string)         // the second call of reply n; nil: peek
}

// responsesCall is one request as the service saw it.
type responsesCall struct {
	previous     string
	instructions string
	input        []json.RawMessage
	store        bool
	include      []string
	conversation []json.RawMessage // what the model was given: the stored items, then input
	notFound     bool
}

func newResponsesServer(t *testing.T) (*responsesServer, *httptest.Server) {
	rs := &responsesServer{stored: map[string][]json.RawMessage{}}
	srv := httptest.NewServer(http.HandlerFunc(rs.serve))
	t.Cleanup(srv.Close)
	return rs, srv
}

func (rs *responsesServer) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Instructions string            `json:"instructions"`
		Input        []json.RawMessage `json:"input"`
		Previous     string            `json:"previous_response_id"`
		Store        *bool             `json:"store"`
		Include      []string          `json:"include"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil || r.URL.Path != "/v1/responses" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.n++
	call := responsesCall{previous: body.Previous, instructions: body.Instructions, input: body.Input,
		store: body.Store == nil || *body.Store, include: body.Include}
	prior, ok := rs.stored[body.Previous]
	if body.Previous != "" && !ok {
		call.notFound = true
		rs.reqs = append(rs.reqs, call)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"Previous response with id '%s' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`, body.Previous)
		return
	}
	call.conversation = append(append([]json.RawMessage(nil), prior...), body.Input...)
	rs.reqs = append(rs.reqs, call)
	if rs.failure != nil && rs.failure(rs.n, w) {
		return
	}
	id := fmt.Sprintf("resp_%d", rs.n)
	name, args := "peek", "{}"
	if rs.action != nil {
		name, args = rs.action(rs.n)
	}
	out := []json.RawMessage{
		json.RawMessage(fmt.Sprintf(`{"type":"reasoning","id":"rs_%d","summary":[{"type":"summary_text","text":"thought %d"}],"encrypted_content":"enc%d"}`, rs.n, rs.n, rs.n)),
		json.RawMessage(fmt.Sprintf(`{"type":"function_call","id":"fc_%d_0","call_id":"n%d","name":"note","arguments":"{\"summary\":\"turn %d\"}","status":"completed"}`, rs.n, rs.n, rs.n)),
		json.RawMessage(fmt.Sprintf(`{"type":"function_call","id":"fc_%d_1","call_id":"p%d","name":%q,"arguments":%q,"status":"completed"}`, rs.n, rs.n, name, args)),
	}
	if call.store {
		rs.stored[id] = append(call.conversation, out...)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s) }
	ev(fmt.Sprintf(`{"type":"response.created","response":{"id":%q,"status":"in_progress","output":[]}}`, id))
	ev(fmt.Sprintf(`{"type":"response.reasoning_summary_text.delta","delta":"thought %d"}`, rs.n))
	for i, it := range out {
		ev(fmt.Sprintf(`{"type":"response.output_item.done","output_index":%d,"item":%s}`, i, it))
	}
	ev(fmt.Sprintf(`{"type":"response.completed","response":{"id":%q,"status":"completed","output":[],"usage":{"input_tokens":900,"input_tokens_details":{"cached_tokens":700},"output_tokens":30,"total_tokens":930}}}`, id))
}

func (rs *responsesServer) last() responsesCall {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.reqs[len(rs.reqs)-1]
}

func (rs *responsesServer) forget() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.stored = map[string][]json.RawMessage{}
}

// responsesAdapter is the adapter on one of the two Responses wires.
func responsesAdapter(url, api string) *openai.Adapter {
	return openai.New(openai.Config{Options: provider.Options{BaseURL: url + "/v1", APIKey: "k", Model: "m",
		IdleTimeout: time.Second}, API: api})
}

// itemKey is what the model reads of an item, so a conversation the
// service rebuilt can be compared with the one the chat wire would send.
func itemKey(t *testing.T, raw json.RawMessage) string {
	var it struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Role      string `json:"role"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Output    string `json:"output"`
		Content   []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL string `json:"image_url"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		t.Fatalf("item %s: %v", raw, err)
	}
	if it.Type == "reasoning" {
		return "reasoning " + it.ID
	}
	s := fmt.Sprintf("%s|%s|%s|%s|%s|%s", it.Type, it.Role, it.CallID, it.Name, it.Arguments, it.Output)
	for _, c := range it.Content {
		s += "|" + c.Type + ":" + c.Text + c.ImageURL
	}
	return s
}

func keys(t *testing.T, items []json.RawMessage) []string {
	var out []string
	for _, it := range items {
		out = append(out, itemKey(t, it))
	}
	return out
}

// session plays turns the way the engine does: a pinned tail on every
// request, each reply's calls answered, a fresh screen after them, the
// latest-screen policy applied before the next request.
type session struct {
	t          *testing.T
	a          *openai.Adapter
	transcript []provider.Message
	turn       int
}

func (s *session) ask() *provider.Reply {
	s.t.Helper()
	s.turn++
	tail := provider.Message{Role: provider.RoleUser, Text: fmt.Sprintf("[plan] step %d in progress", s.turn)}
	msgs := append(s.transcript[:len(s.transcript):len(s.transcript)], tail)
	reply, err := s.a.Stream(context.Background(), &provider.Request{System: "sys", Messages: msgs, Pinned: 1,
		Tools: []provider.ToolSpec{{Name: "peek", Schema: json.RawMessage(`{"type":"object"}`)}}}, nil)
	if err != nil {
		s.t.Fatalf("turn %d: %v", s.turn, err)
	}
	s.transcript = append(s.transcript, reply.Message)
	for _, c := range reply.Message.ToolCalls {
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleTool, ToolCallID: c.ID, ToolName: c.Name,
			Text: fmt.Sprintf("%s done\n0 [text] \"Screen %d\" [0.1,0.1,0.2,0.2] 0.9", c.Name, s.turn)})
	}
	s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: "The screen after peek:",
		Images: []*provider.Image{provider.NewImage("image/jpeg", []byte(fmt.Sprintf("jpeg of screen %d", s.turn)))}})
	s.transcript, _ = compaction.LatestScreen(s.transcript)
	return reply
}

// The chain: a request continues from the newest stored response that the
// transcript still starts with and sends only the rest. The service's
// conversation is what the chat wire would send, but for the superseded
// screens it keeps (at most StaleScreens; one more and the chain starts
// over); a fold starts it over; the pinned tail rides in instructions,
// outside the chain; a resumed attempt continues the chain it saved; a
// chain the service lost starts over once.
func TestResponsesChainFollowsTheTranscript(t *testing.T) {
	rs, srv := newResponsesServer(t)
	newAdapter := func() *openai.Adapter {
		return openai.New(openai.Config{Options: provider.Options{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m",
			IdleTimeout: time.Second}, API: openai.APIResponsesChained, StaleScreens: 2})
	}
	s := &session{t: t, a: newAdapter(), transcript: []provider.Message{{Role: provider.RoleUser, Text: "set a timer"}}}
	turn := func(wantPrevious string, wantInput int) {
		t.Helper()
		request := append([]provider.Message(nil), s.transcript...)
		s.ask()
		c := rs.last()
		if c.previous != wantPrevious || wantInput > 0 && len(c.input) != wantInput {
			t.Errorf("turn %d: previous_response_id %q with %d items, want %q with %d", s.turn, c.previous, len(c.input), wantPrevious, wantInput)
		}
		// What the model sees, rebuilt from the service's conversation,
		// is the transcript once the latest-screen policy has run over it.
		seen, _ := compaction.LatestScreen(decodeItems(t, c.conversation))
		got, want := keys(t, rawItems(t, seen)), keys(t, rawItems(t, request))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("turn %d: the service's conversation, compacted\n%s\nwant the transcript\n%s", s.turn, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if stale := screens(decodeItems(t, c.conversation)) - 1; stale > 2 {
			t.Errorf("turn %d: the service holds %d superseded screens, want at most 2", s.turn, stale)
		}
		if !strings.HasPrefix(c.instructions, "sys") || !strings.Contains(c.instructions, fmt.Sprintf("[plan] step %d", s.turn)) {
			t.Errorf("turn %d: instructions %q, want the system prompt and the pinned tail", s.turn, c.instructions)
		}
		for _, it := range c.input {
			if strings.Contains(string(it), "[plan]") {
				t.Errorf("turn %d: the pinned tail went into the chain: %s", s.turn, it)
			}
		}
	}

	turn("", 1)
	if r := s.transcript[1]; len(r.ReasoningItems) != 1 || r.Reasoning != "thought 1" {
		t.Fatalf("reply %+v: want the reasoning item and its summary", r)
	}
	turn("resp_1", 3) // two results and the screen
	turn("resp_2", 3) // the first screen superseded: the service keeps it
	turn("resp_3", 3)
	turn("", 0) // a third superseded screen: the chain starts over
	if in := rs.last().input; !strings.Contains(string(in[1]), `"encrypted_content":"enc1"`) {
		t.Errorf("the new chain did not carry turn 1's reasoning item verbatim: %s", in[1])
	}
	turn("resp_5", 3)

	// A fold rewrites the head: no stored response fits.
	s.transcript = append([]provider.Message{s.transcript[0], {Role: provider.RoleUser, Text: compaction.FoldHeader + "\n- turn 1"}},
		s.transcript[len(s.transcript)-4:]...)
	turn("", 0)

	// A resumed attempt continues the chain it saved.
	saved := s.a.ChainState()
	s.a = newAdapter()
	if err := s.a.RestoreChain(saved); err != nil {
		t.Fatal(err)
	}
	turn(fmt.Sprintf("resp_%d", rs.n), 3)

	// The service lost the chain (expiry): one "not found", then the whole transcript.
	rs.forget()
	before := len(rs.reqs)
	turn("", 0)
	if calls := rs.reqs[before:]; len(calls) != 2 || !calls[0].notFound {
		t.Fatalf("after the service lost the chain: %d requests, want a not-found then a new chain", len(calls))
	}
}

// decodeItems reads a conversation back into messages.
func decodeItems(t *testing.T, items []json.RawMessage) []provider.Message {
	var out []provider.Message
	names := map[string]string{}
	for _, raw := range items {
		var it struct {
			Type      string `json:"type"`
			Role      string `json:"role"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Output    string `json:"output"`
			Content   []struct {
				Type     string `json:"type"`
				Text     string `json:"text"`
				ImageURL string `json:"image_url"`
			} `json:"content"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			t.Fatal(err)
		}
		assistant := func() *provider.Message {
			if n := len(out); n > 0 && out[n-1].Role == provider.RoleAssistant {
				return &out[n-1]
			}
			out = append(out, provider.Message{Role: provider.RoleAssistant})
			return &out[len(out)-1]
		}
		switch it.Type {
		case "reasoning":
			a := assistant()
			a.ReasoningItems = append(a.ReasoningItems, raw)
		case "function_call":
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, provider.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
			names[it.CallID] = it.Name
		case "function_call_output":
			out = append(out, provider.Message{Role: provider.RoleTool, ToolCallID: it.CallID, ToolName: names[it.CallID], Text: it.Output})
		case "message":
			m := provider.Message{Role: provider.Role(it.Role)}
			if it.Role == "assistant" {
				m = *assistant()
				out = out[:len(out)-1]
			}
			for _, c := range it.Content {
				switch c.Type {
				case "input_image":
					data, _ := strings.CutPrefix(c.ImageURL, "data:image/jpeg;base64,")
					b, _ := base64.StdEncoding.DecodeString(data)
					m.Images = append(m.Images, provider.NewImage("image/jpeg", b))
				default:
					m.Text += c.Text
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func screens(msgs []provider.Message) int {
	n := 0
	for _, m := range msgs {
		if len(m.Images) > 0 {
			n++
		}
	}
	return n
}

func rawItems(t *testing.T, msgs []provider.Message) []json.RawMessage {
	var out []json.RawMessage
	for _, it := range openai.EncodeItems(msgs) {
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// The stateless wire (the default): the service keeps nothing, so every
// request is the chat wire's request — the whole compacted transcript,
// superseded screens stubbed, then the pinned tail — with the system prompt
// alone as instructions, store false and the reasoning asked for encrypted
// and sent back as encrypted reasoning items. No request names a stored
// response or item, and none carries a superseded screen.
func TestResponsesStateless(t *testing.T) {
	rs, srv := newResponsesServer(t)
	s := &session{t: t, a: responsesAdapter(srv.URL, openai.APIResponses), transcript: []provider.Message{{Role: provider.RoleUser, Text: "go"}}}
	for range 6 {
		req := append([]provider.Message(nil), s.transcript...)
		s.ask()
		c := rs.last()
		if c.store || c.previous != "" || len(c.include) != 1 || c.include[0] != "reasoning.encrypted_content" {
			t.Errorf("turn %d: store %v previous %q include %v; want store false, no previous response, encrypted reasoning", s.turn, c.store, c.previous, c.include)
		}
		if c.instructions != "sys" {
			t.Errorf("turn %d: instructions %q, want the system prompt alone", s.turn, c.instructions)
		}
		tail := provider.Message{Role: provider.RoleUser, Text: fmt.Sprintf("[plan] step %d in progress", s.turn)}
		want := statelessItems(t, append(req, tail))
		if got := c.input; len(got) != len(want) || strings.Join(rawStrings(got), "\n") != strings.Join(rawStrings(want), "\n") {
			t.Errorf("turn %d: input\n%s\nwant the chat wire's request\n%s", s.turn, strings.Join(rawStrings(got), "\n"), strings.Join(rawStrings(want), "\n"))
		}
		if n := screens(decodeItems(t, c.input)); n > 1 {
			t.Errorf("turn %d: the request carries %d screens, want the newest only", s.turn, n)
		}
		for _, it := range c.input {
			if strings.Contains(string(it), `"id"`) {
				t.Errorf("turn %d: an item names a stored item: %s", s.turn, it)
			}
		}
		if s.turn > 1 && !strings.Contains(string(c.input[1]), `{"type":"reasoning","summary":[{"type":"summary_text","text":"thought 1"}],"encrypted_content":"enc1"}`) {
			t.Errorf("turn %d: turn 1's reasoning went back as %s, want its summary and encrypted content", s.turn, c.input[1])
		}
	}
	if st := s.a.ChainState(); st != nil {
		t.Errorf("chain state on the stateless wire: %s", st)
	}
}

// A reasoning item without encrypted content cannot go back without a
// stored response: the stateless wire leaves it out, the chained wire
// sends it as it came.
func TestStatelessReasoningNeedsEncryptedContent(t *testing.T) {
	msgs := []provider.Message{{Role: provider.RoleAssistant, ReasoningItems: []json.RawMessage{
		json.RawMessage(`{"type":"reasoning","id":"rs_1","summary":[]}`),
		json.RawMessage(`{"type":"reasoning","id":"rs_2","encrypted_content":"e2"}`)},
		ToolCalls: []provider.ToolCall{{ID: "c1", Name: "peek", Arguments: "{}"}}}}
	got := strings.Join(rawStrings(statelessItems(t, msgs)), "\n")
	want := `{"type":"reasoning","summary":[],"encrypted_content":"e2"}` + "\n" + `{"type":"function_call","call_id":"c1","name":"peek","arguments":"{}"}`
	if got != want {
		t.Errorf("stateless items\n%s\nwant\n%s", got, want)
	}
	if chained := rawStrings(rawItems(t, msgs)); len(chained) != 3 || chained[0] != `{"type":"reasoning","id":"rs_1","summary":[]}` {
		t.Errorf("chained items %v, want the reasoning items verbatim", chained)
	}
}

func statelessItems(t *testing.T, msgs []provider.Message) []json.RawMessage {
	var out []json.RawMessage
	for _, it := range openai.EncodeStatelessItems(msgs) {
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func rawStrings(items []json.RawMessage) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it)
	}
	return out
}

// The service's errors land in the engine's classes, on the HTTP answer
// and inside the stream, on both Responses wires.
func TestResponsesErrorClasses(t *testing.T) {
	for _, api := range []string{openai.APIResponses, openai.APIResponsesChained} {
		responsesErrorClasses(t, api)
	}
}

func responsesErrorClasses(t *testing.T, api string) {
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		want   provider.ErrorClass
	}{
		{"429", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		}, provider.ClassRateLimit},
		{"context length", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}`)
		}, provider.ClassContextOverflow},
		{"auth", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`)
		}, provider.ClassAuth},
		{"invalid request", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"Invalid type for 'input[2].output'","type":"invalid_request_error","code":"invalid_type"}}`)
		}, provider.ClassInvalidRequest},
		{"overloaded in the stream", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The server had an error\"}\n\n")
		}, provider.ClassOverloaded},
		{"rate limit in response.failed", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"type\":\"response.failed\",\"response\":{\"id\":\"r\",\"status\":\"failed\",\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}}}\n\n")
		}, provider.ClassRateLimit},
		{"stream cut before completed", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n")
		}, provider.ClassTimeout},
	} {
		t.Run(api+"/"+c.name, func(t *testing.T) {
			rs, srv := newResponsesServer(t)
			rs.failure = func(_ int, w http.ResponseWriter) bool { c.answer(w); return true }
			_, err := responsesAdapter(srv.URL, api).Stream(context.Background(), simpleReq(), nil)
			if pe := provider.AsError(err); err == nil || pe.Class != c.want {
				t.Fatalf("error %v, want class %s", err, c.want)
			}
		})
	}
}
