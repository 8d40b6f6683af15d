// Package events is the loop's live event stream: one JSON object per line
// on stdout, so `kubectl logs` is the stream (docs/engine.md, "Events").
// Events travel on three streams — lifecycle (session start, error,
// compaction, done), assistant (text deltas, thinking) and tool (tool start,
// tool result) — and every constructor for them is here. Every line passes the redactor.
package events

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/redact"
)

// Streams.
const (
	StreamLifecycle = "lifecycle"
	StreamAssistant = "assistant"
	StreamTool      = "tool"
)

// Types.
const (
	TypeSessionStart = "session_start"
	TypeSystemPrompt = "system_prompt"
	TypeTextDelta    = "text_delta"
	TypeThinking     = "thinking"
	TypeToolStart    = "tool_start"
	TypeToolResult   = "tool_result"
	TypeError        = "error"
	TypeCompaction   = "compaction"
	TypeDone         = "done"
	TypeInbox        = "inbox"
	// A tool call a ToolPolicy held for a person, and the answer.
	TypeApprovalRequested = "approval_requested"
	TypeApprovalAnswered  = "approval_answered"
)

// MaxResultText bounds the tool result text carried by an event.
const MaxResultText = 2000

// Event is one line of the stream. Fields are left out when empty.
type Event struct {
	TS     string `json:"ts"`
	Stream string `json:"stream"`
	Type   string `json:"type"`
	Turn   int    `json:"turn,omitempty"`

	// session_start
	Run      string   `json:"run,omitempty"`
	Attempt  int      `json:"attempt,omitempty"`
	Provider string   `json:"provider,omitempty"`
	Model    string   `json:"model,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	// OTelTraceID is the hex id of the attempt's OpenTelemetry trace, when
	// the loop exports one (docs/otel.md).
	OTelTraceID string `json:"otelTraceId,omitempty"`

	// text_delta, thinking, error, compaction, system_prompt
	Text string `json:"text,omitempty"`

	// system_prompt: the hex SHA-256 of Text
	SHA256 string `json:"sha256,omitempty"`

	// tool_start, tool_result
	Tool    string          `json:"tool,omitempty"`
	CallID  string          `json:"callId,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	IsError bool            `json:"isError,omitempty"`
	Images  int             `json:"images,omitempty"`
	Blocked bool            `json:"blocked,omitempty"`
	// Verdict of a gesture's tool_result: changed, unchanged, or absent
	// (a look, an error, or frames that could not be compared).
	Verdict string `json:"verdict,omitempty"`

	// approval_requested, approval_answered: the policy and rule that held
	// the call, the request's id, and the answer: who, approved or not,
	// after how long (Text is the rule's message, then the answer's reason).
	Policy     string `json:"policy,omitempty"`
	Rule       string `json:"rule,omitempty"`
	ApprovalID string `json:"approvalId,omitempty"`
	By         string `json:"by,omitempty"`
	Approved   *bool  `json:"approved,omitempty"`
	WaitedMs   int64  `json:"waitedMs,omitempty"`

	// error
	Class     string `json:"class,omitempty"`
	RetryInMs int64  `json:"retryInMs,omitempty"`

	// done
	Sentinel   contract.Sentinel   `json:"sentinel,omitempty"`
	ExitReason contract.ExitReason `json:"exitReason,omitempty"`
	Retryable  *bool               `json:"retryable,omitempty"`
	Turns      int                 `json:"turns,omitempty"`
	Usage      *contract.Usage     `json:"usage,omitempty"`
	Recap      string              `json:"recap,omitempty"`
}

// Emitter writes events as JSON lines. It is safe for concurrent use.
type Emitter struct {
	mu     sync.Mutex
	w      io.Writer
	redact *redact.Redactor
	now    func() time.Time
	buf    []byte
}

// NewEmitter writes to w (nil: nowhere), redacting with r.
func NewEmitter(w io.Writer, r *redact.Redactor, now func() time.Time) *Emitter {
	if w == nil {
		w = io.Discard
	}
	if now == nil {
		now = time.Now
	}
	return &Emitter{w: w, redact: r, now: now}
}

