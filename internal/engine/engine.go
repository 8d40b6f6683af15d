// Package engine is the loop inside a loop pod (docs/engine.md, "Reading the
// loop"): the model picks tools, the engine validates and runs them, feeds
// the results back and asks again, until the session closes itself with a
// sentinel or a limit ends it.
//
// loop.go tells the story in one function; each step is a method in a file
// of its own name (start, prepare, ask, judge, dispatch, finish), and each
// rule is a named policy in its own package: turnshape (the
// [note, one-other] rule), repair (one result per call), validate (JSON
// schema), breaker and backoff (provider failures), tokens (preflight),
// compaction (overflow), hooks (interception and the deny-list), events (the
// JSON-lines stream), redact (no secret ever leaves).
package engine

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/clawfarm/clawfarm/internal/clock"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/backoff"
	"github.com/clawfarm/clawfarm/internal/engine/breaker"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/redact"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/engine/validate"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// Rig is what the loop needs of the rig client.
type Rig interface {
	Tools() []provider.ToolSpec
	Instructions() string
	Call(ctx context.Context, name string, args json.RawMessage) (rig.Result, error)
}

// ProgressSink receives progress after every turn; it decides how often to
// publish it (the cluster patcher, internal/progress: at most every 2 s).
type ProgressSink interface {
	Report(p contract.Progress)
}

// Pinned renders messages pinned to the tail of every request and never
// stored in the transcript (the plan and the scratchpad: engine/plan).
type Pinned interface {
	Tail(s *State) []provider.Message
}

// RoundObserver is told after every turn's tool round (snapshots, the step
// watchdog).
type RoundObserver interface {
	AfterRound(ctx context.Context, s *State, transcript []provider.Message)
}

// Inbox holds messages delivered into a running session (steer runs). The
// engine takes them at every turn boundary and adds each as a user message.
type Inbox interface {
	Take(ctx context.Context) []InboxMessage
}

// InboxMessage is one message for the model, from the run named.
type InboxMessage struct {
	From string
	Text string
}

// Approver answers tool calls a policy sent for approval. Await blocks until
// a person answers or the request's deadline passes (a deny); the engine
// stops the session clock meanwhile.
type Approver interface {
	Await(ctx context.Context, req ApprovalRequest) ApprovalAnswer
}

// ApprovalRequest is a call held for approval.
type ApprovalRequest struct {
	ID       string
	Turn     int
	CallID   string
	Tool     string
	Args     json.RawMessage
	Policy   string
	Rule     string
	Message  string
	Deadline time.Time // no answer by then is a deny
	// Heartbeat renews the session's progress heartbeat; the Approver calls
	// it while it waits, from the goroutine that called Await.
	Heartbeat func()
}

// ApprovalAnswer is a person's answer, or the deny a timeout stands for.
type ApprovalAnswer struct {
	Approved bool
	By       string // who answered; empty on a timeout
	Reason   string
	TimedOut bool
}

// Clock tells the time and waits; tests pass a fake one.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// Config is everything a session needs.
type Config struct {
	Run     string // namespace/name, for events only
	Attempt int
	Trigger string

	MaxTurns      int           // default DefaultMaxTurns
	SessionBudget time.Duration // default DefaultSessionBudget
	ContextWindow int           // input budget in tokens; 0: no preflight limit

	// MaxErrors tool errors in a row end the session STUCK max_errors;
	// default DefaultMaxErrors.
	MaxErrors int
	// MaxInputTokens bounds the attempt's input tokens (a resumed session
	// counts what it had spent); RunInputTokensLeft is what the run has left
	// for this process. Either spent ends the session STUCK budget_exhausted,
	// not retryable. 0: no limit.
	MaxInputTokens     int64
	RunInputTokensLeft int64

	Provider provider.Provider
	Rig      Rig

	Events   *events.Emitter // nil: no events
	Progress ProgressSink    // nil: none
	Redactor *redact.Redactor

	// The policies. Nil fields get the engine's bare defaults (no
	// compaction, a fixed token ratio, note and end_session only);
	// policies.Wire fills in the production ones.
	Hooks     hooks.Hooks
	Compactor compaction.Compactor
	Estimator tokens.Estimator
	Tools     *Registry // engine-side tools; default note and end_session
	Pinned    Pinned
	Observers []RoundObserver
	// Inbox is read at every turn boundary; nil: none.
	Inbox Inbox
	// Approver answers calls a policy sent for approval; nil: such calls
	// are denied.
	Approver Approver
	Backoff  backoff.Policy
	Breaker  *breaker.Breaker
	Clock    Clock

	// ExtraSystem is appended to the system prompt (the skills index).
	ExtraSystem string
	// Bootstrap are the context files after it (the rig's, then the run's),
	// and SystemAppend the run's own addition, last.
	Bootstrap    []BootstrapFile
	SystemAppend string
	// ReplyReserve is kept free in the context window by the preflight:
	// the reply bound plus room for a fold (tokens.FoldReserve). 0: none.
	ReplyReserve int
	// State is the session state; the caller may share it with its policies
	// (plan, stuck guard) and fill it from a snapshot. Nil: a fresh one.
	State *State
	// Resume continues a session from a snapshot's transcript: the trigger
	// is not added again and the turn count goes on from State.Turn.
	Resume []provider.Message
	// Logf writes an operator log line (stderr); nil: none. Lines are redacted.
	Logf func(format string, args ...any)
	// Tracer records the session as OpenTelemetry spans (spans.go,
	// docs/otel.md); nil: none.
	Tracer trace.Tracer
}

