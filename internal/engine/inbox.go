package engine

import (
	"context"
	"fmt"

	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// takeInbox adds the messages delivered into the session since the last
// turn (Config.Inbox) to the transcript, one user message each, at the turn
// boundary: after the previous turn's results, before the next request.
// Each is counted in State.Steered, traced, and reported with progress.
func (s *Session) takeInbox(ctx context.Context) {
	if s.cfg.Inbox == nil {
		return
	}
	msgs := s.cfg.Inbox.Take(ctx)
	for _, m := range msgs {
		text := InboxText(m)
		s.transcript = append(s.transcript, provider.Message{Role: provider.RoleUser, Text: text})
		s.state.Steered++
		s.emit(events.Inbox(s.state.Turn, m.From, text))
	}
	if len(msgs) > 0 {
		s.report()
	}
}

// InboxText is the user message an inbox message becomes. Old turns fold
// away after a while, so the model is asked to take the instruction into its
// plan, which is pinned to every request.
func InboxText(m InboxMessage) string {
	return fmt.Sprintf("New instruction from run %s, delivered into this session while it runs: %s\n\n"+
		"Take it into your plan (update_progress) and carry on; the session's sentinel and recap now cover it too.", m.From, m.Text)
}
