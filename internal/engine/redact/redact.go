// Package redact keeps secrets out of everything the loop writes: events,
// logs, the AgentRun's status and the termination message. The API key is
// removed verbatim, and anything shaped like a credential is masked too,
// because providers echo parts of a bad key back in their error messages.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces a secret.
const Mask = "[redacted]"

var patterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}`),
	regexp.MustCompile(`(?i)((?:x-api-key|api[-_]?key|authorization)["']?\s*[:=]\s*["']?)[^\s"',}]{6,}`),
	regexp.MustCompile(`\b(sk|pk|rk|ak)-[A-Za-z0-9_*-]{8,}`),
}

// Redactor removes known secrets and credential-shaped strings.
type Redactor struct {
	secrets []string
}

// New returns a redactor for the given secrets (empty ones are ignored).
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s = strings.TrimSpace(s); len(s) >= 4 {
			r.secrets = append(r.secrets, s)
		}
	}
	return r
}

// String redacts s.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, sec := range r.secrets {
			if strings.Contains(s, sec) {
				s = strings.ReplaceAll(s, sec, Mask)
			}
		}
	}
	if !mayHold(s) {
		return s
	}
	for i, p := range patterns {
		if i == 2 {
			s = p.ReplaceAllString(s, Mask)
		} else {
			s = p.ReplaceAllString(s, "${1}"+Mask)
		}
	}
	return s
}

// Bytes redacts b.
func (r *Redactor) Bytes(b []byte) []byte {
	if r == nil || (len(r.secrets) == 0 && !mayHold(string(b))) {
		return b
	}
	return []byte(r.String(string(b)))
}

// mayHold is a cheap pre-check before the regular expressions run.
func mayHold(s string) bool {
	l := strings.ToLower(s)
	return strings.Contains(l, "bearer") || strings.Contains(l, "key") || strings.Contains(l, "authorization") || strings.Contains(s, "k-")
}
