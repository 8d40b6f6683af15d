package rignode

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
)

// A container's log is a file of lines "<RFC3339Nano timestamp> <line>", one
// file per run of the container, so `kubectl logs --timestamps/--since/--previous` work.

// logWriter stamps each complete line a process writes and appends it to the
// log file. Past maxSize bytes the file is rotated as a kubelet rotates
// container logs: <log> becomes <log>.1, <log>.1 becomes <log>.2…, and at
// most maxFiles files (the current one included) are kept.
type logWriter struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	maxSize  int64 // 0: never rotate
	maxFiles int
	part     []byte
	now      func() time.Time
}

func newLogWriter(path string, maxSize int64, maxFiles int) (*logWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &logWriter{path: path, f: f, size: st.Size(), maxSize: maxSize, maxFiles: max(maxFiles, 2), now: time.Now}, nil
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
	if w.maxSize > 0 && w.size > 0 && w.size+int64(buf.Len()) > w.maxSize {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	n, err := w.f.Write(buf.Bytes())
	w.size += int64(n)
	return err
}

// rotate shifts the rotated files up by one, dropping the oldest, and
// starts an empty current file.
func (w *logWriter) rotate() error {
	if err := w.f.Close(); err != nil {
		return err
	}
	_ = os.Remove(rotatedLog(w.path, w.maxFiles-1))
	for i := w.maxFiles - 2; i >= 1; i-- {
		_ = os.Rename(rotatedLog(w.path, i), rotatedLog(w.path, i+1))
	}
	if err := os.Rename(w.path, rotatedLog(w.path, 1)); err != nil {
		return err
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	w.f, w.size = f, 0
	return nil
}

func rotatedLog(path string, i int) string { return path + "." + strconv.Itoa(i) }

// logFiles are the files of one run's log, oldest first: the rotated ones, then the current one.
func logFiles(path string) []string {
	var out []string
	for i := 1; ; i++ {
		if _, err := os.Stat(rotatedLog(path, i)); err != nil {
			break
		}
		out = append([]string{rotatedLog(path, i)}, out...)
	}
	return append(out, path)
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

// streamLog writes the log at path (with its rotated files) to w as opts
// ask. With Follow it keeps reading new lines — across rotations — until
// done() reports the container finished and the file is drained, or ctx ends.
func streamLog(ctx context.Context, path string, opts api.ContainerLogOpts, done func() bool, w io.Writer) error {
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

	// What is there now, rotated files first: honour Tail.
	var lines []logLine
	var f *os.File
	var r *bufio.Reader
	var partial string
	for _, name := range logFiles(path) {
		file, err := os.Open(name)
		if err != nil {
			if name == path {
				return err
			}
			continue // rotated away meanwhile
		}
		br := bufio.NewReader(file)
		for {
			s, err := br.ReadString('\n')
			if err != nil {
				partial = s
				break
			}
			lines = append(lines, parseLogLine(strings.TrimSuffix(s, "\n")))
		}
		if name == path {
			f, r = file, br
		} else {
			_ = file.Close()
		}
	}
	defer func() { _ = f.Close() }()
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
		if rotated(f, path) {
			// Everything up to the rotation has been read: go on in the new file.
			next, err := os.Open(path)
			if err == nil {
				_ = f.Close()
				f, r = next, bufio.NewReader(next)
				continue
			}
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

// rotated reports whether path is no longer the file f has open.
func rotated(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && !os.SameFile(a, b)
}
