package trace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"sync"
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

// putChunk stores a piece of the event stream. A chunk is written once: a
// retried upload of the same bytes is answered as the first was, other
// bytes under a stored chunk's name are refused (409), so an attempt's
// trace cannot be rewritten, ended or not.
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
	if err := s.putOnce(r.Context(), prefix, key, body); err != nil {
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
	if err := s.putOnce(r.Context(), prefix, prefix+"screens/"+file, body); err != nil {
		s.reply(w, err)
		return
	}
	s.live.changed(prefix)
	w.WriteHeader(http.StatusNoContent)
}

// putOnce stores body under key, an object of the attempt at prefix, if
// no object is there yet and the attempt stays within its cap; the same
// bytes again are a retry, and succeed.
func (s *Server) putOnce(ctx context.Context, prefix, key string, body []byte) error {
	old, err := s.Store.Get(ctx, key)
	switch {
	case err == nil:
		defer old.Close()
		b, err := io.ReadAll(io.LimitReader(old, int64(len(body))+1))
		if err != nil {
			return err
		}
		if !bytes.Equal(b, body) {
			return fail(http.StatusConflict, "%s is stored already with other content: an uploaded trace is not rewritten", path.Base(key))
		}
		return nil
	case !errors.Is(err, ErrNotFound):
		return err
	}
	max := s.MaxAttemptBytes
	if max <= 0 {
		max = DefaultMaxAttemptBytes
	}
	if err := s.usage.add(ctx, s.Store, prefix, int64(len(body)), max); err != nil {
		return err
	}
	if err := s.Store.Put(ctx, key, body); err != nil {
		s.usage.add(ctx, s.Store, prefix, -int64(len(body)), max)
		return err
	}
	return nil
}

// usage counts the bytes each attempt stored, from the store's listing the
// first time an attempt writes after the server starts.
type usage struct {
	mu    sync.Mutex
	bytes map[string]int64
}

// maxAttemptsCounted bounds the map; past it the counts are dropped and
// listed again as attempts write.
const maxAttemptsCounted = 4096

func (u *usage) add(ctx context.Context, st Store, prefix string, n, max int64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.bytes == nil || len(u.bytes) >= maxAttemptsCounted {
		u.bytes = map[string]int64{}
	}
	used, ok := u.bytes[prefix]
	if !ok {
		objs, err := st.List(ctx, prefix)
		if err != nil {
			return err
		}
		for _, o := range objs {
			used += o.Size
		}
	}
	if n > 0 && used+n > max {
		u.bytes[prefix] = used
		return fail(http.StatusRequestEntityTooLarge, "this attempt's trace has reached the server's cap of %d bytes (--max-attempt-bytes): the rest stays in the rig's local trace", max)
	}
	u.bytes[prefix] = used + n
	return nil
}
