package rignode

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
)

// A container's log is a file of lines "<RFC3339Nano timestamp> <line>", one
// file per run of the container, so `kubectl logs --timestamps/--since/--previous` work.

// logWriter stamps each complete line a process writes and appends it to the log file.
type logWriter struct {
	mu   sync.Mutex
	f    *os.File
	part []byte
	now  func() time.Time
}

func newLogWriter(path string) (*logWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	return &logWriter{f: f, now: time.Now}, nil
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		if err := w.line(w.part[:i]); err != nil {
			return 0, err
		}
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *logWriter) line(b []byte) error {
	var buf bytes.Buffer
	buf.WriteString(w.now().UTC().Format(time.RFC3339Nano))
	buf.WriteByte(' ')
	buf.Write(b)
	buf.WriteByte('\n')
	_, err := w.f.Write(buf.Bytes())
	return err
}

// Close flushes a last unterminated line and closes the file.
func (w *logWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.part) > 0 {
		_ = w.line(w.part)
		w.part = nil
	}
	return w.f.Close()
}

type logLine struct {
	at   time.Time
	text string // without the newline
}

func parseLogLine(s string) logLine {
	ts, text, ok := strings.Cut(s, " ")
	if !ok {
		return logLine{text: s}
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return logLine{text: s}
	}
	return logLine{at: at, text: text}
}

func (l logLine) render(timestamps bool) string {
	if timestamps && !l.at.IsZero() {
		return l.at.Format(time.RFC3339Nano) + " " + l.text + "\n"
	}
	return l.text + "\n"
}

// tailText is the last lines of a log, at most maxLines lines and maxBytes
// bytes, without timestamps (the kubelet's FallbackToLogsOnError: 80 lines, 2048 bytes).
func tailText(path string, maxLines, maxBytes int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(parseLogLine(l).render(false))
		}
	}
	s := b.String()
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
	}
	return s
}

// streamLog writes the log at path to w as opts ask. With Follow it keeps
// reading new lines until done() reports the container finished and the file
// is drained, or ctx ends.
func streamLog(ctx context.Context, path string, opts api.ContainerLogOpts, done func() bool, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	since := opts.SinceTime
	if opts.SinceSeconds > 0 {
		since = time.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	written := 0
	emit := func(l logLine) bool {
		if !since.IsZero() && !l.at.IsZero() && l.at.Before(since) {
			return true
		}
		s := l.render(opts.Timestamps)
		if opts.LimitBytes > 0 && written+len(s) > opts.LimitBytes {
			s = s[:opts.LimitBytes-written]
		}
		n, err := io.WriteString(w, s)
		written += n
		if fl, ok := w.(interface{ Flush() }); ok {
			fl.Flush()
		}
		return err == nil && (opts.LimitBytes <= 0 || written < opts.LimitBytes)
	}

	r := bufio.NewReader(f)
	// What is there now: honour Tail.
	var lines []logLine
	var partial string
	for {
		s, err := r.ReadString('\n')
		if err != nil {
			partial = s
			break
		}
		lines = append(lines, parseLogLine(strings.TrimSuffix(s, "\n")))
	}
	if opts.Tail > 0 && len(lines) > opts.Tail {
		lines = lines[len(lines)-opts.Tail:]
	}
	for _, l := range lines {
		if !emit(l) {
			return nil
		}
	}
	if !opts.Follow {
		return nil
	}
	for {
		finished := done()
		for {
			s, err := r.ReadString('\n')
			partial += s
			if err != nil {
				break
			}
			if !emit(parseLogLine(strings.TrimSuffix(partial, "\n"))) {
				return nil
			}
			partial = ""
		}
		if finished {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}
