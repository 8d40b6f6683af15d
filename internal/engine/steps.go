package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/repair"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/engine/turnshape"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig"
)

// start builds the system prompt, the tool list and the opening message.
func (s *Session) start(ctx context.Context) {
	s.deadline = s.cfg.Clock.Now().Add(s.cfg.SessionBudget)
	local := s.cfg.Tools.Specs()
	s.tools = append(s.tools, local...)
	for _, t := range s.cfg.Rig.Tools() {
		if _, shadowed := s.cfg.Tools.Lookup(t.Name); shadowed {
			s.cfg.Logf("rig tool %s is shadowed by the engine tool of the same name", t.Name)
			continue
		}
		s.tools = append(s.tools, t)
		s.rigTools[t.Name] = true
	}
	names := make([]string, 0, len(s.tools))
	for _, t := range s.tools {
		names = append(names, t.Name)
		if err := s.validator.Add(t.Name, t.Schema); err != nil {
			s.cfg.Logf("%v; its calls are checked only for being a JSON object", err)
		}
	}
	s.system = systemPrompt(s.cfg.Rig.Instructions(), s.cfg.ExtraSystem)
	s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: s.cfg.Trigger})
	s.emit(events.SessionStart(s.cfg.Run, s.cfg.Attempt, s.cfg.Provider.Name(), s.cfg.Provider.Model(), names))
	s.cfg.Hooks.SessionStart(ctx, hooks.Session{Run: s.cfg.Run, Attempt: s.cfg.Attempt,
		Provider: s.cfg.Provider.Name(), Model: s.cfg.Provider.Model(), Tools: names})
}

// checkLimits ends the session on cancel or budget, and gives one last
// chance to close when the turn limit is reached.
func (s *Session) checkLimits(ctx context.Context) *Ending {
	if ctx.Err() != nil {
		return s.cancelled()
	}
	if !s.cfg.Clock.Now().Before(s.deadline) {
		return s.budgetSpent()
	}
	if s.state.Turn < s.cfg.MaxTurns {
		return nil
	}
	if s.lastChance {
		return stuck(contract.ReasonMaxRounds, fmt.Sprintf("stopped at the turn limit (%d turns) without closing the session", s.cfg.MaxTurns))
	}
	s.lastChance = true
	s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: fmt.Sprintf(
		"You have used all %d turns of this session. Close it now: call note and end_session with the status that fits "+
			"(STUCK if the task is unfinished) and a recap of where things stand. No other tool will run.", s.cfg.MaxTurns)})
	return nil
}

func (s *Session) cancelled() *Ending {
	return stuck(contract.ReasonUserCancel, "stopped: the attempt was cancelled (SIGTERM)")
}

func (s *Session) budgetSpent() *Ending {
	return &Ending{Sentinel: contract.Stuck, Reason: contract.ReasonBudgetExhausted, Retryable: false,
		Recap: fmt.Sprintf("stopped: the session budget of %s is spent", s.cfg.SessionBudget)}
}

// prepare repairs the transcript, runs routine compaction and preflight, and builds the request.
func (s *Session) prepare(ctx context.Context) (*provider.Request, *Ending) {
	s.repair()
	s.compact(ctx, compaction.BeforeRequest)
	for tries := 0; ; tries++ {
		req := s.request()
		err := tokens.Preflight(s.cfg.Estimator.Estimate(req), s.cfg.ContextWindow)
		if err == nil {
			return req, nil
		}
		if tries >= compaction.MaxOverflowCompactions || !s.compact(ctx, compaction.Preflight) {
			s.emit(events.Error(s.state.Turn, "preflight", err.Error(), 0))
			return nil, stuck(contract.ReasonContextOverflow, "stopped: "+err.Error()+", and compaction could not shrink it")
		}
	}
}

// repair runs the pairing repair and reports what it changed.
func (s *Session) repair() {
	fixed, rep := repair.Repair(s.transcript)
	if rep.Changed() {
		s.cfg.Logf("transcript repaired: %d results supplied, %d dropped, %d call ids renamed", rep.Synthesised, rep.Dropped, rep.Renamed)
	}
	s.transcript = fixed
}

// compact asks the compaction policy to shrink the transcript; it reports whether it did.
func (s *Session) compact(ctx context.Context, why compaction.Trigger) bool {
	info := hooks.Compaction{Turn: s.state.Turn, Trigger: string(why), Messages: len(s.transcript)}
	if why != compaction.BeforeRequest {
		s.cfg.Hooks.BeforeCompaction(ctx, info)
	}
	out, changed, err := s.cfg.Compactor.Compact(ctx, why, s.state.Turn, s.transcript)
	if err != nil {
		s.cfg.Logf("compaction (%s): %v", why, err)
		changed = false
	}
	if changed {
		s.transcript = out
		s.repair()
		s.emit(events.Compaction(s.state.Turn, fmt.Sprintf("%s: %d → %d messages", why, info.Messages, len(s.transcript))))
	}
	if changed || why != compaction.BeforeRequest {
		info.Messages, info.Changed = len(s.transcript), changed
		s.cfg.Hooks.AfterCompaction(ctx, info)
	}
	return changed
}

