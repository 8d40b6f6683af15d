package rignode

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ImageMap maps a container image to the host binary that stands for it.
// Keys are image references as pods name them; a key without a tag or digest
// also matches every tag and digest of that repository.
type ImageMap map[string]string

// ParseImageMap reads the flag form "image=path,image=path".
func ParseImageMap(s string) (ImageMap, error) {
	m := ImageMap{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		if err := m.add(entry); err != nil {
			return nil, fmt.Errorf("--image-map: %w", err)
		}
	}
	return m, nil
}

// LoadImageMapFile reads an image map file: one "image=path" per line, blank
// lines and lines starting with # ignored. Relative paths are relative to the file.
func LoadImageMapFile(file string) (ImageMap, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("image map file: %w", err)
	}
	defer func() { _ = f.Close() }()
	m := ImageMap{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := m.add(line); err != nil {
			return nil, fmt.Errorf("image map file %s line %d: %w", file, n, err)
		}
		img := strings.TrimSpace(line[:strings.Index(line, "=")])
		if p := m[img]; !filepath.IsAbs(p) {
			m[img] = filepath.Join(filepath.Dir(file), p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("image map file %s: %w", file, err)
	}
	return m, nil
}

func (m ImageMap) add(entry string) error {
	i := strings.Index(entry, "=")
	if i <= 0 || i == len(entry)-1 {
		return fmt.Errorf("entry %q is not image=path (example: clawfarm/loop:dev=/usr/local/bin/loop)", entry)
	}
	img, p := strings.TrimSpace(entry[:i]), strings.TrimSpace(entry[i+1:])
	if img == "" || p == "" {
		return fmt.Errorf("entry %q is not image=path (example: clawfarm/loop:dev=/usr/local/bin/loop)", entry)
	}
	m[img] = p
	return nil
}

// Merge adds the entries of o, overriding m's.
func (m ImageMap) Merge(o ImageMap) {
	for k, v := range o {
		m[k] = v
	}
}

// Validate checks that every mapped path is an executable file or a directory.
func (m ImageMap) Validate() error {
	for _, img := range m.Images() {
		st, err := os.Stat(m[img])
		if err != nil {
			return fmt.Errorf("image map: %s: %w", img, err)
		}
		if !st.IsDir() && st.Mode()&0o111 == 0 {
			return fmt.Errorf("image map: %s: %s is not executable", img, m[img])
		}
	}
	return nil
}

// Images lists the mapped images, sorted.
func (m ImageMap) Images() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Resolve finds the host path for image: an exact match first, then the image's
// repository without its tag or digest.
func (m ImageMap) Resolve(image string) (string, error) {
	if p, ok := m[image]; ok {
		return p, nil
	}
	if p, ok := m[repository(image)]; ok {
		return p, nil
	}
	return "", fmt.Errorf("image %q has no host binary: add it to the image map (--image-map %s=/path/to/binary); mapped images: %s",
		image, repository(image), strings.Join(m.Images(), ", "))
}

// repository strips a tag and a digest from an image reference.
func repository(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		image = image[:i]
	}
	return image
}
