package rignode

import (
	"path/filepath"
	"sort"
	"strings"
)

// PathMap maps paths a container expects (mount paths, its termination
// message path) to the host paths that stand for them. A process cannot bind
// mounts, so rignode rewrites the container's command, args, working directory
// and environment values instead: a value that is a mapped path, or starts with
// one followed by "/", is rewritten; comma-separated lists are rewritten element
// by element (CLAWFARM_SKILLS_DIRS is such a list).
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

// Value rewrites every comma-separated element of v that is a mapped path.
func (m *PathMap) Value(v string) string {
	if !strings.Contains(v, "/") {
		return v
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = m.Path(p)
	}
	return strings.Join(parts, ",")
}
