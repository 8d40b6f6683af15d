package engine

import (
	"context"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/provider"
)

// ask calls the model. Retryable failures are retried by class behind the
// circuit breaker; an overflow goes to compaction; a fatal error ends the session.
func (s *Session) ask(ctx context.Context, req *provider.Request) (*provider.Reply, *Ending) {
	turn := s.state.Turn + 1
	sink := &eventSink{s: s, turn: turn}
	for attempt := 0; ; {
		callCtx, cancel := context.WithTimeout(ctx, s.deadline.Sub(s.cfg.Clock.Now()))
		callCtx, span := s.chatSpan(callCtx, turn, req)
		reply, err := s.cfg.Provider.Stream(callCtx, req, sink)
		s.endChat(span, reply, err)
		cancel()
		if err == nil {
			s.cfg.Breaker.Success()
			s.cfg.Estimator.Observe(req, reply.Usage.PromptTokens)
			if c, ok := s.cfg.Estimator.(tokens.Calibrated); ok {
				cal := c.Calibration()
				s.state.Tokens = &cal
			}
			if c, ok := s.cfg.Provider.(provider.Chained); ok {
				s.state.Chain = c.ChainState()
			}
			return reply, nil
		}
		pe := provider.AsError(err)
		switch {
		case ctx.Err() != nil:
			return nil, s.cancelled()
		case !s.cfg.Clock.Now().Before(s.deadline), pe.Class == provider.ClassCanceled:
			// The call's only other deadline is the session budget.
			return nil, s.sessionDeadline()
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
			end := stuck(contract.ReasonFatalError, "stopped: the model provider refused the request: "+pe.Error())
			// A key, an account or a model name does not fix itself: no
			// fresh attempt can succeed (exit 13). An invalid request may
			// come from this transcript, so a fresh attempt may help.
			end.Retryable = !noRetry(pe.Class)
			return nil, end
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
		return s.sessionDeadline()
	}
	if err := s.cfg.Clock.Sleep(ctx, d); err != nil {
		return s.cancelled()
	}
	return nil
}

// eventSink streams the reply's deltas as events.
type eventSink struct {
	s    *Session
	turn int
}

func (e *eventSink) Text(d string)     { e.s.emit(events.TextDelta(e.turn, d)) }
func (e *eventSink) Thinking(d string) { e.s.emit(events.Thinking(e.turn, d)) }

// noRetry reports the provider failures a fresh attempt cannot fix: auth,
// billing and an unknown model are fatal with no retry (docs/loop-contract.md).
func noRetry(c provider.ErrorClass) bool {
	switch c {
	case provider.ClassAuth, provider.ClassBilling, provider.ClassModelNotFound:
		return true
	}
	return false
}
