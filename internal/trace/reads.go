package trace

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

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
	if at := rc.who.Attempt; at != nil {
		if at.Namespace != ns || at.Run != name {
			return nil, fail(http.StatusForbidden, "pod %s/%s's token reads the trace of %s/%s attempt %d only, not %s/%s", at.Namespace, at.Pod, at.Namespace, at.Run, at.Attempt, ns, name)
		}
	} else {
		ok, err := s.Auth.Can(ctx, rc.who, "get", ns)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fail(http.StatusForbidden, "%s may not get agentruns in namespace %s", rc.who.User, ns)
		}
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
	if at := rc.who.Attempt; at != nil {
		return nil, fail(http.StatusForbidden, "pod %s/%s's token reads the trace of %s/%s attempt %d only; it lists no runs", at.Namespace, at.Pod, at.Namespace, at.Run, at.Attempt)
	}
	list := &farmv1.AgentRunList{}
	var opts []client.ListOption
	if f.Namespace != "" {
		ok, err := s.Auth.Can(ctx, rc.who, "list", f.Namespace)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fail(http.StatusForbidden, "%s may not list agentruns in namespace %s", rc.who.User, f.Namespace)
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
			if ok, err = s.Auth.Can(ctx, rc.who, "list", r.Namespace); err != nil {
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
	if at := rc.who.Attempt; at != nil && (at.Attempt != n || at.RunUID != run.UID) {
		return nil, 0, "", fail(http.StatusForbidden, "pod %s/%s's token reads the trace of %s/%s attempt %d only, not attempt %d", at.Namespace, at.Pod, at.Namespace, at.Run, at.Attempt, n)
	}
	return run, n, attemptPrefix(run.Namespace, run.Name, run.UID, n), nil
}

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