// request is the transcript plus the pinned tail, the system prompt and the tools.
func (s *Session) request() *provider.Request {
	msgs := s.transcript
	tools := s.tools
	if s.cfg.Pinned != nil {
		if tail := s.cfg.Pinned.Tail(&s.state); len(tail) > 0 {
			msgs = append(msgs[:len(msgs):len(msgs)], tail...)
		}
	}
	if s.lastChance {
		tools = nil
		for _, t := range s.tools {
			if t.Name == ToolNote || t.Name == ToolEndSession {
				tools = append(tools, t)
			}
		}
	}
	return &provider.Request{System: s.system, Messages: msgs, Tools: tools}
}

// ask calls the model. Retryable failures are retried by class behind the
// circuit breaker; an overflow goes to compaction; a fatal error ends the session.
func (s *Session) ask(ctx context.Context, req *provider.Request) (*provider.Reply, *Ending) {
	turn := s.state.Turn + 1
	sink := &eventSink{s: s, turn: turn}
	for attempt := 0; ; {
		callCtx, cancel := context.WithTimeout(ctx, s.deadline.Sub(s.cfg.Clock.Now()))
		reply, err := s.cfg.Provider.Stream(callCtx, req, sink)
		cancel()
		if err == nil {
			s.cfg.Breaker.Success()
			s.cfg.Estimator.Observe(req, reply.Usage.PromptTokens)
			return reply, nil
		}
		pe := provider.AsError(err)
		switch {
		case ctx.Err() != nil:
			return nil, s.cancelled()
		case !s.cfg.Clock.Now().Before(s.deadline), pe.Class == provider.ClassCanceled:
			// The call's only other deadline is the session budget.
			return nil, s.budgetSpent()
		case pe.Class == provider.ClassContextOverflow:
			s.overflows++
			s.emit(events.Error(turn, string(pe.Class), pe.Error(), 0))
			if s.overflows > compaction.MaxOverflowCompactions || !s.compact(ctx, compaction.Overflow) {
				return nil, stuck(contract.ReasonCompactionExhausted, "stopped: the context overflowed and compaction could not make room ("+pe.Error()+")")
			}
			req = s.request()
			continue
		case pe.Class.Fatal():
			s.emit(events.Error(turn, string(pe.Class), pe.Error(), 0))
			return nil, stuck(contract.ReasonFatalError, "stopped: the model provider refused the request: "+pe.Error())
		}
		now := s.cfg.Clock.Now()
		if s.cfg.Breaker.Failure(now) {
			if s.cfg.Breaker.Trips() > 1 {
				s.emit(events.Error(turn, string(pe.Class), "circuit breaker open again; giving up: "+pe.Error(), 0))
				return nil, stuck(contract.ReasonCircuitBreaker, "stopped: the model provider kept failing ("+pe.Error()+")")
			}
			wait := s.cfg.Breaker.OpenUntil(now).Sub(now)
			s.emit(events.Error(turn, "circuit_open", "circuit breaker open after repeated failures: "+pe.Error(), wait))
			if end := s.sleep(ctx, wait); end != nil {
				return nil, end
			}
			continue
		}
		wait := s.cfg.Backoff.Wait(pe, attempt)
		attempt++
		s.emit(events.Error(turn, string(pe.Class), pe.Error(), wait))
		if end := s.sleep(ctx, wait); end != nil {
			return nil, end
		}
	}
}

