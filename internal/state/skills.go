package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MaxSkillBytes bounds a SKILL.md or a reference file the loop will load (ours).
const MaxSkillBytes = 64 << 10

// Skill is one SKILL.md: a name and description from its front matter, its
// body, and the folder its reference files live in.
type Skill struct {
	Name        string
	Description string
	Body        string
	Dir         string
}

// LoadSkills reads the skills under each folder: a folder holding SKILL.md is
// one skill (a mounted ConfigMap), and so is each subfolder holding one (the
// state directory's skills/). The first folder to name a skill wins. A
// SKILL.md without a name and a description is an error that names the file.
func LoadSkills(dirs ...string) ([]Skill, error) {
	var out []Skill
	seen := map[string]bool{}
	var errs []error
	add := func(file string) {
		s, err := readSkill(file)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "SKILL.md")); err == nil {
			add(filepath.Join(dir, "SKILL.md"))
		}
		subs, _ := filepath.Glob(filepath.Join(dir, "*", "SKILL.md"))
		sort.Strings(subs)
		for _, f := range subs {
			add(f)
		}
	}
	return out, errors.Join(errs...)
}

func readSkill(file string) (Skill, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Skill{}, fmt.Errorf("skill %s: %w", file, err)
	}
	if len(b) > MaxSkillBytes {
		return Skill{}, fmt.Errorf("skill %s: %d bytes, over the %d-byte limit", file, len(b), MaxSkillBytes)
	}
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return Skill{}, fmt.Errorf("skill %s: no front matter: it must start with a --- line, then name: and description:, then ---", file)
	}
	head, body, ok := strings.Cut(rest, "\n---")
	if !ok {
		return Skill{}, fmt.Errorf("skill %s: the front matter is not closed by a --- line", file)
	}
	s := Skill{Dir: filepath.Dir(file), Body: strings.TrimSpace(strings.TrimPrefix(body, "-"))}
	for _, line := range strings.Split(head, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		switch strings.TrimSpace(k) {
		case "name":
			s.Name = v
		case "description":
			s.Description = v
		}
	}
	if s.Name == "" || s.Description == "" {
		return Skill{}, fmt.Errorf("skill %s: the front matter needs both a name and a description field", file)
	}
	return s, nil
}

// Reference reads a file beside the skill's SKILL.md. The path must stay inside the skill's folder.
func (s Skill) Reference(rel string) (string, error) {
	clean := filepath.Clean("/" + rel)[1:]
	if rel == "" || clean == "" || clean == "SKILL.md" {
		return "", fmt.Errorf("skill %s: name a reference file beside SKILL.md", s.Name)
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(filepath.Clean(rel), "..") {
		return "", fmt.Errorf("skill %s: reference %q leaves the skill's folder", s.Name, rel)
	}
	p := filepath.Join(s.Dir, clean)
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("skill %s: reference %q: %v; the files are %s", s.Name, rel, errors.Unwrap(err), strings.Join(s.Files(), ", "))
	}
	if len(b) > MaxSkillBytes {
		return "", fmt.Errorf("skill %s: reference %q is %d bytes, over the %d-byte limit", s.Name, rel, len(b), MaxSkillBytes)
	}
	return string(b), nil
}

// Files lists the skill's reference files (relative paths), SKILL.md excluded.
func (s Skill) Files() []string {
	var out []string
	_ = filepath.WalkDir(s.Dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.IsDir() && strings.HasPrefix(d.Name(), "..") {
				return filepath.SkipDir // a ConfigMap's ..data symlinks
			}
			return nil
		}
		rel, _ := filepath.Rel(s.Dir, p)
		if rel != "SKILL.md" && !strings.HasPrefix(rel, ".") {
			out = append(out, rel)
		}
		return nil
	})
	return out
}
