// Package upload sends a loop's trace — its event stream and its screens —
// to the trace server while the session runs (docs/ui.md, "Uploads").
//
// Nothing here may fail or slow the session: Write and Screen only queue,
// a goroutine sends in order and retries with back-off, the queue is
// bounded, and Close waits a bounded time. What cannot be sent stays in the
// rig's state directory (traces/<key>/), the local trace that is always
// written; the loop says so once, in its own event stream, through Notice.
package upload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is where and how to upload.
type Config struct {
	// URL is the trace server's base URL.
	URL string
	// TokenFile holds the projected service account token; it is read
	// before each request, as the kubelet rotates it.
	TokenFile string
	// Namespace, Run and Attempt name the trace.
	Namespace, Run string
	Attempt        int
	// LocalTrace is where the full trace stays on the rig, for the notice.
	LocalTrace string
	// MaxBuffer bounds the bytes waiting to be sent (default 32 MiB).
	MaxBuffer int
	// FlushEvery is how often the pending event lines become a chunk (default 1 s).
	FlushEvery time.Duration
	// Notice is told, once each, that the server cannot be reached and that
	// the buffer overflowed. It must not call Write synchronously.
	Notice func(text string)
	Client *http.Client
	Now    func() time.Time
}

// item is one request waiting to be sent.
type item struct {
	path string
	body []byte
}

// Uploader queues the trace and sends it.
type Uploader struct {
	cfg   Config
	start int64 // names this process's chunks, so a retry of the attempt adds to its trace

	mu       sync.Mutex
	cond     *sync.Cond
	pending  bytes.Buffer // event lines not yet a chunk
	queue    []item
	queued   int // bytes in queue and pending
	seq      int
	closing  bool
	inflight bool
	failing  bool // the last send failed
	dropped  int  // items (screens, chunks) dropped on overflow
	notified map[string]bool
	notices  sync.WaitGroup // notices being told
	stop     chan struct{}
	done     chan struct{}
}

