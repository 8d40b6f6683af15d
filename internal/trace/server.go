package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Limits on what a loop may upload in one request.
const (
	MaxChunkBytes  = 4 << 20
	MaxScreenBytes = 16 << 20
)

// Server stores the traces loop pods upload and serves them to readers:
// the HTTP API (docs/ui.md, "API") and the web UI. The AgentRun API is its
// index: a trace is found through its run, and goes when its run goes.
type Server struct {
	Store Store
	// Runs reads AgentRuns (a cache in production).
	Runs client.Reader
	Auth Authority
	Logf func(format string, args ...any)

	live live
	mux  *http.ServeMux
	once sync.Once
}

// Layout of the store: runs/<namespace>/<run>/<run uid>/a<attempt>/
// events/<chunk>.jsonl and screens/<file>. The UID keeps a run re-created
// under the same name apart from the one that was deleted.
func runPrefix(ns, name string, uid types.UID) string {
	return "runs/" + ns + "/" + name + "/" + string(uid) + "/"
}

func attemptPrefix(ns, name string, uid types.UID, n int) string {
	return runPrefix(ns, name, uid) + "a" + strconv.Itoa(n) + "/"
}

var (
	chunkName = regexp.MustCompile(`^(\d{1,20})-(\d{1,9})$`)
	fileName  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// chunkKey normalises a chunk name (<process start, ns>-<sequence>) so keys
// sort in upload order.
func chunkKey(prefix, chunk string) (string, bool) {
	m := chunkName.FindStringSubmatch(chunk)
	if m == nil {
		return "", false
	}
	start, err1 := strconv.ParseUint(m[1], 10, 64)
	seq, err2 := strconv.ParseUint(m[2], 10, 32)
	if err1 != nil || err2 != nil {
		return "", false
	}
	return fmt.Sprintf("%sevents/%020d-%09d.jsonl", prefix, start, seq), true
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// ServeHTTP routes the API, the UI and the health checks.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.once.Do(s.routes)
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	m.HandleFunc("PUT /api/v1/runs/{ns}/{name}/attempts/{n}/events/{chunk}", s.putChunk)
	m.HandleFunc("PUT /api/v1/runs/{ns}/{name}/attempts/{n}/screens/{file}", s.putScreen)
	m.HandleFunc("GET /api/v1/runs", s.reader(s.listRuns))
	m.HandleFunc("GET /api/v1/runs/{ns}/{name}", s.reader(s.getRun))
	m.HandleFunc("GET /api/v1/runs/{ns}/{name}/attempts/{n}/events", s.reader(s.getEvents))
	m.HandleFunc("GET /api/v1/runs/{ns}/{name}/attempts/{n}/screens/{file}", s.reader(s.getScreen))
	m.HandleFunc("GET /api/v1/runs/{ns}/{name}/attempts/{n}/zip", s.reader(s.getZip))
	s.uiRoutes(m)
	s.mux = m
}

// httpError is an error with the status it answers.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

// reply writes err as a status and a plain-text sentence.
func (s *Server) reply(w http.ResponseWriter, err error) {
	var he *httpError
	switch {
	case errors.As(err, &he):
	case errors.Is(err, ErrUnauthenticated):
		he = &httpError{http.StatusUnauthorized, err.Error()}
	case errors.Is(err, ErrForbidden):
		he = &httpError{http.StatusForbidden, err.Error()}
	case errors.Is(err, ErrNotFound):
		he = &httpError{http.StatusNotFound, err.Error()}
	default:
		s.logf("%v", err)
		he = &httpError{http.StatusInternalServerError, err.Error()}
	}
	if he.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="clawfarm"`)
	}
	http.Error(w, he.msg, he.code)
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// writer authenticates a loop pod and checks the path names its own attempt.
func (s *Server) writer(r *http.Request) (*Writer, int, error) {
	tok := bearer(r)
	if tok == "" {
		return nil, 0, fail(http.StatusUnauthorized, "no bearer token: a loop pod sends its projected token (audience %s)", DefaultAudience)
	}
	id, err := s.Auth.Writer(r.Context(), tok)
	if err != nil {
		return nil, 0, err
	}
	ns, name := r.PathValue("ns"), r.PathValue("name")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		return nil, 0, fail(http.StatusBadRequest, "attempt %q is not a number from 1", r.PathValue("n"))
	}
	if id.Namespace != ns || id.Run != name || id.Attempt != n {
		return nil, 0, fail(http.StatusForbidden, "pod %s/%s writes the trace of %s/%s attempt %d only, not %s/%s attempt %d",
			id.Namespace, id.Pod, id.Namespace, id.Run, id.Attempt, ns, name, n)
	}
	return id, n, nil
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fail(http.StatusBadRequest, "reading the body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, fail(http.StatusRequestEntityTooLarge, "the body is over %d bytes", limit)
	}
	return b, nil
}

// putChunk stores a piece of the event stream. Chunks are idempotent: a
// retried upload replaces the same object.
func (s *Server) putChunk(w http.ResponseWriter, r *http.Request) {
	id, n, err := s.writer(r)
	if err != nil {
		s.reply(w, err)
		return
	}
	prefix := attemptPrefix(id.Namespace, id.Run, id.RunUID, n)
	key, ok := chunkKey(prefix, r.PathValue("chunk"))
	if !ok {
		s.reply(w, fail(http.StatusBadRequest, "chunk %q is not <start>-<sequence>", r.PathValue("chunk")))
		return
	}
	body, err := readBody(r, MaxChunkBytes)
	if err != nil {
		s.reply(w, err)
		return
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		s.reply(w, fail(http.StatusBadRequest, "a chunk is whole lines: it must end with a newline"))
		return
	}
	if err := s.Store.Put(r.Context(), key, body); err != nil {
		s.reply(w, err)
		return
	}
	s.live.changed(prefix)
	w.WriteHeader(http.StatusNoContent)
}

// putScreen stores one screen image.
func (s *Server) putScreen(w http.ResponseWriter, r *http.Request) {
	id, n, err := s.writer(r)
	if err != nil {
		s.reply(w, err)
		return
	}
	file := r.PathValue("file")
	if _, ok := ParseScreen(file); !ok {
		s.reply(w, fail(http.StatusBadRequest, "screen %q is not named screen-t<turn>-<seq>.<jpg|png>", file))
		return
	}
	body, err := readBody(r, MaxScreenBytes)
	if err != nil {
		s.reply(w, err)
		return
	}
	if ct := http.DetectContentType(body); ct != "image/jpeg" && ct != "image/png" {
		s.reply(w, fail(http.StatusBadRequest, "screen %s is %s, not a JPEG or PNG image", file, ct))
		return
	}
	prefix := attemptPrefix(id.Namespace, id.Run, id.RunUID, n)
	if err := s.Store.Put(r.Context(), prefix+"screens/"+file, body); err != nil {
		s.reply(w, err)
		return
	}
	s.live.changed(prefix)
	w.WriteHeader(http.StatusNoContent)
}

// readerCtx is what a read handler gets: the caller, allowed at least to
// reach the server.
type readerCtx struct {
	who *Reader
}

// reader authenticates a reader; handlers then check access per namespace.
func (s *Server) reader(h func(w http.ResponseWriter, r *http.Request, rc readerCtx)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		if tok == "" {
			s.reply(w, fail(http.StatusUnauthorized, "no bearer token: send your Kubernetes token (kubectl claw ui does it for you)"))
			return
		}
		who, err := s.Auth.Reader(r.Context(), tok)
		if err != nil {
			s.reply(w, err)
			return
		}
		h(w, r, readerCtx{who: who})
	}
}

// run gets a run the reader may read. A run the reader may not read is
// forbidden whether or not it exists.
func (s *Server) run(ctx context.Context, rc readerCtx, ns, name string) (*farmv1.AgentRun, error) {
	ok, err := s.Auth.CanRead(ctx, rc.who, ns)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fail(http.StatusForbidden, "%s may not get agentruns in namespace %s", rc.who.User, ns)
	}
	run := &farmv1.AgentRun{}
	if err := s.Runs.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fail(http.StatusNotFound, "agentrun %s/%s not found (a deleted run's trace is deleted with it)", ns, name)
		}
		return nil, err
	}
	return run, nil
}

// RunSummary is a run as the list shows it.
type RunSummary struct {
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	Phase      string    `json:"phase,omitempty"`
	Sentinel   string    `json:"sentinel,omitempty"`
	Rig        string    `json:"rig,omitempty"`
	Attempt    int32     `json:"attempt,omitempty"`
	Turn       int32     `json:"turn,omitempty"`
	MaxTurns   int32     `json:"maxTurns,omitempty"`
	Tokens     int64     `json:"tokens,omitempty"`
	Created    time.Time `json:"created"`
	Recap      string    `json:"recap,omitempty"`
	ExitReason string    `json:"exitReason,omitempty"`
}

func summarize(r *farmv1.AgentRun) RunSummary {
	s := RunSummary{Namespace: r.Namespace, Name: r.Name, Phase: string(r.Status.Phase), Sentinel: r.Status.Sentinel,
		Rig: r.Status.Rig, Attempt: r.Status.Attempt, MaxTurns: r.Spec.Limits.MaxTurns, Created: r.CreationTimestamp.Time,
		Recap: r.Status.Recap, ExitReason: r.Status.ExitReason}
	if p := r.Status.Progress; p != nil {
		s.Turn = p.Turn
	}
	if u := r.Status.Usage; u != nil {
		s.Tokens = u.PromptTokens + u.CompletionTokens
	}
	return s
}

// RunFilter narrows the runs list.
type RunFilter struct{ Namespace, Phase, Rig string }

func filterOf(r *http.Request) RunFilter {
	q := r.URL.Query()
	return RunFilter{Namespace: q.Get("namespace"), Phase: q.Get("phase"), Rig: q.Get("rig")}
}

// runs lists the runs the reader may read, newest first.
func (s *Server) runs(ctx context.Context, rc readerCtx, f RunFilter) ([]RunSummary, error) {
	list := &farmv1.AgentRunList{}
	var opts []client.ListOption
	if f.Namespace != "" {
		ok, err := s.Auth.CanRead(ctx, rc.who, f.Namespace)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fail(http.StatusForbidden, "%s may not get agentruns in namespace %s", rc.who.User, f.Namespace)
		}
		opts = append(opts, client.InNamespace(f.Namespace))
	}
	if err := s.Runs.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	allowed := map[string]bool{}
	out := []RunSummary{}
	for i := range list.Items {
		r := &list.Items[i]
		ok, seen := allowed[r.Namespace]
		if !seen {
			var err error
			if ok, err = s.Auth.CanRead(ctx, rc.who, r.Namespace); err != nil {
				return nil, err
			}
			allowed[r.Namespace] = ok
		}
		if !ok || (f.Phase != "" && !strings.EqualFold(string(r.Status.Phase), f.Phase)) || (f.Rig != "" && r.Status.Rig != f.Rig) {
			continue
		}
		out = append(out, summarize(r))
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	out, err := s.runs(r.Context(), rc, filterOf(r))
	if err != nil {
		s.reply(w, err)
		return
	}
	writeJSON(w, out)
}

// RunDetail is a run with the attempts that have a trace.
type RunDetail struct {
	RunSummary
	// Attempts with a stored trace, ascending.
	Attempts []int `json:"attempts"`
}

// attempts lists the attempt numbers with a stored trace, and those the
// run's status records (whose trace may still be on the rig's node).
func (s *Server) attempts(ctx context.Context, run *farmv1.AgentRun) ([]int, map[int]bool, error) {
	objs, err := s.Store.List(ctx, runPrefix(run.Namespace, run.Name, run.UID))
	if err != nil {
		return nil, nil, err
	}
	stored := map[int]bool{}
	prefix := runPrefix(run.Namespace, run.Name, run.UID)
	for _, o := range objs {
		seg, _, _ := strings.Cut(strings.TrimPrefix(o.Key, prefix), "/")
		if n, err := strconv.Atoi(strings.TrimPrefix(seg, "a")); err == nil && strings.HasPrefix(seg, "a") {
			stored[n] = true
		}
	}
	all := map[int]bool{}
	for n := range stored {
		all[n] = true
	}
	for _, a := range run.Status.Attempts {
		all[int(a.Attempt)] = true
	}
	if run.Status.Attempt > 0 {
		all[int(run.Status.Attempt)] = true
	}
	out := make([]int, 0, len(all))
	for n := range all {
		out = append(out, n)
	}
	sort.Ints(out)
	return out, stored, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	run, err := s.run(r.Context(), rc, r.PathValue("ns"), r.PathValue("name"))
	if err != nil {
		s.reply(w, err)
		return
	}
	_, stored, err := s.attempts(r.Context(), run)
	if err != nil {
		s.reply(w, err)
		return
	}
	d := RunDetail{RunSummary: summarize(run), Attempts: []int{}}
	for n := range stored {
		d.Attempts = append(d.Attempts, n)
	}
	sort.Ints(d.Attempts)
	writeJSON(w, d)
}

// attemptOf resolves the run and attempt a read names.
func (s *Server) attemptOf(r *http.Request, rc readerCtx) (*farmv1.AgentRun, int, string, error) {
	run, err := s.run(r.Context(), rc, r.PathValue("ns"), r.PathValue("name"))
	if err != nil {
		return nil, 0, "", err
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		return nil, 0, "", fail(http.StatusBadRequest, "attempt %q is not a number from 1", r.PathValue("n"))
	}
	return run, n, attemptPrefix(run.Namespace, run.Name, run.UID, n), nil
}

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

// readAttempt assembles an attempt from the store.
func (s *Server) readAttempt(ctx context.Context, prefix string, n int) (*AttemptTrace, error) {
	var buf bytes.Buffer
	if _, err := s.events(ctx, prefix, 0, &buf); err != nil {
		return nil, err
	}
	files, err := s.screens(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return ReadAttempt(n, &buf, files)
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

func (s *Server) getScreen(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	_, _, prefix, err := s.attemptOf(r, rc)
	if err != nil {
		s.reply(w, err)
		return
	}
	file := r.PathValue("file")
	if !fileName.MatchString(file) {
		s.reply(w, fail(http.StatusBadRequest, "bad screen name %q", file))
		return
	}
	body, err := s.Store.Get(r.Context(), prefix+"screens/"+file)
	if err != nil {
		s.reply(w, err)
		return
	}
	defer body.Close()
	ct := "image/jpeg"
	if strings.HasSuffix(file, ".png") {
		ct = "image/png"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "private, max-age=86400, immutable")
	_, _ = io.Copy(w, body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

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
