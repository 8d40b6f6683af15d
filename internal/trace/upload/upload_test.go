package upload

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/trace"
)

// oneWriter lets every token write ns/run attempt 1: the authority itself
// is tested against a real API server in package trace.
type oneWriter struct{}

func (oneWriter) Writer(context.Context, string) (*trace.Writer, error) {
	return &trace.Writer{Namespace: "ns", Run: "run", RunUID: "uid", Attempt: 1, Pod: "run-a1"}, nil
}
func (oneWriter) Reader(context.Context, string) (*trace.Reader, error) {
	return nil, trace.ErrUnauthenticated
}
func (oneWriter) Can(context.Context, *trace.Reader, string, string) (bool, error) {
	return false, nil
}

// traceServer serves a real trace server on addr, over store.
func traceServer(t *testing.T, addr string, store trace.Store) (stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: &trace.Server{Store: store, Auth: oneWriter{}, Logf: t.Logf}}
	go hs.Serve(l)
	var once sync.Once
	stop = func() { once.Do(func() { hs.Close() }) }
	t.Cleanup(stop)
	return stop
}

// freeAddr is an address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

type notices struct {
	mu   sync.Mutex
	list []string
}

func (n *notices) add(s string) { n.mu.Lock(); n.list = append(n.list, s); n.mu.Unlock() }
func (n *notices) get() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.list...)
}

func newUploader(t *testing.T, addr string, n *notices, maxBuffer int) *Uploader {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("projected-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return New(Config{URL: "http://" + addr, TokenFile: tok, Namespace: "ns", Run: "run", Attempt: 1,
		LocalTrace: "/state/traces/ns_run-a1/", MaxBuffer: maxBuffer, FlushEvery: 20 * time.Millisecond, Notice: n.add})
}

// stored reads back the attempt's events and screen names.
func stored(t *testing.T, store trace.Store) (string, []string) {
	t.Helper()
	ctx := context.Background()
	objs, err := store.List(ctx, "runs/ns/run/uid/a1/")
	if err != nil {
		t.Fatal(err)
	}
	var ev bytes.Buffer
	var screens []string
	for _, o := range objs {
		if strings.Contains(o.Key, "/screens/") {
			screens = append(screens, filepath.Base(o.Key))
			continue
		}
		rc, err := store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&ev, rc)
		rc.Close()
	}
	return ev.String(), screens
}

var jpegHead = []byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F', 0}

func session(u *Uploader, turns int, between func(turn int)) string {
	var all strings.Builder
	for i := 1; i <= turns; i++ {
		line := fmt.Sprintf(`{"type":"tool_result","turn":%d,"text":"%s"}`+"\n", i, strings.Repeat("x", 100))
		u.Write([]byte(line))
		all.WriteString(line)
		u.Screen(fmt.Sprintf("screen-t%04d-%d.jpg", i, i), append(append([]byte{}, jpegHead...), byte(i)))
		if between != nil {
			between(i)
		}
	}
	return all.String()
}

func TestEverythingArrivesInOrder(t *testing.T) {
	store, _ := trace.NewFSStore(t.TempDir())
	addr := freeAddr(t)
	traceServer(t, addr, store)
	var n notices
	u := newUploader(t, addr, &n, 0)
	want := session(u, 50, func(i int) {
		if i%10 == 0 {
			time.Sleep(30 * time.Millisecond) // let several chunks form
		}
	})
	st := u.Close(context.Background())
	got, screens := stored(t, store)
	if got != want || len(screens) != 50 || st.Waiting != 0 || st.Dropped != 0 {
		t.Errorf("stored %d bytes of events (want %d, equal: %v) and %d screens; stats %+v", len(got), len(want), got == want, len(screens), st)
	}
	if len(n.get()) != 0 {
		t.Errorf("notices with a healthy server: %q", n.get())
	}
}

// A trace server that is down for the whole session: writing never waits,
// the loop is told once, and Close gives up in about two seconds.
func TestServerDownForTheWholeSession(t *testing.T) {
	addr := freeAddr(t)
	var n notices
	u := newUploader(t, addr, &n, 0)
	session(u, 100, nil)
	begin := time.Now()
	st := u.Close(context.Background())
	if took := time.Since(begin); took > closeWhileFailing+3*time.Second {
		t.Errorf("Close took %s with the server down; it waits %s at most", took, closeWhileFailing)
	}
	if st.Waiting == 0 {
		t.Errorf("stats %+v: nothing can have been sent", st)
	}
	got := n.get()
	if len(got) != 1 || !strings.Contains(got[0], "cannot be reached") || !strings.Contains(got[0], "/state/traces/ns_run-a1/") {
		t.Errorf("notices %q; want one that says the server cannot be reached and where the trace is", got)
	}
}

// The trace server starts in the middle of the session: everything written
// before and after arrives, once, in order.
func TestServerStartsMidSession(t *testing.T) {
	store, _ := trace.NewFSStore(t.TempDir())
	addr := freeAddr(t)
	var n notices
	u := newUploader(t, addr, &n, 0)
	want := session(u, 60, func(i int) {
		switch i {
		case 20:
			time.Sleep(300 * time.Millisecond) // a few failed sends
		case 30:
			traceServer(t, addr, store)
		}
	})
	st := u.Close(context.Background())
	got, screens := stored(t, store)
	if got != want || len(screens) != 60 || st.Waiting != 0 {
		t.Errorf("stored %d bytes (want %d, equal %v), %d screens; stats %+v", len(got), len(want), got == want, len(screens), st)
	}
}

// The server goes away mid-session and comes back: nothing is lost.
func TestServerRestartsMidSession(t *testing.T) {
	store, _ := trace.NewFSStore(t.TempDir())
	addr := freeAddr(t)
	stop := traceServer(t, addr, store)
	var n notices
	u := newUploader(t, addr, &n, 0)
	want := session(u, 60, func(i int) {
		switch i {
		case 15:
			time.Sleep(100 * time.Millisecond)
			stop()
		case 25:
			time.Sleep(300 * time.Millisecond)
		case 35:
			traceServer(t, addr, store)
		}
	})
	u.Close(context.Background())
	got, screens := stored(t, store)
	if got != want || len(screens) != 60 {
		t.Errorf("stored %d bytes (want %d, equal %v), %d screens", len(got), len(want), got == want, len(screens))
	}
}

// A buffer that overflows drops what does not fit and says so once.
func TestOverflowIsBoundedAndSaid(t *testing.T) {
	addr := freeAddr(t)
	var n notices
	u := newUploader(t, addr, &n, 4096)
	session(u, 200, nil)
	u.mu.Lock()
	queued := u.queued
	u.mu.Unlock()
	if queued > 4096 {
		t.Errorf("%d bytes queued, the bound is 4096", queued)
	}
	st := u.Close(context.Background())
	if st.Dropped == 0 {
		t.Errorf("stats %+v: want items dropped", st)
	}
	over := 0
	for _, s := range n.get() {
		if strings.Contains(s, "more than 4096 bytes") {
			over++
		}
	}
	if over != 1 {
		t.Errorf("notices %q; want one overflow notice", n.get())
	}
}
