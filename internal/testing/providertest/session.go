package providertest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// EngineSession builds the requests of a session the way the engine does:
// every turn is [note, peek] with signed thinking (and, for the Responses
// wire, an encrypted reasoning item as the service returns it), answered by the note's
// result, the peek's listing and a user message with the screen; before
// each request the compaction policy runs (latest screen wins, folds at 30
// turns) and the pinned plan (different every turn) and any nudge are
// appended as the pinned tail. Turn n's calls are call_n_0 (note) and
// call_n_1 (peek); request n holds turns 0..n-1.
func EngineSession(turns int) []*provider.Request {
	var (
		pol        compaction.Policy
		transcript = []provider.Message{{Role: provider.RoleUser, Text: "[scenario:timer] Start a 5-minute timer on the phone."}}
		out        []*provider.Request
	)
	tools := []provider.ToolSpec{
		{Name: contract.ToolNote, Description: "note", Schema: json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string"}}}`)},
		{Name: contract.ToolPeek, Description: "peek", Schema: json.RawMessage(`{"type":"object"}`)},
	}
	for n := range turns {
		transcript, _, _ = pol.Compact(context.Background(), compaction.BeforeRequest, n, transcript)
		tail := []provider.Message{{Role: provider.RoleUser, Text: fmt.Sprintf(
			"[Pinned: your plan and scratchpad as they stand now.]\nPlan:\n1. [in_progress] open Clock\nWarning: %d turns on step \"open Clock\".", n)}}
		if nudge := pol.Nudge(transcript); nudge != "" {
			tail = append(tail, provider.Message{Role: provider.RoleUser, Text: nudge})
		}
		msgs := append(transcript[:len(transcript):len(transcript)], tail...)
		out = append(out, &provider.Request{System: "You drive a real phone.", Messages: msgs, Tools: tools, Pinned: len(tail)})

		note, peek := fmt.Sprintf("call_%d_0", n), fmt.Sprintf("call_%d_1", n)
		transcript = append(transcript,
			provider.Message{Role: provider.RoleAssistant, Reasoning: fmt.Sprintf("turn %d: look first", n), ReasoningSignature: fmt.Sprintf("sig-%d", n),
				ReasoningItems: []json.RawMessage{json.RawMessage(fmt.Sprintf(
					`{"type":"reasoning","id":"rs_%d","summary":[{"type":"summary_text","text":"turn %d: look first"}],"encrypted_content":"enc-%d"}`, n, n, n))},
				ToolCalls: []provider.ToolCall{
					{ID: note, Name: contract.ToolNote, Arguments: fmt.Sprintf(`{"summary":"looking at the screen, turn %d"}`, n)},
					{ID: peek, Name: contract.ToolPeek, Arguments: `{}`}}},
			provider.Message{Role: provider.RoleTool, ToolCallID: note, ToolName: contract.ToolNote, Text: "noted"},
			provider.Message{Role: provider.RoleTool, ToolCallID: peek, ToolName: contract.ToolPeek,
				Text: fmt.Sprintf("peeked\nid [kind] \"label\" [left,top,right,bottom] conf\n1 [text] \"Clock %d\" [0.1,0.1,0.3,0.2] 0.98", n)},
			provider.Message{Role: provider.RoleUser, Text: "The screen after peek:",
				Images: []*provider.Image{provider.NewImage("image/jpeg", []byte(fmt.Sprintf("jpeg bytes of screen %d", n)))}})
	}
	return out
}
