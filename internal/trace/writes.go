package trace

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
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
