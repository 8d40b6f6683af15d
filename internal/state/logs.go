package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultLogEntries is how many entries read_logs returns when not told (ours).
const DefaultLogEntries = 20

// MaxLogEntry bounds one log entry (ours).
const MaxLogEntry = 4000

// LogEntry is one append_log entry.
type LogEntry struct {
	Time time.Time
	Text string
}

// AppendLog appends an entry to today's log (UTC).
func (d *Dir) AppendLog(now time.Time, entry string) error {
	entry = strings.TrimSpace(entry)
	if entry == "" {
		return errors.New("append_log: the entry is empty")
	}
	if len(entry) > MaxLogEntry {
		return fmt.Errorf("append_log: the entry is %d bytes, over %d; keep it short", len(entry), MaxLogEntry)
	}
	now = now.UTC()
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(d.Path("logs", now.Format("2006-01-02")+".md"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("append_log: %w", err)
	}
	// "## " starts an entry; an entry's own lines never do.
	entry = strings.ReplaceAll(entry, "\n## ", "\n ## ")
	_, err = fmt.Fprintf(f, "## %s\n%s\n\n", now.Format("15:04:05"), entry)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append_log: %w", err)
	}
	return nil
}

// ReadLogs returns the newest n entries across the daily logs, oldest first.
func (d *Dir) ReadLogs(n int) ([]LogEntry, error) {
	if n <= 0 {
		n = DefaultLogEntries
	}
	files, err := filepath.Glob(d.Path("logs", "????-??-??.md"))
	if err != nil {
		return nil, err
	}
	sort.Sort(sort.Reverse(sort.StringSlice(files)))
	var out []LogEntry
	for _, f := range files {
		day, err := time.Parse("2006-01-02", strings.TrimSuffix(filepath.Base(f), ".md"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read_logs: %w", err)
		}
		entries := parseLog(day, string(b))
		out = append(entries, out...)
		if len(out) >= n {
			return out[len(out)-n:], nil
		}
	}
	return out, nil
}

func parseLog(day time.Time, s string) []LogEntry {
	var out []LogEntry
	for _, block := range strings.Split("\n"+s, "\n## ")[1:] {
		head, body, _ := strings.Cut(block, "\n")
		t, err := time.Parse("15:04:05", strings.TrimSpace(head))
		if err != nil {
			continue
		}
		at := time.Date(day.Year(), day.Month(), day.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
		out = append(out, LogEntry{Time: at, Text: strings.TrimSpace(body)})
	}
	return out
}
