package boundaries

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// text is a file's lines joined into one line, Go comment markers dropped,
// so that a citation or a section name wrapped over two lines reads as one.
type text struct {
	name   string
	joined string
	starts []int // the offset in joined of each line
}

func readText(t *testing.T, name string) text {
	t.Helper()
	tx := text{name: name}
	var b strings.Builder
	for _, line := range strings.Split(readFile(t, name), "\n") {
		if strings.HasSuffix(name, ".go") {
			if s := strings.TrimLeft(line, " \t"); strings.HasPrefix(s, "//") {
				line = strings.TrimLeft(strings.TrimPrefix(s, "//"), " \t")
			}
		}
		tx.starts = append(tx.starts, b.Len())
		b.WriteString(line)
		b.WriteByte(' ')
	}
	tx.joined = b.String()
	return tx
}

// line is the line number of an offset in joined.
func (tx text) line(off int) int {
	return sort.Search(len(tx.starts), func(i int) bool { return tx.starts[i] > off })
}

// elsewhere are the ways of citing a document that is not in the
// repository: the numbered seed documents the project was started from,
// their directory, and the shared directory beside the repository. A
// comment that needs a document points at one in docs/ (DEVELOPERS.md).
var elsewhere = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bseeds?[\s/]+\d{3}\b`),
	regexp.MustCompile(`(?i)\bseeds/`),
	regexp.MustCompile(`(?i)\bthe seeds\b`),
	regexp.MustCompile(`\.\./shared\b`),
}

// No tracked Go file or Markdown document cites a document the repository
// does not have.
func TestNoCitationsOfDocumentsElsewhere(t *testing.T) {
	files := tracked(t, "*.go", "*.md")
	if len(files) < 100 {
		t.Fatalf("git ls-files shows %d .go and .md files, want the whole tree", len(files))
	}
	for _, f := range files {
		tx := readText(t, f)
		var found [][]int
		for _, re := range elsewhere {
			found = append(found, re.FindAllStringIndex(tx.joined, -1)...)
		}
		sort.Slice(found, func(i, j int) bool { return found[i][0] < found[j][0] })
		for _, m := range found {
			t.Errorf("%s:%d: %q cites a document that is not in the repository: point at the section of docs/ that says it (the loop's rules: docs/engine.md, \"<section>\")",
				f, tx.line(m[0]), tx.joined[m[0]:m[1]])
		}
	}
}

var (
	// docsPath is a path into docs/ from the repository's top, in prose or
	// a comment (not one inside a URL or another path).
	docsPath = regexp.MustCompile(`(?:^|[^\w./-])(docs/[\w./-]*[\w-])`)
	// section is a pointer at a section: docs/engine.md, "Compaction"
	// (and "…" more).
	section = regexp.MustCompile(`\b(docs/[\w-]+\.md), ("[^"]+"(?: and "[^"]+")*)`)
	// mdLink is a Markdown link's or image's target.
	mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	// linkSection is a pointer at a section through a link:
	// [modelsim.md](modelsim.md), "Prompt caching".
	linkSection = regexp.MustCompile(`\]\(([\w./-]+\.md)\), ("[^"]+"(?: and "[^"]+")*)`)
	quoted      = regexp.MustCompile(`"([^"]+)"`)
	scheme      = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Every docs/… path in a Go file or a document names a file that exists;
