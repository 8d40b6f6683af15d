// Package plan is the agent's working memory beside the transcript
// (docs/engine.md, "Plan and scratchpad"): update_progress writes the plan
// (what the user said, the agent's understanding, up to 20 ordered steps
// with exactly one in progress); the scratchpad rides on note. Both are rendered
// at the tail of every request and never stored in the transcript.
//
// Two rules keep the plan honest:
//   - the plan gate: after GateTurns turns without a plan, every tool but
//     note, update_progress and end_session is refused with the reason (a
//     turn counts when its tools ran; a rejected turn shape does not);
//   - the step watchdog: after WarnTurns turns on one step a warning is
//     pinned to the tail; at ForceTurns the next gesture is refused once, so
//     the agent re-plans.
package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// The numbers (docs/engine.md, "Plan and scratchpad").
const (
	MaxSteps   = 20
	GateTurns  = 8
	WarnTurns  = 8
	ForceTurns = 12
)

// Step statuses.
const (
	Pending    = "pending"
	InProgress = "in_progress"
	Done       = "done"
)

// Gestures are the rig tools that act on the phone (docs/rig-contract.md);
// peek and screenshot only look.
var Gestures = map[string]bool{contract.ToolTap: true, contract.ToolDoubleTap: true, contract.ToolLongPress: true,
	contract.ToolSwipe: true, contract.ToolHomeScreen: true, contract.ToolGoBack: true, contract.ToolForceQuit: true,
	contract.ToolUnlockPhone: true, contract.ToolSendToClipboard: true, contract.ToolSequence: true}

// Policy is the plan: its tool, its tail, the gate and the watchdog. It reads
// and writes the session's State.
type Policy struct {
	hooks.Base
	State *engine.State
}

// New returns the policy over a session's state.
func New(s *engine.State) *Policy { return &Policy{State: s} }

