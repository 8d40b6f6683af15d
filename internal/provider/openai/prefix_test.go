package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/provider"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

// TestChatPrefixStableAcrossTurns checks what OpenAI's automatic prompt
// caching needs: each request repeats the previous one's messages byte for
// byte up to the previous turn's screen result (which latest-screen
// compaction turns into a stub), and nothing that changes between requests
// (the pinned plan and scratchpad) comes before the transcript.
func TestChatPrefixStableAcrossTurns(t *testing.T) {
	const turns = 34
	a := New(Config{Options: provider.Options{Model: "gpt", APIKey: "k"}})
	encode := func(req *provider.Request) chatBody {
		raw, err := json.Marshal(a.encode(req, nil))
		if err != nil {
			t.Fatal(err)
		}
		var b chatBody
		if err := json.Unmarshal(nullContentForToolCalls(raw), &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	var prev chatBody
	for n, req := range pt.EngineSession(turns) {
		b := encode(req)
		var sys struct{ Role, Content string }
		_ = json.Unmarshal(b.Messages[0], &sys)
		if sys.Role != "system" || sys.Content != req.System {
			t.Fatalf("request %d: the first message is not the system prompt as given: %s", n, b.Messages[0])
		}
		pinnedFrom := len(b.Messages) - req.Pinned
		for i, m := range b.Messages[:pinnedFrom] {
			if strings.Contains(string(m), "[Pinned") || strings.Contains(string(m), "[Compaction after this turn") {
				t.Errorf("request %d: message %d, before the transcript's end, is pinned: %s", n, i, m)
			}
		}
		if n == 0 {
			prev = b
			continue
		}
		if string(b.Tools) != string(prev.Tools) {
			t.Errorf("request %d: the tools changed", n)
		}
		same := 0
		for same < len(prev.Messages) && same < len(b.Messages) && string(prev.Messages[same]) == string(b.Messages[same]) {
			same++
		}
		// The previous request's transcript is repeated up to the result
		// its screen came from: the peek result of its newest turn.
		want := len(prev.Messages) - reqPinned(prev)
		if n >= 2 {
			want = indexOfResult(t, prev.Messages, fmt.Sprintf("call_%d_1", n-2))
		}
		if n == compaction.FoldAt {
			want = 2 // the fold rewrites all after the opening message
		}
		if same != want {
			t.Errorf("request %d repeats the first %d messages of request %d, want %d; first difference:\n%s\nvs\n%s",
				n, same, n-1, want, prev.Messages[min(same, len(prev.Messages)-1)], b.Messages[min(same, len(b.Messages)-1)])
		}
		prev = b
	}
}

// chatBody is the part of a Chat Completions request the cache compares.
type chatBody struct {
	Messages []json.RawMessage `json:"messages"`
	Tools    json.RawMessage   `json:"tools"`
}

// reqPinned counts the pinned messages at the end of an encoded request.
func reqPinned(b chatBody) int {
	n := 0
	for i := len(b.Messages) - 1; i >= 0 && (strings.Contains(string(b.Messages[i]), "[Pinned") || strings.Contains(string(b.Messages[i]), "[Compaction after")); i-- {
		n++
	}
	return n
}

func indexOfResult(t *testing.T, msgs []json.RawMessage, callID string) int {
	t.Helper()
	for i, m := range msgs {
		var tm struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
		}
		if json.Unmarshal(m, &tm) == nil && tm.Role == "tool" && tm.ToolCallID == callID {
			return i
		}
	}
	t.Fatalf("no result for %s", callID)
	return -1
}

// TestResponsesPrefixStableAcrossTurns is the same check on the stateless
// Responses wire: the instructions are the system prompt alone and the
// tools never change, and each request's input repeats the previous one's
// items byte for byte up to the previous turn's screen result, so the
// provider's prompt cache serves the same share as on the chat wire. The
// pinned tail is the input's end, as on the chat wire; reasoning goes back
// as encrypted items without ids.
func TestResponsesPrefixStableAcrossTurns(t *testing.T) {
	const turns = 34
	a := New(Config{Options: provider.Options{Model: "gpt", APIKey: "k"}, API: APIResponses})
	type body struct {
		Instructions string            `json:"instructions"`
		Input        []json.RawMessage `json:"input"`
		Tools        json.RawMessage   `json:"tools"`
		Store        *bool             `json:"store"`
		Previous     string            `json:"previous_response_id"`
	}
	var prev body
	var prevPinned int
	for n, req := range pt.EngineSession(turns) {
		raw, err := json.Marshal(a.encodeStateless(req, nil))
		if err != nil {
			t.Fatal(err)
		}
		var b body
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		if b.Instructions != req.System || b.Store == nil || *b.Store || b.Previous != "" {
			t.Fatalf("request %d: instructions %q, store %v, previous %q; want the system prompt alone, store false, no previous response",
				n, b.Instructions, b.Store, b.Previous)
		}
		for i, it := range b.Input {
			pinned := i >= len(b.Input)-req.Pinned
			if isPinned := strings.Contains(string(it), "[Pinned") || strings.Contains(string(it), "[Compaction after this turn"); isPinned != pinned {
				t.Errorf("request %d: item %d pinned %v, want %v: %s", n, i, isPinned, pinned, it)
			}
			if strings.Contains(string(it), `"type":"reasoning"`) &&
				(strings.Contains(string(it), `"id"`) || !strings.Contains(string(it), `"encrypted_content":"enc-`)) {
				t.Errorf("request %d: reasoning item %s, want its encrypted content and no id", n, it)
			}
		}
		if n == 0 {
			prev, prevPinned = b, req.Pinned
			continue
		}
		if string(b.Tools) != string(prev.Tools) {
			t.Errorf("request %d: the tools changed", n)
		}
		same := 0
		for same < len(prev.Input) && same < len(b.Input) && string(prev.Input[same]) == string(b.Input[same]) {
			same++
		}
		want := len(prev.Input) - prevPinned
		if n >= 2 {
			want = indexOfOutput(t, prev.Input, fmt.Sprintf("call_%d_1", n-2))
		}
		if n == compaction.FoldAt {
			want = 1 // the fold rewrites all after the opening message
		}
		if same != want {
			t.Errorf("request %d repeats the first %d items of request %d, want %d; first difference:\n%s\nvs\n%s",
				n, same, n-1, want, prev.Input[min(same, len(prev.Input)-1)], b.Input[min(same, len(b.Input)-1)])
		}
		prev, prevPinned = b, req.Pinned
	}
}

func indexOfOutput(t *testing.T, items []json.RawMessage, callID string) int {
	t.Helper()
	for i, it := range items {
		var o struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		if json.Unmarshal(it, &o) == nil && o.Type == "function_call_output" && o.CallID == callID {
			return i
		}
	}
	t.Fatalf("no output for %s", callID)
	return -1
}
