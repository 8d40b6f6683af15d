// Package compaction is the hook the loop calls to shrink its transcript:
// before each request, when preflight refuses a prompt, and when the provider
// reports a context overflow. None never compacts (the engine's default
// when no policy is wired); Policy is the production one (latest screen
// wins, turn folds).
package compaction

import (
	"context"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// MaxOverflowCompactions is how often an overflow may be answered by
// compaction in one session (docs/engine.md, "Compaction": after 5 the
// session ends STUCK compaction_exhausted).
const MaxOverflowCompactions = 5

// Trigger is why compaction is asked for.
type Trigger string

// The triggers.
const (
	BeforeRequest Trigger = "before_request" // routine, every request
	Preflight     Trigger = "preflight"      // the estimate is over budget
	Overflow      Trigger = "overflow"       // the provider said the context overflowed
)

// Compactor shrinks a transcript. It returns the new transcript and whether
// it changed anything; it must not modify msgs in place. The loop runs the
// repair pass on whatever it returns.
type Compactor interface {
	Compact(ctx context.Context, why Trigger, turn int, msgs []provider.Message) ([]provider.Message, bool, error)
}

// None never compacts: every overflow ends the session compaction_exhausted.
type None struct{}

// Compact returns msgs unchanged.
func (None) Compact(_ context.Context, _ Trigger, _ int, msgs []provider.Message) ([]provider.Message, bool, error) {
	return msgs, false, nil
}

// Nudger is a Compactor that can warn the model before it folds: the text is
// pinned to the tail of the next request ("" for none).
type Nudger interface {
	Nudge(msgs []provider.Message) string
}
