package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// start builds the system prompt, the tool list and the opening message,
// and opens the session's span, which the returned context carries.
func (s *Session) start(ctx context.Context) context.Context {
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
	s.system = systemPrompt(s.cfg.Rig.Instructions(), s.cfg.ExtraSystem, s.cfg.Bootstrap, s.cfg.SystemAppend)
	sum := sha256.Sum256([]byte(s.system))
	s.systemSHA256 = hex.EncodeToString(sum[:])
	if len(s.cfg.Resume) > 0 {
		s.transcript = append([]provider.Message(nil), s.cfg.Resume...)
		s.cfg.Logf("resumed from a snapshot at turn %d (%d messages)", s.state.Turn, len(s.transcript))
	} else {
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: s.cfg.Trigger})
	}
	ctx = s.startSpan(ctx)
	ev := events.SessionStart(s.cfg.Run, s.cfg.Attempt, s.cfg.Provider.Name(), s.cfg.Provider.Model(), names)
	ev.OTelTraceID = s.TraceID()
	s.emit(ev)
	s.emit(events.SystemPrompt(s.system, s.systemSHA256))
	s.cfg.Hooks.SessionStart(ctx, hooks.Session{Run: s.cfg.Run, Attempt: s.cfg.Attempt,
		Provider: s.cfg.Provider.Name(), Model: s.cfg.Provider.Model(), Tools: names})
	return ctx
}

// checkLimits ends the session on cancel or budget, and gives one last
// chance to close when the turn limit is reached.
func (s *Session) checkLimits(ctx context.Context) *Ending {
	if ctx.Err() != nil {
		return s.cancelled()
	}
	if !s.cfg.Clock.Now().Before(s.deadline) {
		return s.sessionDeadline()
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

// sessionDeadline ends a session whose time budget is spent: STUCK and
// retryable, since a stuck session is often only a slow phone (the input
// token budgets, which are money, end it for good: budget.go).
func (s *Session) sessionDeadline() *Ending {
	return stuck(contract.ReasonSessionDeadline, fmt.Sprintf("stopped: the session's time budget of %s is spent", s.cfg.SessionBudget))
}
