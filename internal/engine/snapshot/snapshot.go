// Package snapshot keeps an attempt resumable and traceable (docs/engine.md,
// "Snapshots, traces, resume"): after every tool round the session state
// and transcript are written atomically (temp file, fsync, rename; the
// directory is not fsynced, so a power cut may cost the newest turn) to
// snapshots/<key>.json in the rig's state directory, and the session's trace
// — the event stream and every screen — goes to traces/<key>/. An attempt
// started with --resume loads the snapshot and carries on from it.
//
// Screens are written once, as JPEG files in the trace, and the snapshot
// refers to them by name, so a snapshot stays small however long the session.
package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/state"
)

// Version is the snapshot format's version.
const Version = 1

// Snapshot is what is written after every tool round.
type Snapshot struct {
	Version    int          `json:"version"`
	Key        string       `json:"key"`
	Taken      time.Time    `json:"taken"`
	State      engine.State `json:"state"`
	Transcript []message    `json:"transcript"`
}

type message struct {
	Role               provider.Role       `json:"role"`
	Text               string              `json:"text,omitempty"`
	Reasoning          string              `json:"reasoning,omitempty"`
	ToolCalls          []provider.ToolCall `json:"toolCalls,omitempty"`
	ToolCallID         string              `json:"toolCallId,omitempty"`
	ToolName           string              `json:"toolName,omitempty"`
	IsError            bool                `json:"isError,omitempty"`
	Images             []image             `json:"images,omitempty"`
	ReasoningSignature string              `json:"reasoningSignature,omitempty"`
	RedactedReasoning  []string            `json:"redactedReasoning,omitempty"`
	ReasoningItems     []json.RawMessage   `json:"reasoningItems,omitempty"`
}

