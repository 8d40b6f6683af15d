package openai

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"strings"
	"sync"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// The chain's bounds (ours: measured in docs/benchmarks.md, "Engine").
const (
	// MaxCheckpoints is how many stored responses the adapter remembers as
	// places to continue from: the newest is the usual one; the one before
	// it serves a turn the engine rejected or a request retried.
	MaxCheckpoints = 3
	// DefaultStaleScreens is how many superseded screens a chain may hold
	// before it starts over with the compacted transcript.
	DefaultStaleScreens = 4
)

// mark is one message of a stored conversation: its fingerprint, and what
// the latest-screen policy may do to it later (drop a screen's message,
// stub the result it came from).
type mark struct {
	F      uint64 `json:"f"`
	Screen bool   `json:"s,omitempty"` // a user message with images
	Call   string `json:"c,omitempty"` // a tool result's call id
}

// checkpoint is one stored response and the conversation the service
// holds for it: the messages sent up to it, then its own reply.
type checkpoint struct {
	ID     string `json:"id"`
	Covers []mark `json:"covers"`
}

// chain is the chained Responses wire's incremental state (APIResponsesChained,
// an explicit choice: the stateless wire is the default). The service keeps
// each response's conversation, and a request may continue from a stored
// one (previous_response_id) by sending only what comes after it. The
// service cannot rewrite what it holds, while the engine rewrites its
// transcript:
//   - a superseded screen (latest screen wins) stays in the service's
//     conversation as it was sent, screen and full result, up to
//     staleScreens of them; one more and the chain starts over. The model
//     reads those stale screens, and every request bills them as input;
//   - any other rewrite (a fold, a cut result, a renamed call) starts the
//     chain over with the whole compacted transcript.
//
// The pinned tail is never in the chain: it rides in instructions.
type chain struct {
	staleScreens int

	mu          sync.Mutex
	checkpoints []checkpoint // oldest first
}

// continuation is where a request continues: the stored response and the
// index of the first transcript message the service does not have.
type continuation struct {
	cp    checkpoint
	start int
}

// from returns where a transcript can continue: the newest checkpoint whose
// conversation is the start of the transcript, but for screens superseded
// since. ok is false when there is none, or when it holds more superseded
// screens than allowed (a new chain).
func (c *chain) from(transcript []provider.Message, prints []uint64) (cont continuation, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.checkpoints) - 1; i >= 0; i-- {
		cp := c.checkpoints[i]
		start, stale, matched := match(cp.Covers, transcript, prints)
		if !matched {
			continue
		}
		// An older checkpoint holds fewer screens, but going back to it
		// sends again what the newer one had: start over instead.
		if stale > c.staleScreens || start == len(transcript) {
			return continuation{}, false
		}
		return continuation{cp: cp, start: start}, true
	}
	return continuation{}, false
}

// match walks a stored conversation beside the transcript; it returns the
// index of the first message after it and the superseded screens it holds.
func match(covers []mark, transcript []provider.Message, prints []uint64) (start, stale int, ok bool) {
	j := 0
	for _, m := range covers {
		switch {
		case j < len(prints) && prints[j] == m.F:
			j++
		case m.Screen:
			stale++ // the screen left the transcript; the service still shows it
		case m.Call != "" && j < len(transcript) && transcript[j].Role == provider.RoleTool &&
			transcript[j].ToolCallID == m.Call && strings.HasPrefix(transcript[j].Text, provider.SupersededTag):
			j++ // its screen's stub; the service still has the whole result
		default:
			return 0, 0, false
		}
	}
	return j, stale, true
}

// add records a stored response.
func (c *chain) add(cp checkpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkpoints = append(c.checkpoints, cp)
	if n := len(c.checkpoints) - MaxCheckpoints; n > 0 {
		c.checkpoints = append(c.checkpoints[:0:0], c.checkpoints[n:]...)
	}
}

// drop forgets every checkpoint: the service no longer has them.
func (c *chain) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkpoints = nil
}

func (c *chain) state() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.checkpoints) == 0 {
		return nil
	}
	b, _ := json.Marshal(c.checkpoints)
	return b
}

func (c *chain) restore(b []byte) error {
	var cps []checkpoint
	if len(b) > 0 {
		if err := json.Unmarshal(b, &cps); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkpoints = cps
	return nil
}

// marks describes messages as a checkpoint keeps them.
func marks(msgs []provider.Message, prints []uint64) []mark {
	out := make([]mark, len(msgs))
	for i := range msgs {
		out[i] = mark{F: prints[i], Screen: msgs[i].Role == provider.RoleUser && len(msgs[i].Images) > 0}
		if msgs[i].Role == provider.RoleTool {
			out[i].Call = msgs[i].ToolCallID
		}
	}
	return out
}

// fingerprint identifies a message by everything the wire would send of it.
func fingerprint(m *provider.Message) uint64 {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(string(m.Role))
	field(m.Text)
	field(m.ToolCallID)
	field(m.ToolName)
	if m.IsError {
		field("error")
	}
	for _, c := range m.ToolCalls {
		field(c.ID)
		field(c.Name)
		field(c.Arguments)
	}
	for _, r := range m.ReasoningItems {
		field(string(r))
	}
	for _, im := range m.Images {
		field(im.MIMEType)
		h.Write(im.Data)
	}
	var sum [sha256.Size]byte
	return binary.LittleEndian.Uint64(h.Sum(sum[:0]))
}

func fingerprints(msgs []provider.Message) []uint64 {
	out := make([]uint64, len(msgs))
	for i := range msgs {
		out[i] = fingerprint(&msgs[i])
	}
	return out
}