// Emit writes one event.
func (e *Emitter) Emit(ev Event) {
	if e == nil || e.w == io.Discard {
		return
	}
	ev.TS = e.now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	b = e.redact.Bytes(b)
	e.mu.Lock()
	e.buf = append(append(e.buf[:0], b...), '\n')
	_, _ = e.w.Write(e.buf)
	e.mu.Unlock()
}

// SessionStart opens a session.
func SessionStart(run string, attempt int, providerName, model string, tools []string) Event {
	return Event{Stream: StreamLifecycle, Type: TypeSessionStart, Run: run, Attempt: attempt, Provider: providerName, Model: model, Tools: tools}
}

// SystemPrompt records the system prompt the session sends with every
// request, and its hash (the termination message carries the hash too).
func SystemPrompt(text, sha256 string) Event {
	return Event{Stream: StreamLifecycle, Type: TypeSystemPrompt, Text: text, SHA256: sha256}
}

// Inbox is a message delivered into the running session (a steer run's
// trigger): from names the run it came from, text is the user message the
// model reads.
func Inbox(turn int, from, text string) Event {
	return Event{Stream: StreamLifecycle, Type: TypeInbox, Turn: turn, Run: from, Text: text}
}

// ApprovalRequested is a call a ToolPolicy held for a person's answer.
func ApprovalRequested(turn int, id, tool, callID string, args json.RawMessage, policy, rule, message string) Event {
	return Event{Stream: StreamTool, Type: TypeApprovalRequested, Turn: turn, ApprovalID: id, Tool: tool, CallID: callID, Args: args,
		Policy: policy, Rule: rule, Text: message}
}

// ApprovalAnswered is the answer: by whom (empty when none came in time),
// approved or not, the reason, and how long the session waited.
func ApprovalAnswered(turn int, id, tool, callID, by string, approved bool, reason string, waited time.Duration) Event {
	return Event{Stream: StreamTool, Type: TypeApprovalAnswered, Turn: turn, ApprovalID: id, Tool: tool, CallID: callID,
		By: by, Approved: &approved, Text: reason, WaitedMs: waited.Milliseconds()}
}

// TextDelta is a piece of the assistant's text.
func TextDelta(turn int, text string) Event {
	return Event{Stream: StreamAssistant, Type: TypeTextDelta, Turn: turn, Text: text}
}

// Thinking is a piece of the assistant's reasoning.
func Thinking(turn int, text string) Event {
	return Event{Stream: StreamAssistant, Type: TypeThinking, Turn: turn, Text: text}
}

// ToolStart is a tool call about to run (or refused: blocked, invalid).
func ToolStart(turn int, tool, callID string, args json.RawMessage) Event {
	if !json.Valid(args) {
		args = nil
	}
	return Event{Stream: StreamTool, Type: TypeToolStart, Turn: turn, Tool: tool, CallID: callID, Args: args}
}

// ToolResult is what a call returned.
func ToolResult(turn int, tool, callID, text string, isError bool, images int, blocked bool) Event {
	if len(text) > MaxResultText {
		text = text[:MaxResultText] + "…"
	}
	return Event{Stream: StreamTool, Type: TypeToolResult, Turn: turn, Tool: tool, CallID: callID, Text: text,
		IsError: isError, Images: images, Blocked: blocked}
}

// WithVerdict is the tool_result e with a gesture's verdict.
func (e Event) WithVerdict(v string) Event {
	e.Verdict = v
	return e
}

// Error is a failure the loop handles (a retry, a corrective) or ends on.
func Error(turn int, class, text string, retryIn time.Duration) Event {
	return Event{Stream: StreamLifecycle, Type: TypeError, Turn: turn, Class: class, Text: text, RetryInMs: retryIn.Milliseconds()}
}

// Compaction is a compaction cycle.
func Compaction(turn int, text string) Event {
	return Event{Stream: StreamLifecycle, Type: TypeCompaction, Turn: turn, Text: text}
}

// Done ends the session.
func Done(m contract.TerminationMessage) Event {
	r := m.Retryable
	u := m.Usage
	return Event{Stream: StreamLifecycle, Type: TypeDone, Sentinel: m.Sentinel, ExitReason: m.ExitReason, Retryable: &r,
		Turns: m.Turns, Usage: &u, Recap: m.Recap}
}