// Ending is how and why a session ends.
type Ending struct {
	Sentinel  contract.Sentinel
	Reason    contract.ExitReason
	Retryable bool
	Recap     string
}

func stuck(reason contract.ExitReason, recap string) *Ending {
	return &Ending{Sentinel: contract.Stuck, Reason: reason, Retryable: true, Recap: recap}
}

// Session is one attempt's loop.
type Session struct {
	cfg          Config
	state        *State
	transcript   []provider.Message
	system       string
	systemSHA256 string
	tools        []provider.ToolSpec
	rigTools     map[string]bool
	validator    *validate.Validator
	deadline     time.Time

	toolErrors   int    // tool errors in a row (maxErrors)
	lastError    string // the newest of them, for the recap
	lastTool     string // the last tool whose result came back (the heartbeat)
	inputAtStart int64  // the input tokens a resumed session had already spent
	malformed    int    // malformed turns in a row
	emptyStreak  bool   // every turn of the streak had no tool calls
	lastChance   bool
	overflows    int
	requestBytes []int // per turn, for the benchmark

	screen    []listing.Element  // the latest listing a tool result carried (the tool policies read it)
	approval  *contract.Approval // the call held for a person's answer, published in progress
	approvals int                // approval requests so far, for their ids

	span      trace.Span // the session's invoke_agent span
	spanEnded bool
}

// New prepares a session.
func New(cfg Config) *Session {
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.MaxErrors <= 0 {
		cfg.MaxErrors = DefaultMaxErrors
	}
	if cfg.SessionBudget <= 0 {
		cfg.SessionBudget = DefaultSessionBudget
	}
	if cfg.Hooks == nil {
		cfg.Hooks = hooks.Chain{}
	}
	if cfg.Compactor == nil {
		cfg.Compactor = compaction.None{}
	}
	if cfg.Estimator == nil {
		cfg.Estimator = tokens.Fixed{}
	}
	if cfg.Tools == nil {
		cfg.Tools = NewRegistry()
	}
	if cfg.Breaker == nil {
		cfg.Breaker = &breaker.Breaker{}
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.State == nil {
		cfg.State = &State{}
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if c, ok := cfg.Estimator.(tokens.Calibrated); ok && cfg.State.Tokens != nil {
		c.Restore(*cfg.State.Tokens) // a resumed session goes on from what it had learned
	}
	if c, ok := cfg.Provider.(provider.Chained); ok && len(cfg.State.Chain) > 0 {
		if err := c.RestoreChain(cfg.State.Chain); err != nil {
			cfg.Logf("the snapshot's provider chain cannot be used (%v): the conversation is sent whole", err)
		}
	}
	return &Session{cfg: cfg, state: cfg.State, validator: validate.New(), rigTools: map[string]bool{},
		inputAtStart: cfg.State.Usage.PromptTokens}
}

// Transcript is the session's transcript (for tests and the agent_end hook).
func (s *Session) Transcript() []provider.Message { return s.transcript }

// RequestBytes is the encoded request size of every turn, as the adapter reported it.
func (s *Session) RequestBytes() []int { return s.requestBytes }

// RealClock is the wall clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx ends (clock.Sleep).
func (RealClock) Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }
