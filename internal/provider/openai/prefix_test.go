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