type image struct {
	MIMEType string `json:"mimeType"`
	File     string `json:"file"` // relative to the state directory
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Key names an attempt's snapshot and trace: the run (namespace_name, or
// "local" without one) and the attempt number. Infrastructure retries of
// one attempt share it, which is what lets them resume.
func Key(run string, attempt int) string {
	if run == "" {
		run = "local"
	}
	return fmt.Sprintf("%s-a%d", strings.Trim(unsafe.ReplaceAllString(strings.ReplaceAll(run, "/", "_"), "-"), "-"), attempt)
}

// Writer is the round observer that writes snapshots and screens. The
// round's screens are written, and the snapshot encoded, on the loop's
// goroutine; the fsync'd write runs on the writer's own goroutine, so the
// loop does not wait for the disk. A newer snapshot replaces one still
// waiting; Flush (and Close) wait until the newest is on disk.
type Writer struct {
	dir   *state.Dir
	key   string
	now   func() time.Time
	files map[*provider.Image]string // loop goroutine only
	seq   int
	logf  func(string, ...any)
	// onScreen, when set, is told of each screen written (its base name
	// and bytes): the trace upload.
	onScreen func(file string, data []byte)

	mu      sync.Mutex
	cond    *sync.Cond
	pending []byte
	writing bool
	closed  bool
	err     error
}

// NewWriter writes snapshots of the attempt key into dir.
func NewWriter(dir *state.Dir, key string, now func() time.Time, logf func(string, ...any)) (*Writer, error) {
	if now == nil {
		now = time.Now
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(dir.Path("traces", key), 0o755); err != nil {
		return nil, fmt.Errorf("trace directory: %w", err)
	}
	w := &Writer{dir: dir, key: key, now: now, files: map[*provider.Image]string{}, logf: logf}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w, nil
}

func (w *Writer) run() {
	for {
		w.mu.Lock()
		for w.pending == nil && !w.closed {
			w.cond.Wait()
		}
		if w.pending == nil {
			w.mu.Unlock()
			return
		}
		b := w.pending
		w.pending, w.writing = nil, true
		w.mu.Unlock()
		err := state.WriteFileAtomicSyncFile(path(w.dir, w.key), b)
		if err != nil {
			w.logf("snapshot: %v", err)
		}
		w.mu.Lock()
		w.writing, w.err = false, err
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// Flush waits until the newest snapshot is on disk and returns the last write's error.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.pending != nil || w.writing {
		w.cond.Wait()
	}
	return w.err
}

// Close flushes and stops the writer.
func (w *Writer) Close() error {
	err := w.Flush()
	w.mu.Lock()
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	return err
}

// OnScreen registers f to be told of each new screen, on the loop's goroutine;
// f must not block.
func (w *Writer) OnScreen(f func(file string, data []byte)) { w.onScreen = f }

// TracePath is a file in this attempt's trace directory.
func (w *Writer) TracePath(name string) string { return w.dir.Path("traces", w.key, name) }

// Adopt registers the screens of a loaded snapshot, so they are not written again.
func (w *Writer) Adopt(s *Snapshot, msgs []provider.Message) {
	for i := range msgs {
		for k, im := range msgs[i].Images {
			w.files[im] = s.Transcript[i].Images[k].File
			w.seq++
		}
	}
}

// AfterRound writes the round's screens and queues the snapshot.
func (w *Writer) AfterRound(_ context.Context, s *engine.State, transcript []provider.Message) {
	if err := w.queue(s, transcript); err != nil {
		w.logf("snapshot: %v", err)
	}
}

// Write writes one snapshot and waits until it is on disk.
func (w *Writer) Write(s *engine.State, transcript []provider.Message) error {
	if err := w.queue(s, transcript); err != nil {
		return err
	}
	return w.Flush()
}

func (w *Writer) queue(s *engine.State, transcript []provider.Message) error {
	snap := Snapshot{Version: Version, Key: w.key, Taken: w.now().UTC(), State: *s, Transcript: make([]message, len(transcript))}
	live := map[*provider.Image]bool{}
	for i, m := range transcript {
		out := message{Role: m.Role, Text: m.Text, Reasoning: m.Reasoning, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID,
			ToolName: m.ToolName, IsError: m.IsError, ReasoningSignature: m.ReasoningSignature, RedactedReasoning: m.RedactedReasoning,
			ReasoningItems: m.ReasoningItems}
		for _, im := range m.Images {
			live[im] = true
			f, ok := w.files[im]
			if !ok {
				w.seq++
				f = filepath.Join("traces", w.key, fmt.Sprintf("screen-t%04d-%d%s", s.Turn, w.seq, ext(im.MIMEType)))
				// Screens skip the fsync (the snapshot's own fsync is the
				// one that counts); Load survives a screen a power cut lost.
				if err := state.WriteFileAtomicNoSync(w.dir.Path(f), im.Data); err != nil {
					return fmt.Errorf("screen %s: %w", f, err)
				}
				w.files[im] = f
				if w.onScreen != nil {
					w.onScreen(filepath.Base(f), im.Data)
				}
			}
			out.Images = append(out.Images, image{MIMEType: im.MIMEType, File: f})
		}
		snap.Transcript[i] = out
	}
	for im := range w.files { // forget screens compaction dropped; their files stay in the trace
		if !live[im] {
			delete(w.files, im)
		}
	}
	b, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("the snapshot writer is closed")
	}
	w.pending = b
	w.cond.Broadcast()
	return nil
}

func ext(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg", "":
		return ".jpg"
	}
	return ".img"
}

func path(dir *state.Dir, key string) string { return dir.Path("snapshots", key+".json") }

// ErrNone is Load's answer when the attempt has no snapshot.
var ErrNone = errors.New("no snapshot")

// Load reads an attempt's snapshot and its screens.
func Load(dir *state.Dir, key string) (*Snapshot, []provider.Message, error) {
	b, err := os.ReadFile(path(dir, key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s: %w", path(dir, key), ErrNone)
	}
	if err != nil {
		return nil, nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, nil, fmt.Errorf("snapshot %s is damaged: %w", path(dir, key), err)
	}
	if s.Version != Version {
		return nil, nil, fmt.Errorf("snapshot %s has version %d, this loop reads %d", path(dir, key), s.Version, Version)
	}
	msgs := make([]provider.Message, len(s.Transcript))
	for i, m := range s.Transcript {
		msgs[i] = provider.Message{Role: m.Role, Text: m.Text, Reasoning: m.Reasoning, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID,
			ToolName: m.ToolName, IsError: m.IsError, ReasoningSignature: m.ReasoningSignature, RedactedReasoning: m.RedactedReasoning,
			ReasoningItems: m.ReasoningItems}
		for _, im := range m.Images {
			data, err := os.ReadFile(dir.Path(im.File))
			if err != nil || len(data) == 0 {
				// A screen lost to a power cut: carry on without it; the
				// agent looks again.
				msgs[i].Text += " (this screen was lost when the previous attempt was cut; look again)"
				continue
			}
			msgs[i].Images = append(msgs[i].Images, provider.NewImage(im.MIMEType, data))
		}
	}
	return &s, msgs, nil
}
