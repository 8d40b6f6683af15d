// Package stuckguard stops an agent that keeps doing what does not work
// (docs/engine.md, "Stuck guard"): the same target pressed with no screen
// change draws a warning at the WarnAt-th press and is refused at the
// RefuseAt-th; a cycle of 2 or 3 actions repeated over and over likewise. Its
// counters reset when the plan step changes (a new step is a new attempt).
// The verdict is the rig's first text block's (hooks.ToolResult.Verdict),
// never text found anywhere in a result: a listing that shows the verdict's
// words is the phone's screen, not the rig's word.
package stuckguard

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/plan"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
)

// The numbers (docs/rig-contract.md: the third press that changes nothing
// draws a warning, the fifth is refused).
const (
	WarnAt   = 3
	RefuseAt = 5
	// HistoryLen is how many recent actions are kept for cycle detection.
	HistoryLen = 3 * RefuseAt
)

// Guard is the policy over a session's state.
type Guard struct {
	hooks.Base
	State *engine.State
}

// New returns the guard.
func New(s *engine.State) *Guard { return &Guard{State: s} }

// Target is a gesture's identity: the tool and where it acts (the bbox
// centre on a 2% grid, so a re-aimed press of the same button counts too).
func Target(name string, args json.RawMessage) string {
	var a struct {
		BBox      []float64 `json:"bbox"`
		Direction string    `json:"direction"`
		Text      string    `json:"text"`
	}
	_ = json.Unmarshal(args, &a)
	key := name
	if len(a.BBox) == 4 {
		cx, cy := (a.BBox[0]+a.BBox[2])/2, (a.BBox[1]+a.BBox[3])/2
		key += fmt.Sprintf("@%.0f,%.0f", math.Round(cx*50), math.Round(cy*50))
	}
	if a.Direction != "" {
		key += ":" + a.Direction
	}
	if name == contract.ToolSequence || name == contract.ToolSendToClipboard {
		key += ":" + string(args)
	}
	return key
}

func (g *Guard) sync() *engine.Guard {
	st := &g.State.Guard
	if cur := g.State.Plan.Current(); cur != st.Step {
		*st = engine.Guard{Step: cur}
	}
	if st.NoChange == nil {
		st.NoChange = map[string]int{}
	}
	return st
}

// BeforeToolCall refuses the RefuseAt-th press of a target that changed
// nothing, and the action that would complete the RefuseAt-th round of a cycle.
func (g *Guard) BeforeToolCall(_ context.Context, c hooks.ToolCall) hooks.Decision {
	if !plan.Gestures[c.Name] {
		return hooks.Decision{}
	}
	st := g.sync()
	key := Target(c.Name, c.Args)
	if n := st.NoChange[key]; n >= RefuseAt-1 {
		return hooks.Decision{Block: true, Reason: fmt.Sprintf("refused: this would be press %d of the same target (%s) and the last %d "+
			"changed nothing on the screen. Look again (peek), aim elsewhere, try another way, or re-plan.", n+1, key, n)}
	}
	if p, reps := cycle(append(append([]string(nil), st.History...), key)); reps >= RefuseAt {
		return hooks.Decision{Block: true, Reason: fmt.Sprintf("refused: this would repeat the same %d-action cycle (%s) for the %d. time "+
			"without getting anywhere. Break the loop: try something different or re-plan.", p, strings.Join(st.History[len(st.History)-p+1:], " → ")+" → "+key, reps)}
	}
	return hooks.Decision{}
}

// ToolResultPersist counts the press and adds the warning to its result.
func (g *Guard) ToolResultPersist(_ context.Context, c hooks.ToolCall, r *hooks.ToolResult) {
	if !plan.Gestures[c.Name] || r.IsError {
		return
	}
	st := g.sync()
	key := Target(c.Name, c.Args)
	switch r.Verdict {
	case wire.Unchanged:
		st.NoChange[key]++
		if n := st.NoChange[key]; n >= WarnAt {
			r.Text += fmt.Sprintf("\nwarning: press %d of the same target with no screen change; press %d will be refused. "+
				"Look again, aim elsewhere or try another way.", n, RefuseAt)
		}
	case wire.Changed:
		clear(st.NoChange) // the screen moved: a fresh start
	}
	// No verdict (frames that could not be compared) says nothing either
	// way: the count stands.
	_, before := cycle(st.History)
	st.History = append(st.History, key)
	if len(st.History) > HistoryLen {
		st.History = append(st.History[:0], st.History[len(st.History)-HistoryLen:]...)
	}
	if p, after := cycle(st.History); after > before && after >= WarnAt {
		r.Text += fmt.Sprintf("\nwarning: you have gone round the same %d-action cycle %d times; round %d will be refused. Try something different.", p, after, RefuseAt)
	}
}

// cycle finds the longest repetition at the end of h of a 2- or 3-action
// cycle (not all one action): the period and the complete rounds.
func cycle(h []string) (period, rounds int) {
	for _, p := range []int{2, 3} {
		if len(h) < 2*p {
			continue
		}
		distinct := false
		for i := len(h) - p; i < len(h)-1; i++ {
			if h[i] != h[len(h)-1] {
				distinct = true
			}
		}
		if !distinct {
			continue
		}
		n := p
		for n < len(h) && h[len(h)-1-n] == h[len(h)-1-n+p] {
			n++
		}
		if r := n / p; r > rounds {
			period, rounds = p, r
		}
	}
	return period, rounds
}
