package provider

import "strings"

// ThinkSplitter moves <think>…</think> spans out of a text stream into
// reasoning (docs/engine.md, "Providers and the rig"): DeepSeek and other
// models write their reasoning inside <think> tags. It works on
// deltas, so a tag split across two chunks is still recognised.
type ThinkSplitter struct {
	inThink bool
	pending string // a possible tag prefix held back until the next delta
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// Feed takes one delta and returns the text and reasoning parts of it.
func (s *ThinkSplitter) Feed(delta string) (text, reasoning string) {
	in := s.pending + delta
	s.pending = ""
	var tb, rb strings.Builder
	for len(in) > 0 {
		tag := thinkOpen
		if s.inThink {
			tag = thinkClose
		}
		i := strings.Index(in, tag)
		if i < 0 {
			// Hold back a suffix that could be the start of the tag.
			keep := partialSuffix(in, tag)
			s.emit(&tb, &rb, in[:len(in)-keep])
			s.pending = in[len(in)-keep:]
			break
		}
		s.emit(&tb, &rb, in[:i])
		in = in[i+len(tag):]
		s.inThink = !s.inThink
	}
	return tb.String(), rb.String()
}

// Flush returns what is held back at the end of the stream.
func (s *ThinkSplitter) Flush() (text, reasoning string) {
	p := s.pending
	s.pending = ""
	if s.inThink {
		return "", p
	}
	return p, ""
}

func (s *ThinkSplitter) emit(tb, rb *strings.Builder, part string) {
	if s.inThink {
		rb.WriteString(part)
	} else {
		tb.WriteString(part)
	}
}

// partialSuffix is the length of the longest suffix of s that is a proper prefix of tag.
func partialSuffix(s, tag string) int {
	n := len(tag) - 1
	if n > len(s) {
		n = len(s)
	}
	for k := n; k > 0; k-- {
		if strings.HasSuffix(s, tag[:k]) {
			return k
		}
	}
	return 0
}

// SplitThink moves every <think>…</think> span of a whole text into reasoning.
func SplitThink(text string) (rest, reasoning string) {
	var s ThinkSplitter
	t, r := s.Feed(text)
	ft, fr := s.Flush()
	return strings.TrimSpace(t + ft), strings.TrimSpace(r + fr)
}
