package toolpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"

	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// costLimit bounds one rule's evaluation (CEL's cost units): a rule runs
// before every tool call, on the loop's goroutine.
const costLimit = 1_000_000

// Call is a tool call about to run, as the rules see it.
type Call struct {
	Tool string
	Args json.RawMessage
	// Screen is the latest listing the session saw (nil: none yet).
	Screen []listing.Element
}

// Decision is what the policies decided for a call. The zero Decision lets
// it run.
type Decision struct {
	Action  Action
	Policy  string
	Rule    string // the rule, or "webhook:<name>" when a webhook decided
	Message string
	// ApprovalTimeout is how long an Approve decision waits for an answer.
	ApprovalTimeout time.Duration
}

// Blocked reports whether the call must not run.
func (d Decision) Blocked() bool { return d.Action == Block }

// NeedsApproval reports whether the call waits for a person's answer.
func (d Decision) NeedsApproval() bool { return d.Action == Approve }

type compiledRule struct {
	Rule
	prg cel.Program
}

type compiledPolicy struct {
	Policy
	rules []compiledRule
}

// celEnv declares the rules' variables. A listing element is a typed
// object (its fields are the JSON names: id, kind, label, bbox, conf), so a
// misspelt field is a compile error the manager reports before any pod,
// not a runtime error that blocks every call.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	elem := cel.ObjectType("listing.Element")
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[listing.Element](), ext.ParseStructTag("json")),
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("screen", cel.ListType(elem)),
		cel.Variable("targets", cel.ListType(elem)),
		cel.Variable("text", cel.StringType),
		ext.Strings(),
	)
})

// compileRules compiles every rule of every policy; the error names the
// policy and the rule and quotes CEL's message.
func compileRules(set Set) ([]compiledPolicy, error) {
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("tool policy CEL environment: %w", err)
	}
	var errs []error
	out := make([]compiledPolicy, 0, len(set.Policies))
	for _, p := range set.Policies {
		cp := compiledPolicy{Policy: p}
		for _, r := range p.Rules {
			prg, err := compileRule(env, r)
			if err != nil {
				errs = append(errs, fmt.Errorf("ToolPolicy %s, rule %s: %w", p.Name, r.Name, err))
				continue
			}
			cp.rules = append(cp.rules, compiledRule{Rule: r, prg: prg})
		}
		out = append(out, cp)
	}
	return out, errors.Join(errs...)
}

func compileRule(env *cel.Env, r Rule) (cel.Program, error) {
	switch r.Action {
	case Block, Approve, Allow:
	default:
		return nil, fmt.Errorf("action %q: want Block, Approve or Allow", r.Action)
	}
	ast, iss := env.Compile(r.Expression)
	if iss.Err() != nil {
		return nil, fmt.Errorf("expression %q does not compile: %w", r.Expression, iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("expression %q is a %s, want a bool", r.Expression, t)
	}
	return env.Program(ast, cel.CostLimit(costLimit), cel.EvalOptions(cel.OptOptimize))
}

// decideRules applies the rules: within a policy the first matching rule
// decides; across policies the strongest decision wins. A rule that cannot be
// evaluated (a missing argument it did not guard with has(), a cost limit)
// blocks the call, and its message says why: a safety rule fails closed.
func decideRules(policies []compiledPolicy, c Call) Decision {
	vars := activation(c)
	var best Decision
	for _, p := range policies {
		for _, r := range p.rules {
			if !forTool(r.Tools, c.Tool) {
				continue
			}
			d := Decision{Action: r.Action, Policy: p.Name, Rule: r.Name, Message: r.Message,
				ApprovalTimeout: time.Duration(p.ApprovalTimeout()) * time.Second}
			v, _, err := r.prg.Eval(vars)
			if err != nil {
				d.Action = Block
				d.Message = fmt.Sprintf("ToolPolicy %s rule %s could not be evaluated for %s (%v), so the call is blocked", p.Name, r.Name, c.Tool, err)
			} else if matched, ok := v.Value().(bool); !ok || !matched {
				if !ok {
					d.Action = Block
					d.Message = fmt.Sprintf("ToolPolicy %s rule %s gave %v, not a bool, so the call is blocked", p.Name, r.Name, v)
				} else {
					continue
				}
			}
			if d.Action.strength() > best.Action.strength() {
				best = d
			}
			break // the first matching rule decides for its policy
		}
	}
	return best
}

// activation is the rules' variables for a call.
func activation(c Call) map[string]any {
	args := map[string]any{}
	if len(c.Args) > 0 {
		_ = json.Unmarshal(c.Args, &args) // the engine validated the args against the tool's schema
	}
	screen := c.Screen
	if screen == nil {
		screen = []listing.Element{}
	}
	targets := []listing.Element{}
	for _, pt := range points(c.Tool, args) {
		for _, e := range c.Screen {
			if e.Contains(pt[0], pt[1]) {
				targets = append(targets, e)
			}
		}
	}
	return map[string]any{"tool": c.Tool, "args": args, "screen": screen, "targets": targets, "text": texts(c.Tool, args)}
}

// points are where a call's gestures act: each bbox's centre (a sequence's
// steps each have theirs).
func points(tool string, args map[string]any) [][2]float64 {
	var out [][2]float64
	if c, ok := centre(args["bbox"]); ok {
		out = append(out, c)
	}
	if tool == "sequence" {
		steps, _ := args["actions"].([]any)
		for _, s := range steps {
			step, _ := s.(map[string]any)
			arg := step["arg"]
			if m, ok := arg.(map[string]any); ok {
				arg = m["bbox"]
			}
			if c, ok := centre(arg); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

func centre(v any) ([2]float64, bool) {
	b, ok := v.([]any)
	if !ok || len(b) != 4 {
		return [2]float64{}, false
	}
	var f [4]float64
	for i, x := range b {
		n, ok := x.(float64)
		if !ok {
			return [2]float64{}, false
		}
		f[i] = n
	}
	return [2]float64{(f[0] + f[2]) / 2, (f[1] + f[3]) / 2}, true
}

// texts is the text a call carries to the phone: send_to_clipboard's, and
// a sequence's send_to_clipboard steps', joined by newlines.
func texts(tool string, args map[string]any) string {
	if t, ok := args["text"].(string); ok && tool == "send_to_clipboard" {
		return t
	}
	out := ""
	if tool == "sequence" {
		steps, _ := args["actions"].([]any)
		for _, s := range steps {
			step, _ := s.(map[string]any)
			if step["tool_name"] != "send_to_clipboard" {
				continue
			}
			t, _ := step["arg"].(string)
			if m, ok := step["arg"].(map[string]any); ok {
				t, _ = m["text"].(string)
			}
			if out != "" {
				out += "\n"
			}
			out += t
		}
	}
	return out
}
