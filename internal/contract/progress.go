package contract

// Progress is what the loop patches into the AgentRun's status.progress while
// it runs (at most every 2 s). The JSON names match the CRD's status.progress
// fields, so the loop can send a merge patch without importing the API types:
//
//	{"status":{"progress":{...}}} to the status subresource.
type Progress struct {
	Attempt   int    `json:"attempt"`
	Turn      int    `json:"turn"`
	LastNote  string `json:"lastNote,omitempty"`
	Tokens    int64  `json:"tokens"`
	LastTool  string `json:"lastTool,omitempty"`
	UpdatedAt string `json:"updatedAt"` // RFC 3339: the heartbeat, renewed on every turn and tool result
}

// MaxProgressNoteBytes bounds status.progress.lastNote (the note is at most 20 words anyway).
const MaxProgressNoteBytes = 512
