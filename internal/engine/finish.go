package engine

import (
	"context"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// afterRound tells the observers and reports progress.
func (s *Session) afterRound(ctx context.Context) {
	for _, o := range s.cfg.Observers {
		o.AfterRound(ctx, s.state, s.transcript)
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
		Tokens: s.state.Usage.PromptTokens + s.state.Usage.CompletionTokens, LastTool: s.lastTool, UpdatedAt: s.cfg.Clock.Now().UTC().Format(time.RFC3339),
		Steered: s.state.Steered, Approval: s.approval})
}

func (s *Session) addUsage(u provider.Usage) {
	s.state.Usage.PromptTokens += u.PromptTokens
	s.state.Usage.CompletionTokens += u.CompletionTokens
	s.state.Usage.CachedTokens += u.CachedTokens
	s.state.Usage.CacheWriteTokens += u.CacheWriteTokens
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
		SystemPromptSHA256: s.systemSHA256, Steered: s.state.Steered,
	}
	if m.Sentinel == contract.Wait {
		m.FollowUp = s.state.FollowUp
		if m.FollowUp == nil {
			// The agent chose no delay: afterMinutes stays 0, which the
			// controller reads as the run's spec.followUp.defaultDelayMinutes.
			m.FollowUp = &contract.FollowUp{Context: m.Recap}
		}
	}
	s.report()
	s.cfg.Hooks.SessionEnd(ctx, m)
	s.cfg.Hooks.AgentEnd(ctx, s.transcript, m)
	s.emit(events.Done(m))
	s.endSpan(m)
	return m
}

func (s *Session) emit(ev events.Event) { s.cfg.Events.Emit(ev) }
