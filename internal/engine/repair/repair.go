// Package repair keeps a transcript valid for every provider API: each tool
// call is answered by exactly one result, in call order, in the messages
// right after the call (docs/engine.md, "Reading the loop", prepare).
// The loop runs it before every request and after every compaction.
package repair

import (
	"fmt"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// MissingResult is the text of a result the repair had to supply.
const MissingResult = "no result was recorded for this call (the transcript was repaired); it may not have run"

// Report counts what a repair changed.
type Report struct {
	Synthesised int // results supplied for calls that had none
	Dropped     int // results that answered no call, or answered one twice
	Renamed     int // call ids made unique or filled in
}

// Changed reports whether the repair changed anything.
func (r Report) Changed() bool { return r.Synthesised+r.Dropped+r.Renamed > 0 }

// Repair returns a transcript where every assistant message with tool calls
// is followed immediately by exactly one tool result per call, in order.
// Results are matched by call id; duplicated or empty call ids are made
// unique first, and a duplicated id takes the results carrying it in order.
// msgs is not changed; unchanged transcripts are returned as they are.
func Repair(msgs []provider.Message) ([]provider.Message, Report) {
	if valid(msgs) {
		return msgs, Report{}
	}
	var rep Report
	out := make([]provider.Message, 0, len(msgs))
	seen := map[string]bool{}
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == provider.RoleTool {
			rep.Dropped++ // a result that follows no call
			continue
		}
		if m.Role != provider.RoleAssistant || len(m.ToolCalls) == 0 {
			out = append(out, m)
			continue
		}
		calls := make([]provider.ToolCall, len(m.ToolCalls))
		orig := make([]string, len(m.ToolCalls))
		for k, c := range m.ToolCalls {
			orig[k] = c.ID
			id := c.ID
			if id == "" || seen[id] {
				base := id
				if base == "" {
					base = "call"
				}
				for n := 2; id == "" || seen[id]; n++ {
					id = fmt.Sprintf("%s_r%d", base, n)
				}
				rep.Renamed++
			}
			seen[id] = true
			c.ID = id
			calls[k] = c
		}
		m.ToolCalls = calls
		out = append(out, m)
		// The results that follow this call message.
		j := i + 1
		for j < len(msgs) && msgs[j].Role == provider.RoleTool {
			j++
		}
		results := msgs[i+1 : j]
		used := make([]bool, len(results))
		for k, c := range calls {
			found := -1
			for r := range results {
				if !used[r] && orig[k] != "" && results[r].ToolCallID == orig[k] {
					found = r
					break
				}
			}
			if found < 0 {
				rep.Synthesised++
				out = append(out, provider.Message{Role: provider.RoleTool, ToolCallID: c.ID, ToolName: c.Name, IsError: true, Text: MissingResult})
				continue
			}
			used[found] = true
			res := results[found]
			res.ToolCallID = c.ID
			if res.ToolName == "" {
				res.ToolName = c.Name
			}
			out = append(out, res)
		}
		for _, u := range used {
			if !u {
				rep.Dropped++
			}
		}
		i = j - 1
	}
	return out, rep
}

// valid is the fast path: the transcript already keeps the rule.
func valid(msgs []provider.Message) bool {
	seen := map[string]bool{}
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == provider.RoleTool {
			return false
		}
		if m.Role != provider.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		for k, c := range m.ToolCalls {
			if c.ID == "" || seen[c.ID] {
				return false
			}
			seen[c.ID] = true
			r := i + 1 + k
			if r >= len(msgs) || msgs[r].Role != provider.RoleTool || msgs[r].ToolCallID != c.ID {
				return false
			}
		}
		i += len(m.ToolCalls)
		if i+1 < len(msgs) && msgs[i+1].Role == provider.RoleTool {
			return false
		}
	}
	return true
}
