package anthropic

// The prompt-cache breakpoints of a request (docs/engine.md, "Prompt caching and the fold policy").

import (
	"slices"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// maxMessageBreakpoints is how many cache breakpoints the messages get: the
// Messages API allows four, and the system prompt takes one.
const maxMessageBreakpoints = 3

// breakpoints picks the transcript messages whose last block carries a
// cache breakpoint, at most maxMessageBreakpoints, each where the request's
// prefix stays the same in the next request:
//
//   - the head's end: the last message before the first assistant message
//     (the opening trigger and, after a fold, the fold message), which
//     changes only when the transcript folds;
//   - the previous turn's last tool result and the newest turn's, each the
//     last one the next request sends unchanged: not the result the newest
//     screen came from, which the engine's latest-screen compaction turns
//     into a stub once a newer screen arrives (provider.SupersededTag), and
//     never the screen itself, which that compaction drops.
//
// The pinned tail (plan, scratchpad, nudges) is rendered afresh for every
// request and never carries one. A request reads the longest cached prefix
// ending at or up to 20 blocks before one of its breakpoints, so the newest
// turn's breakpoint is what the next request reads.
func breakpoints(msgs []provider.Message, pinned int) []int {
	n := len(msgs) - max(0, min(pinned, len(msgs)))
	transcript := msgs[:n]
	var starts []int
	for i, m := range transcript {
		if m.Role == provider.RoleAssistant {
			starts = append(starts, i)
		}
	}
	var out []int
	add := func(i int) {
		if i >= 0 && !slices.Contains(out, i) && len(out) < maxMessageBreakpoints {
			out = append(out, i)
		}
	}
	headEnd := n
	if len(starts) > 0 {
		headEnd = starts[0]
	}
	if headEnd > 0 {
		add(headEnd - 1)
	}
	volatile := screenSource(transcript)
	if k := len(starts); k >= 2 {
		add(lastResult(transcript[:starts[k-1]], starts[k-2], volatile))
	}
	if k := len(starts); k >= 1 {
		add(lastResult(transcript, starts[k-1], volatile))
	}
	return out
}

// lastResult is the index of the last tool result in msgs[from:] other than
// skip; -1 if there is none.
func lastResult(msgs []provider.Message, from, skip int) int {
	for i := len(msgs) - 1; i >= from; i-- {
		if msgs[i].Role == provider.RoleTool && i != skip {
			return i
		}
	}
	return -1
}

// screenSource is the index of the tool result the transcript's newest
// screen came from, as the engine's latest-screen compaction finds it (the
// newest non-note result before the screen's message): the one result that
// still changes, into a stub, when a newer screen arrives. -1 when there is
// no screen.
func screenSource(msgs []provider.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != provider.RoleUser || len(msgs[i].Images) == 0 {
			continue
		}
		for k := i - 1; k >= 0 && msgs[k].Role == provider.RoleTool; k-- {
			if msgs[k].ToolName != contract.ToolNote && !strings.HasPrefix(msgs[k].Text, provider.SupersededTag) {
				return k
			}
		}
		return -1
	}
	return -1
}