// sleep waits, ending the session when the wait outlives the budget or is cancelled.
func (s *Session) sleep(ctx context.Context, d time.Duration) *Ending {
	if !s.cfg.Clock.Now().Add(d).Before(s.deadline) {
		return s.budgetSpent()
	}
	if err := s.cfg.Clock.Sleep(ctx, d); err != nil {
		return s.cancelled()
	}
	return nil
}

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
	for i := range msg.ToolCalls {
		if !json.Valid([]byte(msg.ToolCalls[i].Arguments)) {
			// Keep the transcript acceptable to strict servers; the raw text goes into the error result.
			calls = append(calls, msg.ToolCalls[i])
			msg.ToolCalls[i].Arguments = "{}"
			continue
		}
		calls = append(calls, msg.ToolCalls[i])
	}
	s.transcript = append(s.transcript, msg)

	switch reply.FinishReason {
	case provider.FinishContentFilter:
		s.rejectCalls(calls, "not run: the provider's content filter stopped this reply")
		s.emit(events.Error(s.state.Turn, "content_filter", "the provider's content filter stopped the reply", 0))
		return nil, &Ending{Sentinel: contract.Fail, Reason: contract.ReasonFatalError,
			Recap: "stopped: the model provider's content filter blocked the reply"}, false
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
		alone = []string{ToolEndSession}
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
	for _, c := range calls {
		hc := hooks.ToolCall{Turn: s.state.Turn, ID: c.ID, Name: c.Name, Args: json.RawMessage(c.Arguments)}
		s.emit(events.ToolStart(s.state.Turn, c.Name, c.ID, hc.Args))
		res, blocked, fault, end, err := s.runCall(ctx, hc, c.Arguments)
		if err != nil {
			// The rig is gone (or the context ended mid-call): record, then end.
			s.transcript = append(s.transcript, provider.Message{Role: provider.RoleTool, ToolCallID: c.ID, ToolName: c.Name, IsError: true, Text: "not completed: " + err.Error()})
			if errors.Is(err, rig.ErrUnavailable) {
				ending = stuck(contract.ReasonRigUnavailable, "stopped: "+err.Error())
			} else {
				ending = s.cancelled()
			}
			s.emit(events.ToolResult(s.state.Turn, c.Name, c.ID, err.Error(), true, 0, false))
			continue
		}
		if c.Name != ToolNote {
			acted = !blocked && !fault
			modelFault = fault
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
		s.emit(events.ToolResult(s.state.Turn, c.Name, c.ID, res.Text, res.IsError, len(res.Images), blocked))
	}
	if len(images) > 0 {
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: "The screen after " + imageFrom + ":", Images: images})
	}
	if ending != nil {
		return ending
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
	if s.lastChance && hc.Name != ToolNote && hc.Name != ToolEndSession {
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
	if d := s.cfg.Hooks.BeforeToolCall(ctx, hc); d.Block {
		reason := d.Reason
		if reason == "" {
			reason = hc.Name + " was blocked by policy"
		}
		return hooks.ToolResult{IsError: true, Text: "blocked: " + reason}, true, false, nil, nil
	}
	if isLocal {
		out := local.Run(ctx, &Call{Turn: s.state.Turn, ID: hc.ID, Name: hc.Name, Args: args, State: &s.state})
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
	return hooks.ToolResult{Text: r.Text, Images: r.Images, IsError: r.IsError}, false, false, nil, nil
}

func (s *Session) toolNames() []string {
	out := make([]string, 0, len(s.tools))
	for _, t := range s.tools {
		out = append(out, t.Name)
	}
	return out
}

// afterRound tells the observers and reports progress.
func (s *Session) afterRound(ctx context.Context) {
	for _, o := range s.cfg.Observers {
		o.AfterRound(ctx, &s.state, s.transcript)
	}
	s.report()
}

func (s *Session) report() {
	if s.cfg.Progress == nil {
		return
	}
	note := s.cfg.Redactor.String(s.state.LastNote)
	if len(note) > contract.MaxProgressNoteBytes {
		note = note[:contract.MaxProgressNoteBytes]
	}
	s.cfg.Progress.Report(contract.Progress{Attempt: s.cfg.Attempt, Turn: s.state.Turn, LastNote: note,
		Tokens: s.state.Usage.PromptTokens + s.state.Usage.CompletionTokens, UpdatedAt: s.cfg.Clock.Now().UTC().Format(time.RFC3339)})
}

func (s *Session) addUsage(u provider.Usage) {
	s.state.Usage.PromptTokens += u.PromptTokens
	s.state.Usage.CompletionTokens += u.CompletionTokens
	s.state.Usage.CachedTokens += u.CachedTokens
}

// finish writes the ending into the termination message, tells the hooks and emits done.
func (s *Session) finish(ctx context.Context, end *Ending) contract.TerminationMessage {
	recap := end.Recap
	if end.Reason != contract.ReasonEndTurn && s.state.LastNote != "" {
		recap += "; last note: " + s.state.LastNote
	}
	m := contract.TerminationMessage{
		Sentinel: end.Sentinel, Recap: s.cfg.Redactor.String(recap), ExitReason: end.Reason,
		Retryable: end.Sentinel == contract.Stuck && end.Retryable, Turns: s.state.Turn, Usage: s.state.Usage, Jobs: s.state.Jobs,
	}
	if m.Sentinel == contract.Wait {
		m.FollowUp = s.state.FollowUp
		if m.FollowUp == nil {
			m.FollowUp = &contract.FollowUp{AfterMinutes: DefaultFollowUpMinutes, Context: m.Recap}
		}
	}
	s.report()
	s.cfg.Hooks.SessionEnd(ctx, m)
	s.cfg.Hooks.AgentEnd(ctx, s.transcript, m)
	s.emit(events.Done(m))
	return m
}

func (s *Session) emit(ev events.Event) { s.cfg.Events.Emit(ev) }

// eventSink streams the reply's deltas as events.
type eventSink struct {
	s    *Session
	turn int
}

func (e *eventSink) Text(d string)     { e.s.emit(events.TextDelta(e.turn, d)) }
func (e *eventSink) Thinking(d string) { e.s.emit(events.Thinking(e.turn, d)) }

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
