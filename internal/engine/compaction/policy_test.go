package compaction

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// session builds a transcript of n turns: [note, action] with the results,
// and a screen after every action. Turn 3 reads memory, turn 5 loads a skill.
func session(n int) []provider.Message {
	msgs := []provider.Message{{Role: provider.RoleUser, Text: "open Settings"}}
	for i := 1; i <= n; i++ {
		action, text := "tap", fmt.Sprintf("Tapped at bbox %d\nscreen: changed\nhint: ok\nid [kind] \"label\" [l,t,r,b] conf\n0 [text] \"Label %d\" [0.1,0.1,0.2,0.2] 0.9\n1 [icon] \"\" [0.3,0.3,0.4,0.4] 0.8", i, i)
		switch i {
		case 3:
			action, text = "read_memory", "memory.md:\n- passcode hint: birthday"
		case 5:
			action, text = "Skill", "skill wifi:\nSettings → Wi-Fi"
		}
		msgs = append(msgs,
			provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{
				{ID: fmt.Sprintf("n%d", i), Name: "note", Arguments: fmt.Sprintf(`{"summary":"turn %d summary"}`, i)},
				{ID: fmt.Sprintf("a%d", i), Name: action, Arguments: `{}`}}},
			provider.Message{Role: provider.RoleTool, ToolCallID: fmt.Sprintf("n%d", i), ToolName: "note", Text: "noted"},
			provider.Message{Role: provider.RoleTool, ToolCallID: fmt.Sprintf("a%d", i), ToolName: action, Text: text})
		if action == "tap" {
			msgs = append(msgs, provider.Message{Role: provider.RoleUser, Text: "The screen after tap:",
				Images: []*provider.Image{provider.NewImage("image/jpeg", []byte{byte(i)})}})
		}
	}
	return msgs
}

func pairingOK(t *testing.T, msgs []provider.Message) {
	t.Helper()
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == provider.RoleTool {
			t.Fatalf("message %d: a result that follows no call", i)
		}
		for k, c := range m.ToolCalls {
			if r := msgs[i+1+k]; r.Role != provider.RoleTool || r.ToolCallID != c.ID {
				t.Fatalf("call %s not answered right after it", c.ID)
			}
		}
		i += len(m.ToolCalls)
	}
}

func turnsIn(msgs []provider.Message) int { _, t := split(msgs); return len(t) }

func TestLatestScreenWins(t *testing.T) {
	in := session(4) // screens after turns 1, 2, 4
	out, changed := LatestScreen(in)
	if !changed {
		t.Fatal("nothing changed")
	}
	var images int
	for _, m := range out {
		images += len(m.Images)
	}
	if images != 1 || len(out[len(out)-1].Images) != 1 {
		t.Fatalf("%d images left; the newest screen must keep its image", images)
	}
	stub := out[3].Text // turn 1's tap result
	want := "(superseded tap) Tapped at bbox 1\nlabels: \"Label 1\""
	if stub != want {
		t.Fatalf("stub %q, want %q", stub, want)
	}
	if len(out) != len(in)-2 {
		t.Errorf("the two old screen messages should be gone: %d → %d", len(in), len(out))
	}
	pairingOK(t, out)
	if in[4].Images == nil {
		t.Error("the input was modified")
	}
	again, changed := LatestScreen(out)
	if changed || len(again) != len(out) {
		t.Error("a second pass changed a compacted transcript")
	}
}

func TestFoldPoints(t *testing.T) {
	ctx := context.Background()
	p := Policy{}
	msgs := session(29)
	out, _, _ := p.Compact(ctx, BeforeRequest, 29, msgs)
	if turnsIn(out) != 29 {
		t.Fatalf("folded at 29 turns: %d left", turnsIn(out))
	}
	if p.Nudge(out) == "" || !strings.Contains(p.Nudge(out), "scratchpad") {
		t.Error("no scratchpad nudge in the turn before the fold")
	}
	if p.Nudge(session(28)) != "" {
		t.Error("nudged two turns before the fold")
	}
	out, changed, _ := p.Compact(ctx, BeforeRequest, 30, session(30))
	if !changed || turnsIn(out) != KeepTurns {
		t.Fatalf("at 30 turns: %d left, want %d", turnsIn(out), KeepTurns)
	}
	pairingOK(t, out)
	fold := out[1].Text
	if out[0].Text != "open Settings" || !strings.HasPrefix(fold, FoldHeader) {
		t.Fatalf("the fold message is not right after the opening one: %q", fold)
	}
	sums, mems, skills := parseFold(fold)
	if len(sums) != 20 || sums[0] != "- turn 1 summary" || sums[19] != "- turn 20 summary" {
		t.Fatalf("summaries %q", sums)
	}
	if len(mems) != 1 || mems[0] != "memory.md:\n- passcode hint: birthday" || len(skills) != 1 || skills[0] != "skill wifi:\nSettings → Wi-Fi" {
		t.Fatalf("loads: memory %q skills %q", mems, skills)
	}
	// The next fold comes 20 turns later: add turns 31..49, no fold; 50, fold.
	more := session(50)[len(session(30)):]
	cur := out
	for i := 0; i < 20; i++ {
		// each turn is 4 messages (assistant, two results, screen)
		cur = append(append([]provider.Message(nil), cur...), more[i*4:i*4+4]...)
		next, _, _ := p.Compact(ctx, BeforeRequest, 31+i, cur)
		if i < 19 && turnsIn(next) != KeepTurns+i+1 {
			t.Fatalf("after turn %d: %d turns, no fold expected", 31+i, turnsIn(next))
		}
		cur = next
	}
	if turnsIn(cur) != KeepTurns {
		t.Fatalf("at turn 50: %d turns, want a fold to %d", turnsIn(cur), KeepTurns)
	}
	pairingOK(t, cur)
	sums, mems, _ = parseFold(cur[1].Text)
	if len(sums) != 40 || sums[39] != "- turn 40 summary" || len(mems) != 1 {
		t.Fatalf("after the second fold: %d summaries (last %q), %d memory loads", len(sums), sums[len(sums)-1], len(mems))
	}
	var images int
	for _, m := range cur {
		images += len(m.Images)
	}
	if images != 1 {
		t.Errorf("%d images after folds", images)
	}
}

