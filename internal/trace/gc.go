package trace

import (
	"archive/zip"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Sweep removes the traces of runs that no longer exist (or were re-created:
// the UID differs) and the attempts whose newest object is older than
// retention (0 keeps them as long as their run). It returns how many run
// and attempt folders it removed.
func (s *Server) Sweep(ctx context.Context, retention time.Duration, now time.Time) (int, error) {
	objs, err := s.Store.List(ctx, "runs/")
	if err != nil {
		return 0, err
	}
	type folder struct {
		run, attempt string
		newest       time.Time
	}
	attempts := map[string]*folder{}
	var order []string
	for _, o := range objs {
		parts := strings.SplitN(o.Key, "/", 6) // runs ns name uid aN rest
		if len(parts) < 6 {
			continue
		}
		run := strings.Join(parts[:4], "/") + "/"
		att := run + parts[4] + "/"
		f := attempts[att]
		if f == nil {
			f = &folder{run: run, attempt: att}
			attempts[att] = f
			order = append(order, att)
		}
		if o.ModTime.After(f.newest) {
			f.newest = o.ModTime
		}
	}
	removed := 0
	gone := map[string]bool{}
	for _, att := range order {
		f := attempts[att]
		if _, checked := gone[f.run]; !checked {
			parts := strings.Split(strings.TrimSuffix(f.run, "/"), "/")
			exists, err := s.runExists(ctx, parts[1], parts[2], parts[3])
			if err != nil {
				return removed, err
			}
			gone[f.run] = !exists
			if !exists {
				if err := s.Store.DeletePrefix(ctx, f.run); err != nil {
					return removed, err
				}
				removed++
			}
		}
		if gone[f.run] {
			continue
		}
		if retention > 0 && now.Sub(f.newest) > retention {
			if err := s.Store.DeletePrefix(ctx, f.attempt); err != nil {
				return removed, err
			}
			removed++
		}
	}
	return removed, nil
}

func (s *Server) runExists(ctx context.Context, ns, name, uid string) (bool, error) {
	run := &farmv1.AgentRun{}
	err := s.Runs.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return string(run.UID) == uid, nil
}

// Forget removes a deleted run's trace at once.
func (s *Server) Forget(ctx context.Context, run *farmv1.AgentRun) error {
	return s.Store.DeletePrefix(ctx, runPrefix(run.Namespace, run.Name, run.UID))
}

// getZip downloads an attempt: events.jsonl and screens/.
func (s *Server) getZip(w http.ResponseWriter, r *http.Request, rc readerCtx) {
	run, n, prefix, err := s.attemptOf(r, rc)
	if err != nil {
		s.reply(w, err)
		return
	}
	objs, err := s.Store.List(r.Context(), prefix)
	if err != nil {
		s.reply(w, err)
		return
	}
	if len(objs) == 0 {
		s.reply(w, fail(http.StatusNotFound, "attempt %d of %s/%s has no stored trace", n, run.Namespace, run.Name))
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Disposition", `attachment; filename="`+run.Name+"-a"+strconv.Itoa(n)+`.zip"`)
	zw := zip.NewWriter(w)
	ev, err := zw.CreateHeader(&zip.FileHeader{Name: "events.jsonl", Method: zip.Deflate, Modified: objs[len(objs)-1].ModTime})
	if err == nil {
		_, err = s.events(r.Context(), prefix, 0, ev)
	}
	for _, o := range objs {
		if err != nil {
			break
		}
		name := strings.TrimPrefix(o.Key, prefix)
		if !strings.HasPrefix(name, "screens/") {
			continue
		}
		var f io.Writer
		if f, err = zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store, Modified: o.ModTime}); err != nil {
			break
		}
		var body io.ReadCloser
		body, err = s.Store.Get(r.Context(), o.Key)
		if errors.Is(err, ErrNotFound) {
			err = nil
			continue
		}
		if err == nil {
			_, err = io.Copy(f, body)
			body.Close()
		}
	}
	if err != nil {
		s.logf("zip of %s: %v", prefix, err) // the response has started; the archive ends truncated
		return
	}
	_ = zw.Close()
}
