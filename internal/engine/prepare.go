package engine

import (
	"context"
	"fmt"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/repair"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// prepare repairs the transcript, runs routine compaction and preflight, and builds the request.
func (s *Session) prepare(ctx context.Context) (*provider.Request, *Ending) {
	s.repair()
	s.compact(ctx, compaction.BeforeRequest)
	for tries := 0; ; tries++ {
		req := s.request()
		est := s.cfg.Estimator.Estimate(req)
		err := tokens.Preflight(est, s.cfg.ContextWindow, s.cfg.ReplyReserve)
		if err == nil {
			return req, s.overBudget(est)
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
	var tail []provider.Message
	if s.cfg.Pinned != nil {
		tail = s.cfg.Pinned.Tail(s.state)
	}
	if n, ok := s.cfg.Compactor.(compaction.Nudger); ok {
		if text := n.Nudge(s.transcript); text != "" {
			tail = append(tail, provider.Message{Role: provider.RoleUser, Text: text})
		}
	}
	if len(tail) > 0 {
		msgs = append(msgs[:len(msgs):len(msgs)], tail...)
	}
	if s.lastChance {
		tools = nil
		for _, t := range s.tools {
			if t.Name == contract.ToolNote || t.Name == contract.ToolEndSession {
				tools = append(tools, t)
			}
		}
	}
	return &provider.Request{System: s.system, Messages: msgs, Tools: tools, Pinned: len(tail)}
}
