package state

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// MaxMemoryBytes bounds memory.md (ours: it is loaded into the context whole).
const MaxMemoryBytes = 64 << 10

// ReadMemory returns memory.md ("" when there is none yet).
func (d *Dir) ReadMemory() (string, error) {
	b, err := os.ReadFile(d.Path("memory.md"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read memory: %w", err)
	}
	return string(b), nil
}

// SaveMemory appends an entry to memory.md, stamped with the date.
func (d *Dir) SaveMemory(now time.Time, text string) error {
	text = strings.TrimSpace(text)
	if text == "" {
		return errors.New("save_memory: the text is empty")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, err := d.ReadMemory()
	if err != nil {
		return err
	}
	next := cur
	if next != "" && !strings.HasSuffix(next, "\n") {
		next += "\n"
	}
	next += "- (" + now.UTC().Format("2006-01-02") + ") " + text + "\n"
	return d.writeMemory(next)
}

// UpdateMemory replaces the one occurrence of old in memory.md by new (new
// may be empty: the passage is deleted). old must occur exactly once.
func (d *Dir) UpdateMemory(old, new string) error {
	if old == "" {
		return errors.New("update_memory: old is empty; give the exact text to replace")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, err := d.ReadMemory()
	if err != nil {
		return err
	}
	switch n := strings.Count(cur, old); n {
	case 0:
		return fmt.Errorf("update_memory: %q is not in memory.md; read_memory shows its exact text", clip(old, 80))
	case 1:
	default:
		return fmt.Errorf("update_memory: %q occurs %d times in memory.md; quote more of it so it is unique", clip(old, 80), n)
	}
	return d.writeMemory(strings.Replace(cur, old, new, 1))
}

func (d *Dir) writeMemory(s string) error {
	if len(s) > MaxMemoryBytes {
		return fmt.Errorf("memory.md would be %d bytes, over the %d-byte limit: update_memory to shorten old entries first", len(s), MaxMemoryBytes)
	}
	if err := WriteFileAtomic(d.Path("memory.md"), []byte(s)); err != nil {
		return fmt.Errorf("write memory: %w", err)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
