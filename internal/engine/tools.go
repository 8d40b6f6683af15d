package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// State is the session state engine-side tools read and write; the
// policies (plan, stuck guard, token calibration) keep theirs in it too.
//
// Everything in it is plain data: a snapshot (engine/snapshot) is this
// struct and the transcript, so a resumed session carries on exactly.
type State struct {
	Turn       int            `json:"turn"`
	LastNote   string         `json:"lastNote,omitempty"`
	Scratchpad string         `json:"scratchpad,omitempty"`
	Usage      contract.Usage `json:"usage"`
	// Jobs are agent-created jobs to report in the termination message.
	Jobs []contract.Job `json:"jobs,omitempty"`
	// FollowUp is the WAIT's follow-up the agent chose (a one-time job);
	// nil: the run's default delay, with the recap as context.
	FollowUp *contract.FollowUp `json:"followUp,omitempty"`
	// Plan is the agent's plan (update_progress); nil until it writes one.
	Plan *Plan `json:"plan,omitempty"`
	// Unplanned counts the tool rounds run without a plan (the plan gate).
	Unplanned int `json:"unplanned,omitempty"`
	// Watchdog counts turns on the plan step in progress (engine/plan).
	Watchdog Watchdog `json:"watchdog"`
	// Guard is the stuck guard's memory (engine/stuckguard).
	Guard Guard `json:"guard"`
	// Tokens is the token estimator's calibration (engine/tokens), so a
	// resumed attempt does not re-learn it.
	Tokens *tokens.Calibration `json:"tokens,omitempty"`
	// Chain is the provider's conversation kept on the service (the
	// Responses API's stored responses: provider.Chained), so a resumed
	// attempt continues it rather than sending the transcript again.
	Chain json.RawMessage `json:"chain,omitempty"`
	// Steered counts the steer messages the session has: those its opening
	// message carried (cmd/loop starts it there) and those the inbox
	// delivered since. The inbox delivers the ones after it; progress
	// reports it as status.progress.steered.
	Steered int `json:"steered,omitempty"`
}

// Plan is what update_progress writes (docs/rig-contract.md, "Engine-side tools").
type Plan struct {
	UserSaid      string     `json:"userSaid,omitempty"`
	Understanding string     `json:"understanding,omitempty"`
	Steps         []PlanStep `json:"steps,omitempty"`
}

// PlanStep is one step of a plan; Status is pending, in_progress or done.
type PlanStep struct {
	Title  string `json:"title"`
	Status string `json:"status"`
}

// Current is the step in progress ("" when none).
func (p *Plan) Current() string {
	if p == nil {
		return ""
	}
	for i, st := range p.Steps {
		if st.Status == "in_progress" {
			return fmt.Sprintf("%d. %s", i+1, st.Title)
		}
	}
	return ""
}

// Watchdog is the step watchdog's count (engine/plan).
type Watchdog struct {
	Step  string `json:"step,omitempty"`  // the step it counts for
	Turns int    `json:"turns,omitempty"` // turns on it
	Fired bool   `json:"fired,omitempty"` // the forced re-plan was used on this step
}

// Guard is the stuck guard's memory (engine/stuckguard).
type Guard struct {
	Step     string         `json:"step,omitempty"`     // counters reset when the plan step changes
	NoChange map[string]int `json:"noChange,omitempty"` // presses of a target with no screen change
	History  []string       `json:"history,omitempty"`  // recent actions, for cycles
}

// Call is one engine-side tool call.
type Call struct {
	Turn  int
	ID    string
	Name  string
	Args  json.RawMessage
	State *State
}

// Output is what an engine-side tool returns. End closes the session after
// this turn's results are recorded.
type Output struct {
	Text    string
	Images  []*provider.Image
	IsError bool
	End     *Ending
}

// LocalTool is a tool that runs inside the loop rather than on the rig.
type LocalTool struct {
	Spec provider.ToolSpec
	Run  func(ctx context.Context, c *Call) Output
}

// Registry holds the engine-side tools: note and end_session, and whatever
// the policies register (policies.Wire: update_progress, the state tools, Skill).
type Registry struct {
	tools map[string]LocalTool
	order []string
}

