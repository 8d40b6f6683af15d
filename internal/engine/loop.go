package engine

import (
	"context"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Run runs the session to its end and returns the termination message.
//
// The loop (docs/engine.md, "Reading the loop"): ask the model, judge its turn, run the
// tools, append the results, ask again — until end_session closes the
// session or a limit ends it. Every rule is a named step or policy.
func (s *Session) Run(ctx context.Context) contract.TerminationMessage {
	ctx = s.start(ctx)
	defer s.crashed()
	for {
		// 1. Limits: cancel (SIGTERM), session budget, turn limit.
		if end := s.checkLimits(ctx); end != nil {
			return s.finish(ctx, end)
		}
		// 2. Prepare the request: messages delivered into the session (the
		//    inbox: steer runs) join the transcript; repair pairing,
		//    compact, preflight.
		s.takeInbox(ctx)
		req, end := s.prepare(ctx)
		if end != nil {
			return s.finish(ctx, end)
		}
		// 3. Ask the model, retrying by error class behind the breaker.
		reply, end := s.ask(ctx, req)
		if end != nil {
			return s.finish(ctx, end)
		}
		// 4. Judge the turn: finish reason, turn shape. A rejected turn gets
		//    a corrective and counts toward the malformed limit.
		calls, end, ok := s.judge(ctx, reply)
		if end != nil {
			return s.finish(ctx, end)
		}
		if !ok {
			continue
		}
		// 5. Run the calls: validate, hooks, dispatch, exactly one result each.
		if end := s.dispatch(ctx, calls); end != nil {
			return s.finish(ctx, end)
		}
		// 6. Tell the observers (the step watchdog, the snapshot) and report progress.
		s.afterRound(ctx)
	}
}