// Tool is update_progress.
func (p *Policy) Tool() engine.LocalTool {
	return engine.LocalTool{
		Spec: provider.ToolSpec{
			Name: contract.ToolUpdateProgress,
			Description: fmt.Sprintf("Write your plan; it is shown at the end of every request. user_said: what the person asked, "+
				"in their words; understanding: what you take it to mean; steps: up to %d ordered steps, exactly one in_progress. "+
				"Fields you leave out keep their value.", MaxSteps),
			Schema: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"user_said":{"type":"string"},"understanding":{"type":"string"},`+
				`"steps":{"type":"array","maxItems":%d,"items":{"type":"object","properties":{"title":{"type":"string","minLength":1},`+
				`"status":{"type":"string","enum":["pending","in_progress","done"]}},"required":["title","status"],"additionalProperties":false}}},`+
				`"additionalProperties":false}`, MaxSteps)),
		},
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			var a struct {
				UserSaid      *string            `json:"user_said"`
				Understanding *string            `json:"understanding"`
				Steps         *[]engine.PlanStep `json:"steps"`
			}
			_ = json.Unmarshal(c.Args, &a)
			next := engine.Plan{}
			if c.State.Plan != nil {
				next = *c.State.Plan
			}
			if a.UserSaid != nil {
				next.UserSaid = *a.UserSaid
			}
			if a.Understanding != nil {
				next.Understanding = *a.Understanding
			}
			if a.Steps != nil {
				next.Steps = append([]engine.PlanStep(nil), (*a.Steps)...)
			}
			if err := Check(next); err != nil {
				return engine.Output{IsError: true, Text: "plan not changed: " + err.Error()}
			}
			c.State.Plan = &next
			return engine.Output{Text: "plan updated; step in progress: " + next.Current()}
		},
	}
}

// Check is the plan's rule: 1 to MaxSteps steps, exactly one in progress.
func Check(p engine.Plan) error {
	if len(p.Steps) == 0 {
		return fmt.Errorf("a plan needs steps (1 to %d), exactly one of them in_progress", MaxSteps)
	}
	if len(p.Steps) > MaxSteps {
		return fmt.Errorf("%d steps, at most %d", len(p.Steps), MaxSteps)
	}
	var inProgress []string
	for i, s := range p.Steps {
		if strings.TrimSpace(s.Title) == "" {
			return fmt.Errorf("step %d has no title", i+1)
		}
		switch s.Status {
		case InProgress:
			inProgress = append(inProgress, fmt.Sprint(i+1))
		case Pending, Done:
		default:
			return fmt.Errorf("step %d: status %q is not pending, in_progress or done", i+1, s.Status)
		}
	}
	if len(inProgress) != 1 {
		return fmt.Errorf("exactly one step must be in_progress, found %d (%s)", len(inProgress), strings.Join(inProgress, ", "))
	}
	return nil
}

// Tail renders the plan and the scratchpad for the end of the request.
func (p *Policy) Tail(s *engine.State) []provider.Message {
	var b strings.Builder
	b.WriteString("[Pinned: your plan and scratchpad as they stand now. Shown with every request, never kept in the conversation.]\n")
	if s.Plan == nil {
		fmt.Fprintf(&b, "Plan: none yet. Write one with update_progress")
		if s.Unplanned < GateTurns {
			fmt.Fprintf(&b, " (after %d turns without a plan only note, update_progress and end_session run)", GateTurns)
		} else {
			b.WriteString(" now: other tools are refused until you do")
		}
		b.WriteString(".\n")
	} else {
		if s.Plan.UserSaid != "" {
			b.WriteString("User said: " + s.Plan.UserSaid + "\n")
		}
		if s.Plan.Understanding != "" {
			b.WriteString("Understanding: " + s.Plan.Understanding + "\n")
		}
		b.WriteString("Plan:\n")
		for i, st := range s.Plan.Steps {
			fmt.Fprintf(&b, "%d. [%s] %s\n", i+1, st.Status, st.Title)
		}
	}
	if s.Scratchpad != "" {
		b.WriteString("Scratchpad:\n" + s.Scratchpad + "\n")
	} else {
		b.WriteString("Scratchpad: empty (note's scratchpad argument writes it).\n")
	}
	if w := s.Watchdog; w.Step != "" && w.Turns >= WarnTurns {
		fmt.Fprintf(&b, "Warning: %d turns on step %q. If it is not working, change approach and update_progress", w.Turns, w.Step)
		if w.Turns < ForceTurns {
			fmt.Fprintf(&b, "; at %d turns the next gesture is refused until you re-plan", ForceTurns)
		}
		b.WriteString(".\n")
	}
	return []provider.Message{{Role: provider.RoleUser, Text: strings.TrimRight(b.String(), "\n")}}
}

// BeforeToolCall is the plan gate and the watchdog's forced re-plan.
func (p *Policy) BeforeToolCall(_ context.Context, c hooks.ToolCall) hooks.Decision {
	s := p.State
	switch c.Name {
	case contract.ToolNote, contract.ToolUpdateProgress, contract.ToolEndSession:
		return hooks.Decision{}
	}
	if s.Plan == nil && s.Unplanned >= GateTurns {
		return hooks.Decision{Block: true, Reason: fmt.Sprintf("%d turns have passed without a plan. Write one with update_progress "+
			"(what the user said, your understanding, the steps with one in_progress); until then only note, update_progress and end_session run.", s.Unplanned)}
	}
	if w := &s.Watchdog; Gestures[c.Name] && w.Step != "" && w.Turns >= ForceTurns && !w.Fired {
		w.Fired = true
		return hooks.Decision{Block: true, Reason: fmt.Sprintf("%d turns on step %q without finishing it. Stop and re-plan with "+
			"update_progress: mark what is done, split or change the step, or end the session if it cannot be done.", w.Turns, w.Step)}
	}
	return hooks.Decision{}
}

// AfterRound counts the turn: toward the plan gate while there is no plan,
// else for the step in progress (a new step starts a new count).
func (p *Policy) AfterRound(_ context.Context, s *engine.State, _ []provider.Message) {
	if s.Plan == nil {
		s.Unplanned++
	}
	cur := s.Plan.Current()
	if cur != s.Watchdog.Step {
		s.Watchdog = engine.Watchdog{Step: cur}
	}
	if cur != "" {
		s.Watchdog.Turns++
	}
}
