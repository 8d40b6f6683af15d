package rignode

import (
	"path/filepath"
	"sort"
	"strings"
)

// PathMap maps paths a container expects (mount paths, its termination
// message path) to the host paths that stand for them. A process cannot bind
// mounts, so rignode rewrites the container's command, args, working directory
// and environment values instead (see Value).
type PathMap struct {
	from []string // container paths, longest first
	to   map[string]string
}

// Add maps the container path from to the host path to.
func (m *PathMap) Add(from, to string) {
	from = filepath.Clean(from)
	if m.to == nil {
		m.to = map[string]string{}
	}
	if _, ok := m.to[from]; !ok {
		m.from = append(m.from, from)
		sort.Slice(m.from, func(i, j int) bool { return len(m.from[i]) > len(m.from[j]) })
	}
	m.to[from] = to
}

// Clone is a copy that Add does not share.
func (m *PathMap) Clone() PathMap {
	c := PathMap{from: append([]string(nil), m.from...), to: make(map[string]string, len(m.to))}
	for k, v := range m.to {
		c.to[k] = v
	}
	return c
}

// Path rewrites one path, or returns it unchanged when no mapping covers it.
func (m *PathMap) Path(p string) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	for _, from := range m.from {
		if p == from {
			return m.to[from]
		}
		if strings.HasPrefix(p, from+"/") {
			return m.to[from] + p[len(from):]
		}
	}
	return p
}

// Value rewrites every mapped path inside v: a path counts where it starts
// v or follows a space, quote, '=', ',', ':', ';', '>', '<', '(' or '|', and
// ends v or is followed by '/' or one of those. So comma-separated lists and
// shell snippets ("echo x > /dev/termination-log") are rewritten, URLs are not.
func (m *PathMap) Value(v string) string {
	if !strings.Contains(v, "/") || len(m.from) == 0 {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); {
		if v[i] == '/' && (i == 0 || strings.IndexByte(pathBoundary, v[i-1]) >= 0) {
			if from, ok := m.match(v[i:]); ok {
				b.WriteString(m.to[from])
				i += len(from)
				continue
			}
		}
		b.WriteByte(v[i])
		i++
	}
	return b.String()
}

const pathBoundary = " \t\n'\"=,:;><(|"

// match finds the longest mapped path that s starts with, followed by the end, '/' or a boundary.
func (m *PathMap) match(s string) (string, bool) {
	for _, from := range m.from {
		if !strings.HasPrefix(s, from) {
			continue
		}
		if len(s) == len(from) || s[len(from)] == '/' || strings.IndexByte(pathBoundary, s[len(from)]) >= 0 {
			return from, true
		}
	}
	return "", false
}