func TestOverflowFoldsHarderThenCuts(t *testing.T) {
	ctx := context.Background()
	p := Policy{}
	out, changed, _ := p.Compact(ctx, Overflow, 12, session(12))
	if !changed || turnsIn(out) != 6 {
		t.Fatalf("overflow at 12 turns: %d left, want 6", turnsIn(out))
	}
	pairingOK(t, out)
	one := session(1)
	one[3].Text = strings.Repeat("x", 5000)
	out, changed, _ = p.Compact(ctx, Preflight, 1, one)
	if !changed || len(out[3].Text) > OverflowResultChars+100 {
		t.Fatalf("one long turn: changed %v, result %d bytes", changed, len(out[3].Text))
	}
	if _, changed, _ = p.Compact(ctx, Overflow, 1, out); changed {
		t.Error("nothing left to shrink, yet it reported a change")
	}
}

func TestHeadAndTailTruncation(t *testing.T) {
	long := "HEAD" + strings.Repeat("é", MaxResultChars) + "TAIL"
	r := hooks.ToolResult{Text: long}
	Truncator{}.ToolResultPersist(context.Background(), hooks.ToolCall{}, &r)
	if len(r.Text) > ResultHead+ResultTail+100 || !strings.HasPrefix(r.Text, "HEAD") || !strings.HasSuffix(r.Text, "TAIL") ||
		!strings.Contains(r.Text, "characters cut from the middle") {
		t.Fatalf("truncated to %d bytes: %q…%q", len(r.Text), r.Text[:20], r.Text[len(r.Text)-20:])
	}
	if !strings.Contains(r.Text, "é") || strings.ContainsRune(r.Text, '\uFFFD') {
		t.Error("cut inside a rune")
	}
	short := hooks.ToolResult{Text: "fine"}
	Truncator{}.ToolResultPersist(context.Background(), hooks.ToolCall{}, &short)
	if short.Text != "fine" {
		t.Error("a short result was changed")
	}
}

// A fold cadence of its own: 12/4 folds at 12 turns to 4, nudges at 11, and
// folds again 8 turns later; a cadence that makes no sense falls back to 30/10.
func TestFoldCadence(t *testing.T) {
	ctx := context.Background()
	p := Policy{At: 12, Keep: 4}
	if p.Nudge(session(11)) == "" || !strings.Contains(p.Nudge(session(11)), "newest 4 turns") || p.Nudge(session(29)) != "" {
		t.Error("the nudge does not follow the cadence")
	}
	if _, changed, _ := p.Compact(ctx, BeforeRequest, 11, session(11)); changed && turnsIn(session(11)) != 11 {
		t.Fatal("folded before 12 turns")
	}
	out, changed, _ := p.Compact(ctx, BeforeRequest, 12, session(12))
	if !changed || turnsIn(out) != 4 {
		t.Fatalf("at 12 turns: %d left, want 4", turnsIn(out))
	}
	more := session(20)[len(session(12)):]
	cur := out
	for i := 0; i < 8; i++ {
		cur = append(append([]provider.Message(nil), cur...), more[i*4:i*4+4]...)
		cur, _, _ = p.Compact(ctx, BeforeRequest, 13+i, cur)
	}
	if turnsIn(cur) != 4 {
		t.Fatalf("at turn 20: %d turns, want a fold to 4", turnsIn(cur))
	}
	for _, bad := range []Policy{{At: 10, Keep: 10}, {At: 0, Keep: 3}, {At: 5, Keep: 0}} {
		if at, keep := bad.cadence(); at != FoldAt || keep != KeepTurns {
			t.Errorf("%+v: cadence %d/%d, want the default", bad, at, keep)
		}
	}
}
