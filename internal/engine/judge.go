package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/turnshape"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// judge records the reply and decides whether its calls may run. ok is false
// when the turn was rejected (a corrective is already in the transcript).
func (s *Session) judge(ctx context.Context, reply *provider.Reply) (calls []provider.ToolCall, end *Ending, ok bool) {
	s.state.Turn++
	s.addUsage(reply.Usage)
	if reply.RequestBytes > 0 {
		s.requestBytes = append(s.requestBytes, reply.RequestBytes)
	}
	msg := reply.Message
	msg.ToolCalls = uniqueCallIDs(msg.ToolCalls, s.state.Turn)
	calls = append([]provider.ToolCall(nil), msg.ToolCalls...) // the raw arguments, for the error results
	for i := range msg.ToolCalls {
		// Strict servers parse the arguments they are sent back: keep only a JSON object.
		if !isJSONObject(msg.ToolCalls[i].Arguments) {
			msg.ToolCalls[i].Arguments = "{}"
		}
	}
	s.transcript = append(s.transcript, msg)

	switch reply.FinishReason {
	case provider.FinishContentFilter:
		s.rejectCalls(calls, "not run: the provider's content filter stopped this reply")
		s.emit(events.Error(s.state.Turn, "content_filter", "the provider's content filter stopped the reply", 0))
		// The engine's ending, not the agent's verdict that the task cannot
		// be done: STUCK, and a fresh attempt may word things differently.
		return nil, stuck(contract.ReasonContentFilter, "stopped: the model provider's content filter blocked the reply"), false
	case provider.FinishLength:
		return nil, s.malformedTurn(calls, "length", "", "Your reply was cut off by the output token limit, so its tool "+
			"arguments may be incomplete; nothing was run. Resend the turn shorter: one note line and one action."), false
	}
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	var alone []string
	if s.lastChance {
		alone = []string{contract.ToolEndSession}
	}
	v := turnshape.Check(names, alone...)
	if !v.OK {
		if v.Empty {
			return nil, s.malformedTurn(nil, "no_tool_calls", "", v.Corrective), false
		}
		return nil, s.malformedTurn(calls, "turn_shape", v.Offending, v.Corrective), false
	}
	return calls, nil, true
}

// malformedTurn answers every call with a not-run result, adds the
// corrective, and ends the session after MaxMalformedTurns in a row.
func (s *Session) malformedTurn(calls []provider.ToolCall, class, offending, corrective string) *Ending {
	s.rejectCalls(calls, "not run: this turn was rejected (see the message below)")
	s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: corrective})
	text := corrective
	if offending != "" {
		text = offending + ": " + corrective
	}
	s.emit(events.Error(s.state.Turn, class, text, 0))
	return s.countMalformed(class == "no_tool_calls")
}

func (s *Session) countMalformed(empty bool) *Ending {
	if s.malformed == 0 {
		s.emptyStreak = true
	}
	s.malformed++
	s.emptyStreak = s.emptyStreak && empty
	if s.malformed < MaxMalformedTurns {
		return nil
	}
	if s.emptyStreak {
		return stuck(contract.ReasonNoToolCalls, fmt.Sprintf("stopped: the model answered %d turns in a row without tool calls", s.malformed))
	}
	return stuck(contract.ReasonMalformedTurns, fmt.Sprintf("stopped: %d malformed turns in a row", s.malformed))
}

func (s *Session) rejectCalls(calls []provider.ToolCall, text string) {
	for _, c := range calls {
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleTool, ToolCallID: c.ID, ToolName: c.Name, IsError: true, Text: text})
	}
}

// uniqueCallIDs fills in missing call ids and makes duplicated ones unique,
// so every call can be answered by exactly one result.
func uniqueCallIDs(calls []provider.ToolCall, turn int) []provider.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]provider.ToolCall, len(calls))
	seen := map[string]bool{}
	for i, c := range calls {
		if c.ID == "" || seen[c.ID] {
			base := c.ID
			if base == "" {
				base = fmt.Sprintf("call_t%d", turn)
			}
			id := fmt.Sprintf("%s_%d", base, i)
			for n := i; seen[id]; n++ {
				id = fmt.Sprintf("%s_%d", base, n+100)
			}
			c.ID = id
		}
		seen[c.ID] = true
		out[i] = c
	}
	return out
}

func isJSONObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}
