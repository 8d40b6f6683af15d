package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"unicode/utf8"
)

// MaxTerminationMessageBytes is the kubelet's limit on a termination message.
const MaxTerminationMessageBytes = 4096

// ExitReason says why a session ended (docs/loop-contract.md, "Exit codes and the termination message").
type ExitReason string

// The exit reasons the loop reports.
const (
	ReasonEndTurn             ExitReason = "end_turn"
	ReasonMaxRounds           ExitReason = "max_rounds"
	ReasonCircuitBreaker      ExitReason = "circuit_breaker"
	ReasonNoToolCalls         ExitReason = "no_tool_calls"
	ReasonUserCancel          ExitReason = "user_cancel"
	ReasonContextOverflow     ExitReason = "context_overflow"
	ReasonFatalError          ExitReason = "fatal_error"
	ReasonCompactionExhausted ExitReason = "compaction_exhausted"
	ReasonMalformedTurns      ExitReason = "malformed_turns"
	ReasonBudgetExhausted     ExitReason = "budget_exhausted"
	ReasonRigUnavailable      ExitReason = "rig_unavailable"
	// ReasonRigNotReady: the rig answered that its hardware is not set up
	// (arm or camera missing, not calibrated). The rig's state, not the
	// task's: the operator retries the attempt for free once the rig is
	// Ready again (docs/rig-contract.md, "A rig that is not set up").
	ReasonRigNotReady ExitReason = "rig_not_ready"
	// ReasonMaxErrors: too many tool errors in a row (maxErrors, docs/engine.md, "Reading the loop").
	ReasonMaxErrors ExitReason = "max_errors"
	// ReasonContentFilter: the provider's content filter stopped a reply.
	// The engine's ending, not the agent's verdict, so STUCK and retryable.
	ReasonContentFilter ExitReason = "content_filter"
	// ReasonSessionDeadline: the session's time budget (--session-seconds)
	// is spent. A slow phone is not a lost task: STUCK and retryable.
	ReasonSessionDeadline ExitReason = "session_deadline"
)

// Usage is the token usage of a session.
type Usage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	CachedTokens     int64 `json:"cachedTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
}

// FollowUp is what a WAIT asks of the operator: when to wake the next session, and what to tell it.
type FollowUp struct {
	// AfterMinutes is the delay the agent chose (a one-time job's). 0 or
	// absent = the run's spec.followUp.defaultDelayMinutes: the controller
	// owns the default, the loop never fills one in.
	AfterMinutes int    `json:"afterMinutes,omitempty"`
	Context      string `json:"context,omitempty"`
	// Job names the one-time agent job (in Jobs) this follow-up was taken
	// from: both wake the rig at the same time, and an operator that honours
	// it schedules only one of them.
	Job string `json:"job,omitempty"`
}

// JobOp is what happened to an agent-created job during the session.
type JobOp string

// Job operations.
const (
	JobCreate JobOp = "create"
	JobFinish JobOp = "finish"
)

// JobKind is one-time or periodic.
type JobKind string

// Job kinds.
const (
	JobOneTime  JobKind = "one-time"
	JobPeriodic JobKind = "periodic"
)

// Job is an agent-created job (create_job / finish_job) reported to the operator.
type Job struct {
	Op          JobOp   `json:"op"`
	ID          string  `json:"id"`
	Kind        JobKind `json:"kind,omitempty"`
	Schedule    string  `json:"schedule,omitempty"` // 5-field cron, "M H D Mon W", UTC
	Description string  `json:"description,omitempty"`
	Context     string  `json:"context,omitempty"`
	Status      string  `json:"status,omitempty"` // finish: done, fail or cancel
}

// TerminationMessage is the JSON object the loop writes to its termination log.
type TerminationMessage struct {
	Sentinel   Sentinel   `json:"sentinel"`
	Recap      string     `json:"recap"`
	ExitReason ExitReason `json:"exitReason"`
	Retryable  bool       `json:"retryable"`
	Turns      int        `json:"turns"`
	Usage      Usage      `json:"usage"`
	FollowUp   *FollowUp  `json:"followUp,omitempty"`
	Jobs       []Job      `json:"jobs,omitempty"`
	// SystemPromptSHA256 is the hex SHA-256 of the system prompt the model
	// saw (the prompt itself is in the trace, event system_prompt).
	SystemPromptSHA256 string `json:"systemPromptSHA256,omitempty"`
	// Steered is how many of the run's steer messages the session had (in
	// its opening message or delivered since): the progress patch that
	// says so may not have reached the API server before the loop ended.
	Steered int `json:"steered,omitempty"`
}

// ExitCode is the exit code that goes with the message.
func (m *TerminationMessage) ExitCode() int { return ExitCode(m.Sentinel, m.Retryable) }

// Class is what the message means to the operator.
func (m *TerminationMessage) Class() Class { return ClassOfSentinel(m.Sentinel, m.Retryable) }

// Encode renders the message within MaxTerminationMessageBytes. The recap is
// cut first, then the follow-up context, then job contexts and descriptions,
// then jobs themselves; the sentinel and counters always survive.
func (m TerminationMessage) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode termination message: %w", err)
	}
	if len(b) <= MaxTerminationMessageBytes {
		return b, nil
	}
	over := len(b) - MaxTerminationMessageBytes
	m.Recap = cut(m.Recap, over)
	if b, err = json.Marshal(m); err != nil || len(b) <= MaxTerminationMessageBytes {
		return b, err
	}
	if m.FollowUp != nil {
		f := *m.FollowUp
		f.Context = cut(f.Context, len(b)-MaxTerminationMessageBytes)
		m.FollowUp = &f
	}
	jobs := append([]Job(nil), m.Jobs...)
	m.Jobs = jobs
	for i := range jobs {
		if b, err = json.Marshal(m); err != nil || len(b) <= MaxTerminationMessageBytes {
			return b, err
		}
		jobs[i].Context = ""
		jobs[i].Description = cut(jobs[i].Description, 64)
	}
	for len(m.Jobs) > 0 {
		if b, err = json.Marshal(m); err != nil || len(b) <= MaxTerminationMessageBytes {
			return b, err
		}
		m.Jobs = m.Jobs[:len(m.Jobs)-1]
	}
	return json.Marshal(m)
}

// cut shortens s by at least n bytes (plus room for the marker), on a rune boundary.
func cut(s string, n int) string {
	const marker = "…[cut]"
	// JSON escaping can make a byte of s cost up to 6 bytes of output; cut generously.
	keep := len(s) - n - len(marker) - 16
	if keep <= 0 {
		return ""
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}

// DecodeTerminationMessage parses a termination message and checks it.
func DecodeTerminationMessage(data []byte) (*TerminationMessage, error) {
	var m TerminationMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("termination message is not the contract's JSON: %w", err)
	}
	if _, err := ParseSentinel(string(m.Sentinel)); err != nil {
		return nil, fmt.Errorf("termination message: %w", err)
	}
	return &m, nil
}

// WriteTerminationMessage writes the encoded message to path (the termination log).
func WriteTerminationMessage(path string, m TerminationMessage) error {
	b, err := m.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write termination message to %s: %w", path, err)
	}
	return nil
}
