package repair

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// checkRule asserts the invariant: every call is answered by exactly one
// result, in call order, in the messages right after it; no stray results;
// no empty or repeated call ids.
func checkRule(t *testing.T, msgs []provider.Message) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == provider.RoleTool {
			t.Fatalf("stray result at %d: %+v", i, m)
		}
		if m.Role != provider.RoleAssistant {
			continue
		}
		for k, c := range m.ToolCalls {
			if c.ID == "" || seen[c.ID] {
				t.Fatalf("call id %q empty or repeated", c.ID)
			}
			seen[c.ID] = true
			if i+1+k >= len(msgs) {
				t.Fatalf("call %s unanswered at the end", c.ID)
			}
			r := msgs[i+1+k]
			if r.Role != provider.RoleTool || r.ToolCallID != c.ID {
				t.Fatalf("call %s answered by %+v", c.ID, r)
			}
		}
		i += len(m.ToolCalls)
	}
}

// randomTranscript builds a messy transcript: missing, duplicated,
// reordered and orphan results, empty and repeated call ids.
func randomTranscript(r *rand.Rand) []provider.Message {
	var msgs []provider.Message
	ids := []string{"a", "b", "c", "", "d"}
	for n := r.IntN(12); n > 0; n-- {
		switch r.IntN(4) {
		case 0:
			msgs = append(msgs, provider.Message{Role: provider.RoleUser, Text: "u"})
		case 1:
			msgs = append(msgs, provider.Message{Role: provider.RoleTool, ToolCallID: ids[r.IntN(len(ids))], Text: "orphan"})
		default:
			var calls []provider.ToolCall
			for k := r.IntN(4); k > 0; k-- {
				calls = append(calls, provider.ToolCall{ID: ids[r.IntN(len(ids))], Name: fmt.Sprint("t", k)})
			}
			msgs = append(msgs, provider.Message{Role: provider.RoleAssistant, ToolCalls: calls})
			for k := r.IntN(5); k > 0; k-- {
				id := ids[r.IntN(len(ids))]
				if len(calls) > 0 && r.IntN(2) == 0 {
					id = calls[r.IntN(len(calls))].ID
				}
				msgs = append(msgs, provider.Message{Role: provider.RoleTool, ToolCallID: id, Text: "r"})
			}
		}
	}
	return msgs
}

func TestRepairPropertyRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		in := randomTranscript(r)
		out, _ := Repair(in)
		checkRule(t, out)
		again, rep := Repair(out)
		if rep.Changed() || len(again) != len(out) {
			t.Fatalf("repair is not idempotent: %+v", rep)
		}
		// Non-tool messages survive in order.
		var a, b []provider.Message
		for _, m := range in {
			if m.Role != provider.RoleTool {
				a = append(a, m)
			}
		}
		for _, m := range out {
			if m.Role != provider.RoleTool {
				b = append(b, m)
			}
		}
		if len(a) != len(b) {
			t.Fatalf("repair lost messages: %d → %d", len(a), len(b))
		}
	}
}

func FuzzRepair(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(99), uint64(7))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		out, _ := Repair(randomTranscript(rand.New(rand.NewPCG(s1, s2))))
		checkRule(t, out)
	})
}

func TestRepairKeepsMatchingResultsAndOrder(t *testing.T) {
	in := []provider.Message{
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "n", Name: "note"}, {ID: "p", Name: "peek"}}},
		{Role: provider.RoleTool, ToolCallID: "p", Text: "peeked"},
		{Role: provider.RoleTool, ToolCallID: "x", Text: "orphan"},
		{Role: provider.RoleUser, Text: "screen"},
	}
	out, rep := Repair(in)
	checkRule(t, out)
	if out[1].Text != MissingResult || out[2].Text != "peeked" || out[3].Text != "screen" {
		t.Errorf("out %+v", out)
	}
	if rep.Synthesised != 1 || rep.Dropped != 1 {
		t.Errorf("report %+v", rep)
	}
	valid := out
	if o, rep := Repair(valid); rep.Changed() || &o[0] != &valid[0] {
		t.Error("a valid transcript should come back as it is")
	}
}
