package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// dispatch runs a well-shaped turn's calls in order. Every call gets exactly
// one result; the screens they returned follow in one user message.
func (s *Session) dispatch(ctx context.Context, calls []provider.ToolCall) *Ending {
	var (
		images     []*provider.Image
		imageFrom  string
		ending     *Ending
		acted      bool // the non-note call ran
		modelFault bool // the non-note call was refused for the model's own output
	)
	var broken error // the rig is gone or the context ended mid-call: no later call runs
	for _, c := range calls {
		hc := hooks.ToolCall{Turn: s.state.Turn, ID: c.ID, Name: c.Name, Args: json.RawMessage(c.Arguments), Screen: s.screen}
		s.emit(events.ToolStart(s.state.Turn, c.Name, c.ID, hc.Args))
		var (
			res            hooks.ToolResult
			blocked, fault bool
			end            *Ending
			err            = broken
		)
		tctx, span := s.toolSpan(ctx, c)
		if err == nil {
			res, blocked, fault, end, err = s.runCall(tctx, hc, c.Arguments)
		}
		s.endTool(span, res.IsError || fault, blocked, err)
		if err != nil {
			// Record, then end after the turn's results are complete.
			broken = err
			s.transcript = append(s.transcript, provider.Message{Role: provider.RoleTool, ToolCallID: c.ID, ToolName: c.Name, IsError: true, Text: "not completed: " + err.Error()})
			switch {
			case ending != nil: // the first failure decides
			case errors.Is(err, rig.ErrUnavailable):
				ending = stuck(contract.ReasonRigUnavailable, "stopped: "+err.Error())
			case errors.Is(err, rig.ErrNotSetUp):
				ending = stuck(contract.ReasonRigNotReady, "stopped: "+err.Error())
			default:
				ending = s.cancelled()
			}
			s.emit(events.ToolResult(s.state.Turn, c.Name, c.ID, err.Error(), true, 0, false))
			continue
		}
		if c.Name != contract.ToolNote {
			acted = !blocked && !fault
			modelFault = fault
			s.countToolResult(c.Name, res.IsError || blocked || fault, res.Text)
		}
		if screen := listing.Parse(res.Text); screen != nil {
			s.screen = screen
		}
		s.cfg.Hooks.AfterToolCall(ctx, hc, res)
		s.cfg.Hooks.ToolResultPersist(ctx, hc, &res)
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleTool, ToolCallID: c.ID, ToolName: c.Name, IsError: res.IsError, Text: res.Text})
		if len(res.Images) > 0 {
			images, imageFrom = append(images, res.Images...), c.Name
		}
		if end != nil && ending == nil {
			ending = end
		}
		s.emit(events.ToolResult(s.state.Turn, c.Name, c.ID, res.Text, res.IsError, len(res.Images), blocked).WithVerdict(string(res.Verdict)))
		if c.Name != contract.ToolNote {
			s.report() // the heartbeat: an action's result came back
		}
	}
	if len(images) > 0 {
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: "The screen after " + imageFrom + ":", Images: images})
	}
	if ending != nil {
		return ending
	}
	if end := s.tooManyErrors(); end != nil {
		return end
	}
	switch {
	case acted:
		s.malformed = 0
	case modelFault:
		return s.countMalformed(false)
	}
	return nil
}

// runCall validates one call, asks the hooks, and runs it locally or on the rig.
func (s *Session) runCall(ctx context.Context, hc hooks.ToolCall, rawArgs string) (res hooks.ToolResult, blocked, fault bool, end *Ending, err error) {
	local, isLocal := s.cfg.Tools.Lookup(hc.Name)
	if s.lastChance && hc.Name != contract.ToolNote && hc.Name != contract.ToolEndSession {
		return hooks.ToolResult{IsError: true, Text: "not run: the turn limit is reached; only note and end_session run now"}, true, false, nil, nil
	}
	if !isLocal && !s.rigTools[hc.Name] {
		return hooks.ToolResult{IsError: true, Text: fmt.Sprintf("unknown tool %q: it does not exist; the tools are %s",
			hc.Name, strings.Join(s.toolNames(), ", "))}, false, true, nil, nil
	}
	args, verr := s.validator.Check(hc.Name, rawArgs)
	if verr != nil {
		if len(rawArgs) > 200 {
			rawArgs = rawArgs[:200] + "…"
		}
		return hooks.ToolResult{IsError: true, Text: fmt.Sprintf("not run: %s. You sent: %s", verr, rawArgs)}, false, true, nil, nil
	}
	hc.Args = args
	d := s.cfg.Hooks.BeforeToolCall(ctx, hc)
	if d.Block {
		reason := d.Reason
		if reason == "" {
			reason = hc.Name + " was blocked by policy"
		}
		return hooks.ToolResult{IsError: true, Text: "blocked: " + reason}, true, false, nil, nil
	}
	if d.Approve != nil {
		if denied := s.awaitApproval(ctx, hc, d.Approve); denied != "" {
			return hooks.ToolResult{IsError: true, Text: denied}, true, false, nil, nil
		}
		if err := ctx.Err(); err != nil { // cancelled while a person decided: the call does not run
			return hooks.ToolResult{}, false, false, nil, err
		}
	}
	if isLocal {
		out := local.Run(ctx, &Call{Turn: s.state.Turn, ID: hc.ID, Name: hc.Name, Args: args, State: s.state})
		return hooks.ToolResult{Text: out.Text, Images: out.Images, IsError: out.IsError}, false, false, out.End, nil
	}
	// A rig action in flight finishes even when the attempt is cancelled:
	// stopping a stylus mid-gesture is not a safe point.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SafePointGrace+rig.DefaultCallTimeout)
	defer cancel()
	stopOnCancel := context.AfterFunc(ctx, func() {
		time.AfterFunc(SafePointGrace, cancel)
	})
	defer stopOnCancel()
	r, err := s.cfg.Rig.Call(rctx, hc.Name, args)
	if err != nil {
		return hooks.ToolResult{}, false, false, nil, err
	}
	return hooks.ToolResult{Text: r.Text, Images: r.Images, IsError: r.IsError, Verdict: r.Verdict}, false, false, nil, nil
}

func (s *Session) toolNames() []string {
	out := make([]string, 0, len(s.tools))
	for _, t := range s.tools {
		out = append(out, t.Name)
	}
	return out
}
