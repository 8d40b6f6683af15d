package anthropic_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/anthropic"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

// flatBlock is one content block of an encoded request, with the message it
// is in and whether it carries a cache breakpoint; body is its JSON without
// the cache_control, what the cache compares.
type flatBlock struct {
	msg        int
	role, body string
	typ, id    string
	breakpoint bool
}

func flatten(t *testing.T, body []byte) (system bool, blocks []flatBlock) {
	t.Helper()
	var r struct {
		System   []map[string]any `json:"system"`
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	for _, b := range r.System {
		if b["cache_control"] != nil {
			system = true
		}
	}
	for i, m := range r.Messages {
		for _, b := range m.Content {
			_, bp := b["cache_control"]
			delete(b, "cache_control")
			j, _ := json.Marshal(b)
			id, _ := b["tool_use_id"].(string)
			typ, _ := b["type"].(string)
			blocks = append(blocks, flatBlock{msg: i, role: m.Role, body: string(j), typ: typ, id: id, breakpoint: bp})
		}
	}
	return system, blocks
}

func TestCacheBreakpointsFollowTheStablePrefix(t *testing.T) {
	const turns = 34
	a := anthropic.New(anthropic.Config{Options: provider.Options{Model: "claude"}, ThinkingBudget: 1024})
	reqs := pt.EngineSession(turns)
	var (
		prev     []flatBlock
		prevHead string
		folds    int
	)
	for n, req := range reqs {
		body, err := a.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		system, blocks := flatten(t, body)
		if !system {
			t.Fatalf("request %d: the system prompt has no breakpoint", n)
		}
		var bps []int
		for i, b := range blocks {
			if b.breakpoint {
				bps = append(bps, i)
			}
		}
		if 1+len(bps) > 4 {
			t.Fatalf("request %d: %d breakpoints, the API allows 4", n, 1+len(bps))
		}
		// The pinned tail is the last text blocks of the last message.
		pinnedFrom := len(blocks) - req.Pinned
		for _, i := range bps {
			b := blocks[i]
			if i >= pinnedFrom {
				t.Errorf("request %d: a breakpoint on the pinned tail: %s", n, b.body)
			}
			if b.typ == "image" {
				t.Errorf("request %d: a breakpoint on a screen", n)
			}
		}

		// Where they are: the head's end, the previous turn's last result
		// (its peek, a stub by now), the newest turn's note result (its
		// peek result becomes a stub once the next screen arrives).
		headEnd, head := 0, blocks[0].body
		for headEnd+1 < pinnedFrom && blocks[headEnd+1].msg == 0 {
			headEnd++
			head += blocks[headEnd].body
		}
		want := []string{fmt.Sprintf("head %d", headEnd)}
		if n >= 2 {
			want = append(want, fmt.Sprintf("call_%d_1", n-2))
		}
		if n >= 1 {
			want = append(want, fmt.Sprintf("call_%d_0", n-1))
		}
		var got []string
		for _, i := range bps {
			if blocks[i].typ == "tool_result" {
				got = append(got, blocks[i].id)
			} else {
				got = append(got, fmt.Sprintf("head %d", i))
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("request %d: breakpoints at %v, want %v", n, got, want)
		}
		if n >= 2 && !strings.Contains(blocks[bps[1]].body, provider.SupersededTag) {
			t.Errorf("request %d: the previous turn's result is not final yet: %s", n, blocks[bps[1]].body)
		}

		// The previous request's newest breakpoint ends a prefix this one
		// sends unchanged, within the 20 blocks a breakpoint looks back.
		if prev != nil && head != prevHead {
			// The fold rewrote the head: nothing after the system prompt can be read.
			folds++
			if n != compaction.FoldAt || !strings.Contains(blocks[headEnd].body, compaction.FoldHeader) {
				t.Errorf("request %d: the head changed without the fold", n)
			}
			prev, prevHead = blocks, head
			continue
		}
		if prev != nil {
			q := -1
			for i, b := range prev {
				if b.breakpoint {
					q = i
				}
			}
			for i := 0; i <= q; i++ {
				if i >= len(blocks) || blocks[i].msg != prev[i].msg || blocks[i].role != prev[i].role || blocks[i].body != prev[i].body {
					t.Fatalf("request %d: block %d differs from request %d's before its newest breakpoint (block %d):\n%s\nvs\n%s",
						n, i, n-1, q, prev[i].body, blocks[min(i, len(blocks)-1)].body)
				}
			}
			read := false
			for _, p := range bps {
				if p >= q && p-q < 20 {
					read = true
				}
			}
			if !read {
				t.Errorf("request %d: no breakpoint within 20 blocks after block %d, the previous request's newest", n, q)
			}
		}
		prev, prevHead = blocks, head
	}
	if folds != 1 {
		t.Errorf("%d folds in %d turns, want 1 at turn %d", folds, turns, compaction.FoldAt)
	}
}

func TestCacheBreakpointsOfShortTranscripts(t *testing.T) {
	a := anthropic.New(anthropic.Config{Options: provider.Options{Model: "claude"}})
	for _, c := range []struct {
		name string
		req  *provider.Request
		want int
	}{
		{"opening only", &provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "go"}}}, 1},
		{"pinned only", &provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "plan"}}, Pinned: 1}, 0},
		{"a turn without results", &provider.Request{Messages: []provider.Message{
			{Role: provider.RoleUser, Text: "go"}, {Role: provider.RoleAssistant, Text: "hi"}, {Role: provider.RoleUser, Text: "use tools"}}}, 1},
	} {
		body, err := a.Encode(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(body), `"cache_control"`); got != c.want {
			t.Errorf("%s: %d breakpoints, want %d: %s", c.name, got, c.want, body)
		}
	}
}