// New starts an uploader. It never fails: a bad configuration shows as
// failed sends and the notice.
func New(cfg Config) *Uploader {
	if cfg.MaxBuffer <= 0 {
		cfg.MaxBuffer = 32 << 20
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 20 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Notice == nil {
		cfg.Notice = func(string) {}
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	u := &Uploader{cfg: cfg, start: cfg.Now().UnixNano(), notified: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	u.cond = sync.NewCond(&u.mu)
	go u.run()
	return u
}

func (u *Uploader) attemptPath() string {
	return fmt.Sprintf("/api/v1/runs/%s/%s/attempts/%d", url.PathEscape(u.cfg.Namespace), url.PathEscape(u.cfg.Run), u.cfg.Attempt)
}

// Write queues event lines. It never blocks on the network and never fails.
func (u *Uploader) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closing {
		return len(p), nil
	}
	if u.queued+len(p) > u.cfg.MaxBuffer {
		u.overflowLocked()
		return len(p), nil
	}
	u.pending.Write(p)
	u.queued += len(p)
	if u.pending.Len() >= 256<<10 {
		u.sealLocked()
	}
	return len(p), nil
}

// Screen queues one screen file (its base name and bytes).
func (u *Uploader) Screen(file string, data []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closing {
		return
	}
	if u.queued+len(data) > u.cfg.MaxBuffer {
		u.overflowLocked()
		return
	}
	u.queue = append(u.queue, item{path: u.attemptPath() + "/screens/" + url.PathEscape(file), body: data})
	u.queued += len(data)
	u.cond.Broadcast()
}

// sealLocked turns the pending lines (whole lines only) into a chunk.
func (u *Uploader) sealLocked() {
	b := u.pending.Bytes()
	cut := bytes.LastIndexByte(b, '\n')
	if cut < 0 {
		return
	}
	body := append([]byte(nil), b[:cut+1]...)
	rest := append([]byte(nil), b[cut+1:]...)
	u.pending.Reset()
	u.pending.Write(rest)
	u.queue = append(u.queue, item{path: u.attemptPath() + "/events/" + strconv.FormatInt(u.start, 10) + "-" + strconv.Itoa(u.seq), body: body})
	u.seq++
	u.cond.Broadcast()
}

func (u *Uploader) overflowLocked() {
	u.dropped++
	u.noticeLocked("overflow", fmt.Sprintf("trace upload: more than %d bytes are waiting for the trace server; the rest of this attempt's trace stays on the rig in %s",
		u.cfg.MaxBuffer, u.cfg.LocalTrace))
}

// noticeLocked tells once per kind, off the caller's goroutine (Notice
// writes an event, which comes back to Write).
func (u *Uploader) noticeLocked(kind, text string) {
	if u.notified[kind] {
		return
	}
	u.notified[kind] = true
	u.notices.Add(1)
	go func() {
		defer u.notices.Done()
		u.cfg.Notice(text)
	}()
}

func (u *Uploader) run() {
	defer close(u.done)
	tick := time.NewTicker(u.cfg.FlushEvery)
	defer tick.Stop()
	go func() {
		for {
			select {
			case <-u.stop:
				return
			case <-tick.C:
				u.mu.Lock()
				u.sealLocked()
				u.mu.Unlock()
			}
		}
	}()
	backoff := 250 * time.Millisecond
	for {
		u.mu.Lock()
		for len(u.queue) == 0 && !u.closing {
			u.cond.Wait()
		}
		if len(u.queue) == 0 {
			u.mu.Unlock()
			return
		}
		it := u.queue[0]
		u.inflight = true
		u.mu.Unlock()

		err := u.send(it)

		u.mu.Lock()
		u.inflight = false
		switch {
		case err == nil:
			u.queue = u.queue[1:]
			u.queued -= len(it.body)
			u.failing = false
			backoff = 250 * time.Millisecond
		case errors.Is(err, errRefused):
			// The server will never take this one (too big, not an image…):
			// drop it, say so, go on.
			u.queue = u.queue[1:]
			u.queued -= len(it.body)
			u.dropped++
			u.noticeLocked("refused:"+err.Error(), "trace upload: "+err.Error()+"; the rig keeps it in "+u.cfg.LocalTrace)
		default:
			u.failing = true
			u.noticeLocked("unreachable", fmt.Sprintf("trace upload: the trace server cannot be reached (%v); retrying, and the full trace stays on the rig in %s", err, u.cfg.LocalTrace))
		}
		closing := u.closing
		u.cond.Broadcast()
		u.mu.Unlock()
		if err != nil && !errors.Is(err, errRefused) {
			if closing {
				return // Close does not wait for a server that is down
			}
			select {
			case <-time.After(backoff):
			case <-u.stop:
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

var errRefused = errors.New("refused")

// closeWhileFailing is how long Close waits when the last send failed.
const closeWhileFailing = 2 * time.Second

func (u *Uploader) send(it item) error {
	tok, err := os.ReadFile(u.cfg.TokenFile)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	req, err := http.NewRequest(http.MethodPut, u.cfg.URL+it.path, bytes.NewReader(it.body))
	if err != nil {
		return fmt.Errorf("%w: %v", errRefused, err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := u.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge || resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: %s %s", errRefused, resp.Status, strings.TrimSpace(string(msg)))
	}
	// 401/403 may be a token not yet projected or a pod not yet visible:
	// retried like an outage.
	return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

// Stats is what the uploader did.
type Stats struct {
	Waiting int // items not sent
	Dropped int // items given up
}

// Close seals the last lines and waits until everything is sent or the
// context ends; when the server was failing, it waits two seconds at most.
func (u *Uploader) Close(ctx context.Context) Stats {
	u.mu.Lock()
	u.sealLocked()
	if u.pending.Len() > 0 { // a last line without its newline
		u.pending.WriteByte('\n')
		u.sealLocked()
	}
	u.closing = true
	failing := u.failing
	u.cond.Broadcast()
	u.mu.Unlock()
	if failing {
		// The server is down or refusing: one more short try, no more.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeWhileFailing)
		defer cancel()
	}
	select {
	case <-u.done:
	case <-ctx.Done():
	}
	close(u.stop)
	u.mu.Lock()
	st := Stats{Waiting: len(u.queue), Dropped: u.dropped}
	u.mu.Unlock()
	// What the upload could not do is told before the attempt ends. (A
	// notice writes an event, which Write now drops: the writers close.)
	u.notices.Wait()
	return st
}
