package trace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// events reads an attempt's stream: the chunks in order, concatenated,
// skipping the first `from` chunks. It returns how many chunks there are.
func (s *Server) events(ctx context.Context, prefix string, from int, w io.Writer) (int, error) {
	objs, err := s.Store.List(ctx, prefix+"events/")
	if err != nil {
		return 0, err
	}
	for i := from; i < len(objs); i++ {
		rc, err := s.Store.Get(ctx, objs[i].Key)
		if errors.Is(err, ErrNotFound) {
			continue // removed by retention while reading
		}
		if err != nil {
			return i, err
		}
		_, err = io.Copy(w, rc)
		rc.Close()
		if err != nil {
			return i, err
		}
	}
	return len(objs), nil
}

// screens lists an attempt's screen files.
func (s *Server) screens(ctx context.Context, prefix string) ([]string, error) {
	objs, err := s.Store.List(ctx, prefix+"screens/")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.Key, prefix+"screens/"))
	}
	return out, nil
}

// readAttempt assembles an attempt from the store; stored says whether the
// store holds anything of it.
func (s *Server) readAttempt(ctx context.Context, prefix string, n int) (t *AttemptTrace, stored bool, err error) {
	var buf bytes.Buffer
	chunks, err := s.events(ctx, prefix, 0, &buf)
	if err != nil {
		return nil, false, err
	}
	files, err := s.screens(ctx, prefix)
	if err != nil {
		return nil, false, err
	}
	t, err = ReadAttempt(n, &buf, files)
	return t, chunks > 0 || len(files) > 0, err
}

// getEvents serves the stream as JSON lines or, for an EventSource, as
// server-sent events that follow the attempt until its done event.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	_, _, prefix, err := s.attemptOf(r, rc)
	if err != nil {
		s.reply(w, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		s.follow(w, r, prefix)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	var buf bytes.Buffer
	if _, err := s.events(r.Context(), prefix, 0, &buf); err != nil {
		s.reply(w, err)
		return
	}
	_, _ = w.Write(buf.Bytes())
}

// follow sends each event line as an SSE message, then waits for new
// chunks; it ends after the done event, or when the client goes.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, prefix string) {
	fl, ok := w.(http.Flusher)
	if !ok {
		s.reply(w, fail(http.StatusNotImplemented, "this connection cannot stream"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	ctx := r.Context()
	seen := 0
	screens := -1
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		wake := s.live.wait(prefix)
		var buf bytes.Buffer
		n, err := s.events(ctx, prefix, seen, &buf)
		if err != nil {
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", oneLine(err.Error()))
			fl.Flush()
			return
		}
		seen = n
		done := false
		for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			fmt.Fprintf(w, "data: %s\n\n", line)
			if bytes.Contains(line, []byte(`"type":"done"`)) {
				done = true
			}
		}
		if files, err := s.screens(ctx, prefix); err == nil && len(files) != screens {
			if screens >= 0 {
				fmt.Fprintf(w, "event: screens\ndata: %d\n\n", len(files))
			}
			screens = len(files)
		}
		fl.Flush()
		if done {
			fmt.Fprint(w, "event: end\ndata: done\n\n")
			fl.Flush()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// live wakes followers when an attempt's trace changes.
type live struct {
	mu      sync.Mutex
	waiters map[string]chan struct{}
}

// wait returns a channel closed at the prefix's next change.
func (l *live) wait(prefix string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters == nil {
		l.waiters = map[string]chan struct{}{}
	}
	ch, ok := l.waiters[prefix]
	if !ok {
		ch = make(chan struct{})
		l.waiters[prefix] = ch
	}
	return ch
}

func (l *live) changed(prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.waiters[prefix]; ok {
		close(ch)
		delete(l.waiters, prefix)
	}
}