// every relative Markdown link resolves, its #anchor to a heading; every
// section a pointer names (docs/engine.md, "Compaction") is a heading of
// that document, or a paragraph's bold title.
func TestDocumentPointersResolve(t *testing.T) {
	files := tracked(t, "*.go", "*.md")
	headings, sections := map[string][]string{}, map[string][]string{}
	headingsOf := func(doc string) []string {
		if _, ok := headings[doc]; !ok {
			headings[doc] = markdownHeadings(readFile(t, doc))
		}
		return headings[doc]
	}
	sectionsOf := func(doc string) []string {
		if _, ok := sections[doc]; !ok {
			sections[doc] = markdownSections(readFile(t, doc))
		}
		return sections[doc]
	}
	checkSections := func(f string, line int, doc, names string) {
		for _, q := range quoted.FindAllStringSubmatch(names, -1) {
			if !hasSection(sectionsOf(doc), q[1]) {
				t.Errorf("%s:%d: %s has no section %q (its headings: %s)",
					f, line, doc, q[1], strings.Join(headingsOf(doc), "; "))
			}
		}
	}
	for _, f := range files {
		tx := readText(t, f)
		for _, m := range docsPath.FindAllStringSubmatchIndex(tx.joined, -1) {
			p := tx.joined[m[2]:m[3]]
			if !exists(p) {
				t.Errorf("%s:%d: %s does not exist", f, tx.line(m[2]), p)
			}
		}
		for _, m := range section.FindAllStringSubmatchIndex(tx.joined, -1) {
			doc := tx.joined[m[2]:m[3]]
			if exists(doc) {
				checkSections(f, tx.line(m[0]), doc, tx.joined[m[4]:m[5]])
			}
		}
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		for _, m := range linkSection.FindAllStringSubmatchIndex(tx.joined, -1) {
			doc := path.Join(path.Dir(f), tx.joined[m[2]:m[3]])
			if exists(doc) {
				checkSections(f, tx.line(m[0]), doc, tx.joined[m[4]:m[5]])
			}
		}
		for i, line := range proseLines(readFile(t, f)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				doc := f
				if file != "" {
					doc = path.Join(path.Dir(f), file)
					if doc == ".." || strings.HasPrefix(doc, "../") {
						t.Errorf("%s:%d: the link %s leaves the repository", f, i+1, target)
						continue
					}
					if !exists(doc) {
						t.Errorf("%s:%d: the link %s names %s, which does not exist", f, i+1, target, doc)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(doc, ".md") && !hasAnchor(headingsOf(doc), anchor) {
					t.Errorf("%s:%d: the link %s: %s has no heading whose anchor is #%s", f, i+1, target, doc, anchor)
				}
			}
		}
	}
}

func exists(name string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(name)))
	return err == nil
}

// proseLines are a Markdown document's lines with those of fenced code
// blocks blanked.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// markdownHeadings are a document's headings as they read: the #s, the
// backticks and doubled spaces dropped.
func markdownHeadings(doc string) []string {
	var hs []string
	for _, l := range proseLines(doc) {
		if h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && strings.HasPrefix(l, "#") {
			hs = append(hs, plain(h))
		}
	}
	return hs
}

// runIn is a paragraph's bold title: **Who is calling.** Every request …
var runIn = regexp.MustCompile(`^\*\*([^*]+?)[.:]?\*\*`)

// markdownSections are the names a pointer may give a part of a document:
// its headings and its paragraphs' bold titles.
func markdownSections(doc string) []string {
	hs := markdownHeadings(doc)
	for _, l := range proseLines(doc) {
		if m := runIn.FindStringSubmatch(l); m != nil {
			hs = append(hs, plain(m[1]))
		}
	}
	return hs
}

func plain(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "`", "")), " ")
}

// hasSection reports whether a heading is the section name, or starts with
// it up to a word's end ("Snapshots" is "Snapshots, traces, resume").
func hasSection(headings []string, name string) bool {
	name = plain(name)
	for _, h := range headings {
		if rest, ok := strings.CutPrefix(h, name); ok {
			if rest == "" || !unicode.IsLetter([]rune(rest)[0]) && !unicode.IsDigit([]rune(rest)[0]) {
				return true
			}
		}
	}
	return false
}

// hasAnchor reports whether one of the headings has the anchor GitHub gives
// it: lower case, spaces to dashes, punctuation other than - and _ dropped,
// -1, -2… after a repeated one.
func hasAnchor(headings []string, anchor string) bool {
	seen := map[string]int{}
	for _, h := range headings {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			seen[slug] = n + 1
			slug += "-" + strconv.Itoa(n)
		} else {
			seen[slug] = 1
		}
		if slug == anchor {
			return true
		}
	}
	return false
}