// NewRegistry returns a registry with note and end_session.
func NewRegistry() *Registry {
	r := &Registry{tools: map[string]LocalTool{}}
	r.MustRegister(noteTool())
	r.MustRegister(endSessionTool())
	return r
}

// Register adds a tool; a name can be registered once.
func (r *Registry) Register(t LocalTool) error {
	if _, dup := r.tools[t.Spec.Name]; dup {
		return fmt.Errorf("engine tool %q registered twice", t.Spec.Name)
	}
	r.tools[t.Spec.Name] = t
	r.order = append(r.order, t.Spec.Name)
	return nil
}

// MustRegister is Register for tools known at build time.
func (r *Registry) MustRegister(t LocalTool) {
	if err := r.Register(t); err != nil {
		panic(err)
	}
}

// Lookup finds a tool.
func (r *Registry) Lookup(name string) (LocalTool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Specs lists the tools in registration order.
func (r *Registry) Specs() []provider.ToolSpec {
	out := make([]provider.ToolSpec, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.tools[n].Spec)
	}
	return out
}

func noteTool() LocalTool {
	return LocalTool{
		Spec: provider.ToolSpec{
			Name: contract.ToolNote,
			Description: "Mandatory in every turn, beside exactly one other tool: one line of at most 20 words saying " +
				"what this turn does and why. Notes are the only part of a turn that survives compaction. " +
				"scratchpad (optional) replaces your free-form working notes.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"summary":{"type":"string","minLength":1,"description":"one line, at most 20 words"},` +
				`"scratchpad":{"type":"string","description":"optional: your working notes, replacing the previous ones"}},` +
				`"required":["summary"],"additionalProperties":false}`),
		},
		Run: func(_ context.Context, c *Call) Output {
			var a struct {
				Summary    string  `json:"summary"`
				Scratchpad *string `json:"scratchpad"`
			}
			_ = json.Unmarshal(c.Args, &a)
			line := strings.Join(strings.Fields(a.Summary), " ")
			words := strings.Fields(line)
			warn := ""
			if len(words) > NoteMaxWords {
				line = strings.Join(words[:NoteMaxWords], " ")
				warn = fmt.Sprintf(" (cut to %d words: keep notes to one short line)", NoteMaxWords)
			}
			c.State.LastNote = line
			if a.Scratchpad != nil {
				pad := *a.Scratchpad
				if len(pad) > ScratchpadMaxChars {
					cut := ScratchpadMaxChars
					for cut > 0 && !utf8.RuneStart(pad[cut]) {
						cut--
					}
					pad = pad[:cut]
					warn += fmt.Sprintf(" (scratchpad cut to %d characters: keep it short)", ScratchpadMaxChars)
				}
				c.State.Scratchpad = pad
			}
			return Output{Text: "noted" + warn}
		},
	}
}

func endSessionTool() LocalTool {
	return LocalTool{
		Spec: provider.ToolSpec{
			Name: contract.ToolEndSession,
			Description: "Close the session. status: DONE (task complete), FAIL (it cannot be done), WAIT (a person must " +
				"reply first), IDLE (nothing to do), STUCK (an unrecoverable problem; a fresh session will retry). " +
				"recap: what happened, for whoever reads it next.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"status":{"type":"string","enum":["DONE","FAIL","WAIT","IDLE","STUCK"]},` +
				`"recap":{"type":"string","minLength":1}},"required":["status","recap"],"additionalProperties":false}`),
		},
		Run: func(_ context.Context, c *Call) Output {
			var a struct {
				Status string `json:"status"`
				Recap  string `json:"recap"`
			}
			_ = json.Unmarshal(c.Args, &a)
			s, err := contract.ParseSentinel(a.Status)
			if err != nil {
				return Output{IsError: true, Text: err.Error()}
			}
			return Output{Text: "session closed: " + string(s), End: &Ending{
				Sentinel: s, Reason: contract.ReasonEndTurn, Retryable: s == contract.Stuck, Recap: a.Recap,
			}}
		},
	}
}
