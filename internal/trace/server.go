package trace

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Limits on what a loop may upload in one request, and by default in one
// attempt: a 300-turn session with a 300 KB screen every turn and its
// events is about 100 MB.
const (
	MaxChunkBytes          = 4 << 20
	MaxScreenBytes         = 16 << 20
	DefaultMaxAttemptBytes = 256 << 20
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
	// MaxAttemptBytes caps one attempt's uploads (DefaultMaxAttemptBytes
	// when 0).
	MaxAttemptBytes int64

	live  live
	usage usage
	mux   *http.ServeMux
	once  sync.Once
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
