package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/clawfarm/clawfarm/internal/images"
)

// KrewArchive and RigHostArchive name a platform's archives.
func KrewArchive(version string, pf v1.Platform) string {
	return "kubectl-claw_" + version + "_" + pf.OS + "_" + pf.Architecture + ".tar.gz"
}

func RigHostArchive(version string, pf v1.Platform) string {
	return "clawfarm-rig-host_" + version + "_" + pf.OS + "_" + pf.Architecture + ".tar.gz"
}

// rigHostUnits is the directory of the rig hosts' service units, shipped in
// each rig-host archive under the same path.
const rigHostUnits = "config/rig-host"

// archives builds, for each binary platform, kubectl-claw's krew archive
// (kubectl-claw, kubectl_complete-claw, LICENSE) and the rig-host archive
// (rignode, loop, the service units, LICENSE), an SBOM of each binary, and
// the krew manifest naming the archives.
func (o *Options) archives(ctx context.Context, bin images.Options, created time.Time) error {
	license, err := os.ReadFile(filepath.Join(o.Root, "LICENSE"))
	if err != nil {
		return err
	}
	complete, err := os.ReadFile(filepath.Join(o.Root, "cmd/kubectl-claw/kubectl_complete-claw"))
	if err != nil {
		return err
	}
	units, err := treeEntries(filepath.Join(o.Root, rigHostUnits), rigHostUnits)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.Out, ".bin-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	sums := map[string]string{}
	for _, pf := range o.Binaries {
		t := time.Now()
		dir := filepath.Join(work, pf.OS+"-"+pf.Architecture)
		if err := images.Binaries(ctx, bin, pf, dir, "kubectl-claw", "rignode", "loop"); err != nil {
			return err
		}
		read := func(name string) (entry, error) {
			p := filepath.Join(dir, name)
			b, err := os.ReadFile(p)
			if err != nil {
				return entry{}, err
			}
			sbom, err := images.SBOM(p, name, o.Version, created, pf)
			if err != nil {
				return entry{}, fmt.Errorf("SBOM of %s: %w", name, err)
			}
			if err := os.WriteFile(filepath.Join(o.Out, SBOMDir, name+"_"+pf.OS+"_"+pf.Architecture+".spdx.json"), sbom, 0o644); err != nil {
				return entry{}, err
			}
			return entry{name: name, mode: 0o755, data: b}, nil
		}
		var files []entry
		for _, name := range []string{"kubectl-claw", "rignode", "loop"} {
			e, err := read(name)
			if err != nil {
				return err
			}
			files = append(files, e)
		}
		lic := entry{name: "LICENSE", mode: 0o644, data: license}
		krew := KrewArchive(o.Version, pf)
		if sums[pf.OS+"/"+pf.Architecture], err = writeTarGz(filepath.Join(o.Out, krew), created,
			files[0], entry{name: "kubectl_complete-claw", mode: 0o755, data: complete}, lic); err != nil {
			return err
		}
		if _, err := writeTarGz(filepath.Join(o.Out, RigHostArchive(o.Version, pf)), created,
			append([]entry{files[1], files[2], lic}, units...)...); err != nil {
			return err
		}
		o.Log("built %s and %s in %.1fs", krew, RigHostArchive(o.Version, pf), time.Since(t).Seconds())
	}
	return o.krewManifest(sums)
}

// krewManifest fills hack/krew/claw.yaml for the platforms built: the
// version, and each archive's URL and SHA-256. A platform of the template
// that was not built is left out.
func (o *Options) krewManifest(sums map[string]string) error {
	tmpl, err := os.ReadFile(filepath.Join(o.Root, "hack/krew/claw.yaml"))
	if err != nil {
		return err
	}
	var missing []string
	filled := os.Expand(string(tmpl), func(key string) string {
		if key == "VERSION" {
			return o.Version
		}
		kind, osArch, ok := strings.Cut(key, "_")
		if !ok || (kind != "URI" && kind != "SHA256") {
			missing = append(missing, key)
			return ""
		}
		goos, arch, _ := strings.Cut(strings.ToLower(osArch), "_")
		sum, built := sums[goos+"/"+arch]
		switch {
		case !built:
			return ""
		case kind == "URI":
			return o.DownloadURL + "/" + KrewArchive(o.Version, v1.Platform{OS: goos, Architecture: arch})
		}
		return sum
	})
	if len(missing) > 0 {
		return fmt.Errorf("hack/krew/claw.yaml: unknown variables %s", strings.Join(missing, ", "))
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(filled), &m); err != nil {
		return fmt.Errorf("hack/krew/claw.yaml: %w", err)
	}
	spec, _ := m["spec"].(map[string]any)
	platforms, _ := spec["platforms"].([]any)
	var kept []any
	for _, p := range platforms {
		if pm, _ := p.(map[string]any); pm != nil && pm["sha256"] != "" && pm["sha256"] != nil {
			kept = append(kept, p)
		}
	}
	if len(kept) != len(sums) {
		return fmt.Errorf("hack/krew/claw.yaml: %d of the %d platforms built have an entry", len(kept), len(sums))
	}
	spec["platforms"] = kept
	out, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.Out, KrewManifest), out, 0o644)
}

// entry is one file of an archive.
type entry struct {
	name string
	mode int64
	data []byte
}

// treeEntries reads the files under dir as entries named prefix/<path>; a
// missing dir gives none.
func treeEntries(dir, prefix string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		mode := int64(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		out = append(out, entry{name: prefix + "/" + filepath.ToSlash(rel), mode: mode, data: b})
		return nil
	})
	if os.IsNotExist(err) {
		return nil, nil
	}
	return out, err
}

// writeTarGz writes the entries as a gzipped tar, every timestamp the
// commit's, so a rebuild of one commit gives the same bytes, and returns
// the archive's SHA-256.
func writeTarGz(path string, mtime time.Time, entries ...entry) (string, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	gz.ModTime = mtime
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: mtime,
			Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
		if _, err := tw.Write(e.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), os.WriteFile(path, buf.Bytes(), 0o644)
}

func fileSum(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}

// writeSums writes SHA256SUMS (sha256sum's format: `sha256sum -c` checks
// it) over every file of dir but the image layout, whose blobs are named by
// their digests already, and returns the files.
func writeSums(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel == ImagesDir {
				return filepath.SkipDir
			}
			return nil
		}
		if rel != SumsFile {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		s, err := fileSum(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", s, f)
	}
	return files, os.WriteFile(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}
