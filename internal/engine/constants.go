package engine

import (
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// The loop's numbers. Each lives here once; the policies' own numbers live
// in their packages (breaker.Threshold/Cooldown, tokens.PreflightShare,
// compaction.MaxOverflowCompactions, backoff.Base/Cap), those of the pod
// contract in contract (contract.ProgressInterval, contract.ApprovalPoll),
// the provider's in provider (provider.DefaultIdleTimeout).
const (
	// MaxMalformedTurns in a row end the session STUCK (the turn-shape rule: docs/engine.md, "Reading the loop", judge).
	MaxMalformedTurns = 5
	// DefaultMaxErrors tool errors in a row end the session STUCK max_errors
	// (docs/engine.md, "Reading the loop", dispatch; the API's spec.limits.maxErrors default).
	DefaultMaxErrors = 8
	// DefaultMaxTurns is the turn limit (docs/loop-contract.md: 300).
	DefaultMaxTurns = contract.DefaultMaxTurns
	// DefaultSessionBudget is the session time budget (docs/loop-contract.md: 3600 s).
	DefaultSessionBudget = contract.DefaultSessionSeconds * time.Second
	// ScratchpadMaxChars caps the scratchpad (docs/engine.md: 8192 characters, counted in bytes).
	ScratchpadMaxChars = 8192
	// NoteMaxWords bounds a note's summary, one line (docs/rig-contract.md, "Engine-side tools": 20 words).
	NoteMaxWords = 20
	// SafePointGrace bounds how long a rig action in flight may finish after a
	// cancel, so SIGTERM stops at a safe point (ours; within Kubernetes' 30 s grace).
	SafePointGrace = 25 * time.Second
)
