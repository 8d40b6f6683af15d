package provider

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strconv"
	"strings"
)

// Splicer keeps screens out of JSON encoding. A request carries every screen
// still in the transcript as base64 text; encoding/json would scan and copy
// each of them several times per request (go-openai's messages marshal
// themselves, and the encoder re-compacts their output). Instead the adapter
// encodes a short placeholder per image, and Body splices the cached base64
// text back in as readers over the same strings: no copy, no scan.
type Splicer struct {
	tag   string // `"` + "clawfarm-splice-<nonce>-"
	parts []string
}

// NewSplicer returns a splicer with a fresh random tag, so no text a model
// wrote can be taken for a placeholder.
func NewSplicer() *Splicer {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return &Splicer{tag: "clawfarm-splice-" + hex.EncodeToString(b[:]) + "-"}
}

// Placeholder registers text (already JSON-safe: base64 or a data URL) and
// returns the string to encode in its place.
func (s *Splicer) Placeholder(text string) string {
	s.parts = append(s.parts, text)
	return s.tag + strconv.Itoa(len(s.parts)-1)
}

// Len is the number of registered parts.
func (s *Splicer) Len() int { return len(s.parts) }

// Body returns the encoded request with every placeholder replaced, as a
// reader factory and the total length. rewrite, when set, is applied to the
// JSON between the spliced parts.
func (s *Splicer) Body(encoded []byte, rewrite func([]byte) []byte) (open func() io.Reader, size int64) {
	type seg struct {
		b    []byte
		part int // -1: b
	}
	var segs []seg
	tag := []byte(s.tag)
	rest := encoded
	for {
		i := bytes.Index(rest, tag)
		if i < 0 {
			break
		}
		j := i + len(tag)
		k := j
		for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
			k++
		}
		n, err := strconv.Atoi(string(rest[j:k]))
		if err != nil || n >= len(s.parts) {
			segs = append(segs, seg{b: rest[:k], part: -1})
			rest = rest[k:]
			continue
		}
		segs = append(segs, seg{b: rest[:i], part: -1}, seg{part: n})
		rest = rest[k:]
	}
	segs = append(segs, seg{b: rest, part: -1})
	for i := range segs {
		if segs[i].part < 0 && rewrite != nil {
			segs[i].b = rewrite(segs[i].b)
		}
		if segs[i].part < 0 {
			size += int64(len(segs[i].b))
		} else {
			size += int64(len(s.parts[segs[i].part]))
		}
	}
	open = func() io.Reader {
		rs := make([]io.Reader, 0, len(segs))
		for _, sg := range segs {
			if sg.part < 0 {
				rs = append(rs, bytes.NewReader(sg.b))
			} else {
				rs = append(rs, strings.NewReader(s.parts[sg.part]))
			}
		}
		return io.MultiReader(rs...)
	}
	return open, size
}

type splicerKey struct{}

// WithSplicer attaches a splicer to a request's context, for a transport that splices.
func WithSplicer(ctx context.Context, s *Splicer) context.Context {
	return context.WithValue(ctx, splicerKey{}, s)
}

// SplicerFrom returns the context's splicer, or nil.
func SplicerFrom(ctx context.Context) *Splicer {
	s, _ := ctx.Value(splicerKey{}).(*Splicer)
	return s
}

// SpliceSafe reports whether text needs no JSON escaping (a MIME type; the
// base64 alphabet always qualifies), so it may be spliced in verbatim.
func SpliceSafe(text string) bool {
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/+-.=;:,_", c) >= 0) {
			return false
		}
	}
	return true
}
