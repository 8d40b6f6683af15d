package contract

import (
	"encoding/json"
	"time"
)

// Progress is what the loop patches into the AgentRun's status.progress while
// it runs (at most every ProgressInterval; docs/loop-contract.md,
// "Progress"). The JSON names match the CRD's status.progress fields, so the
// loop can send a merge patch (Patch) without importing the API types.
type Progress struct {
	Attempt   int    `json:"attempt"`
	Turn      int    `json:"turn"`
	LastNote  string `json:"lastNote,omitempty"`
	Tokens    int64  `json:"tokens"`
	LastTool  string `json:"lastTool,omitempty"`
	UpdatedAt string `json:"updatedAt"` // RFC 3339: the heartbeat, renewed on every turn and tool result
	// Steered counts the steer messages (status.joined, mode steer) the loop
	// has delivered to the model.
	Steered int `json:"steered,omitempty"`
	// Approval is the call held for a person's answer. It is always sent,
	// null when none, so that a merge patch clears an answered request.
	Approval *Approval `json:"approval"`
}

// ProgressInterval is the least time between two progress patches of one
// attempt: the pace of news (its first progress, an approval asked or
// answered, a steer delivered).
const ProgressInterval = 2 * time.Second

// DefaultProgressHeartbeat is the least time between two progress patches
// that carry no news, only a later turn, tokens, tool, note and heartbeat.
const DefaultProgressHeartbeat = 15 * time.Second

// ProgressHeartbeatFor is the heartbeat interval for a stall watchdog of
// stall (0: none): a quarter of it, so the watchdog sees three heartbeats
// go by before it judges a session stalled, within ProgressInterval and
// DefaultProgressHeartbeat.
func ProgressHeartbeatFor(stall time.Duration) time.Duration {
	if stall <= 0 {
		return DefaultProgressHeartbeat
	}
	return min(max(stall/4, ProgressInterval), DefaultProgressHeartbeat)
}

// Patch is the JSON merge patch that publishes p on the run's status
// subresource: {"status":{"progress":{...}}}.
func (p Progress) Patch() []byte {
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"progress": p}})
	return b
}

// Approval is status.progress.approval: a tool call a ToolPolicy sent for
// approval. The run's annotation AnnotationApproval answers it with
// "Approve/<ID>" or "Deny/<ID>" (ApprovalAnswer).
type Approval struct {
	ID          string `json:"id"`
	Tool        string `json:"tool"`
	Args        string `json:"args,omitempty"` // JSON, cut to MaxApprovalArgsBytes
	Policy      string `json:"policy,omitempty"`
	Rule        string `json:"rule,omitempty"`
	Message     string `json:"message,omitempty"`
	Turn        int    `json:"turn,omitempty"`
	RequestedAt string `json:"requestedAt,omitempty"`
	DeadlineAt  string `json:"deadlineAt,omitempty"`
}

// MaxApprovalArgsBytes bounds status.progress.approval.args.
const MaxApprovalArgsBytes = 2048

// MaxProgressNoteBytes bounds status.progress.lastNote (the note is at most 20 words anyway).
const MaxProgressNoteBytes = 512
