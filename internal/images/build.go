// Package images builds clawfarm's OCI images from its Go binaries with no
// container runtime, and pushes them to a registry. Each image is two layers
// on nothing: a base (a non-root user, CA certificates from the Go module
// golang.org/x/crypto/x509roots/fallback, /tmp) and the program with its
// SBOM. Every input is pinned by the commit and go.sum, and every timestamp
// is the commit's, so building twice from one commit gives the same digests.
// `make images` (hack/images) and the dev cluster use it; docs/images.md
// describes the result.
package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Default are the images `make images` builds, each from ./cmd/<name>.
// rignode is not one: it is the node agent on a rig host, shipped as release
// binaries (see Options.Release).
var Default = []string{"manager", "loop", "clawfarm-server", "rigsim", "modelsim"}

// DefaultPlatforms are the platforms each image is built for.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// RefNameAnnotation names an image in an OCI layout's index.json.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// Module is the Go module the binaries come from; its version package is stamped.
const Module = "github.com/clawfarm/clawfarm"

// Options says what to build.
type Options struct {
	// Root is the checkout (go.mod, cmd/).
	Root string
	// Out is the OCI image layout directory; it is replaced.
	Out string
	// Images are the programs, each ./cmd/<name> (default Default).
	Images []string
	// Platforms each image is built for (default DefaultPlatforms).
	Platforms []v1.Platform
	// Repository prefixes each image's name: <Repository>/<name>:<Version>.
	Repository string
	// Source is the org.opencontainers.image.source label.
	Source string
	// Version, Revision and Created stamp the binaries and the images
	// (default: Describe(Root)).
	Version, Revision string
	Created           time.Time
	// Release are the platforms rignode is built for as a plain binary,
	// written to ReleaseDir/rignode-<os>-<arch>.
	Release    []v1.Platform
	ReleaseDir string
	// SBOMDir, when set, also gets each image's SBOM, one per platform:
	// <name>_<os>_<arch>.spdx.json.
	SBOMDir string
	// Log receives progress lines (default: none).
	Log func(format string, args ...any)
}

// Image is one built image: a multi-platform index.
type Image struct {
	// Name is the program (manager, loop, …).
	Name string
	// Ref is its name in the layout, <repository>/<name>:<version>.
	Ref string
	// Digest is the index's digest.
	Digest v1.Hash
	// Index is the image.
	Index v1.ImageIndex
}

// Build builds the images into an OCI layout at o.Out and returns them.
func Build(ctx context.Context, o Options) ([]Image, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(filepath.Dir(o.Out), ".images-build-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	base, err := baseLayer(o.Created)
	if err != nil {
		return nil, err
	}
	manifests := map[string][]mutate.IndexAddendum{}
	for _, pf := range o.Platforms {
		dir := filepath.Join(work, pf.OS+"-"+pf.Architecture)
		t := time.Now()
		if err := o.goBuild(ctx, pf, dir, o.Images); err != nil {
			return nil, err
		}
		o.Log("built %s for %s in %.1fs", strings.Join(o.Images, ", "), platformString(pf), time.Since(t).Seconds())
		for _, name := range o.Images {
			img, err := o.image(name, filepath.Join(dir, name), pf, base)
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", name, platformString(pf), err)
			}
			p := pf
			manifests[name] = append(manifests[name], mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		}
	}

	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	lp, err := layout.Write(o.Out, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, name := range o.Images {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		idx = mutate.AppendManifests(idx, manifests[name]...)
		idx = mutate.Annotations(idx, o.labels(name)).(v1.ImageIndex)
		ref := o.ref(name)
		if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, Image{Name: name, Ref: ref, Digest: d, Index: idx})
	}

	for _, pf := range o.Release {
		t := time.Now()
		dir := filepath.Join(work, "release-"+pf.OS+"-"+pf.Architecture)
		if err := o.goBuild(ctx, pf, dir, []string{"rignode"}); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(o.ReleaseDir, 0o755); err != nil {
			return nil, err
		}
		dst := filepath.Join(o.ReleaseDir, "rignode-"+pf.OS+"-"+pf.Architecture)
		if err := os.Rename(filepath.Join(dir, "rignode"), dst); err != nil {
			return nil, err
		}
		o.Log("built %s in %.1fs", dst, time.Since(t).Seconds())
	}
	return out, nil
}

func (o *Options) defaults() error {
	if o.Root == "" || o.Out == "" {
		return errors.New("images: Root and Out are required")
	}
	if len(o.Images) == 0 {
		o.Images = Default
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.Repository == "" {
		o.Repository = "clawfarm"
	}
	if o.Source == "" {
		o.Source = "https://" + Module
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Version == "" || o.Created.IsZero() {
		v, rev, created, err := Describe(o.Root)
		if err != nil {
			return err
		}
		if o.Version == "" {
			o.Version, o.Revision = v, rev
		}
		if o.Created.IsZero() {
			o.Created = created
		}
	}
	o.Created = o.Created.UTC().Truncate(time.Second)
	if len(o.Release) > 0 && o.ReleaseDir == "" {
		return errors.New("images: ReleaseDir is required with Release")
	}
	for _, name := range append(append([]string{}, o.Images...), "rignode") {
		if _, err := os.Stat(filepath.Join(o.Root, "cmd", name)); err != nil {
			return fmt.Errorf("images: no program %s: %w", name, err)
		}
	}
	return os.MkdirAll(filepath.Dir(o.Out), 0o755)
}

// Tag is the tag an image gets: the version, with characters a tag cannot hold replaced.
func Tag(version string) string {
	t := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, version)
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

func (o *Options) ref(name string) string { return o.Repository + "/" + name + ":" + Tag(o.Version) }

// labels are the OCI annotations of every image and index (and the config labels).
func (o *Options) labels(name string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    name,
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.created":  o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// Binaries builds ./cmd/<name> of the checkout at o.Root for each name into
// dir, for pf, as the images' programs are built: static, trimmed paths,
// o.Version and o.Revision stamped.
func Binaries(ctx context.Context, o Options, pf v1.Platform, dir string, names ...string) error {
	return o.goBuild(ctx, pf, dir, names)
}

// goBuild builds ./cmd/<name> for each name into dir: static, trimmed paths,
// the version stamped.
func (o *Options) goBuild(ctx context.Context, pf v1.Platform, dir string, names []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ldflags := fmt.Sprintf("-s -w -X %s/internal/version.Version=%s -X %s/internal/version.Revision=%s",
		Module, o.Version, Module, o.Revision)
	args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+pf.OS, "GOARCH="+pf.Architecture, "GOFLAGS=-mod=readonly")
	if pf.Variant != "" && pf.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(pf.Variant, "v"))
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w: %s", platformString(pf), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// image is one program's image for one platform.
func (o *Options) image(name, bin string, pf v1.Platform, base v1.Layer) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	sbom, err := SBOM(bin, name, o.Version, o.Created, pf)
	if err != nil {
		return nil, fmt.Errorf("SBOM: %w", err)
	}
	if o.SBOMDir != "" {
		if err := os.MkdirAll(o.SBOMDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(o.SBOMDir, name+"_"+pf.OS+"_"+pf.Architecture+".spdx.json"), sbom, 0o644); err != nil {
			return nil, err
		}
	}
	app, err := layer([]entry{
		dir("usr/"), dir("usr/local/"), dir("usr/local/bin/"),
		{name: "usr/local/bin/" + name, mode: 0o755, data: data},
		dir("usr/share/"), dir("usr/share/doc/"), dir("usr/share/doc/clawfarm/"),
		{name: "usr/share/doc/clawfarm/" + name + ".spdx.json", mode: 0o644, data: sbom},
	}, o.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "clawfarm images: base (nonroot user 65532, CA certificates)"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "clawfarm images: /usr/local/bin/" + name}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = pf.OS, pf.Architecture, pf.Variant
	cf.Created = v1.Time{Time: o.Created}
	cf.Author = "clawfarm"
	cf.Config = v1.Config{
		User:       strconv.Itoa(NonRootUID) + ":" + strconv.Itoa(NonRootUID),
		Entrypoint: []string{"/usr/local/bin/" + name},
		WorkingDir: "/home/nonroot",
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=" + CAFile,
			"HOME=/home/nonroot",
		},
		Labels: o.labels(name),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, o.labels(name)).(v1.Image), nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatforms reads "linux/amd64,linux/arm64"; "host" is this machine's Linux platform.
func ParsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == "host":
			out = append(out, HostPlatform())
			continue
		}
		p, err := v1.ParsePlatform(f)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch, such as linux/amd64", f)
		}
		out = append(out, *p)
	}
	return out, nil
}

// HostPlatform is linux on this machine's architecture: the platform a rig
// host's pods run as (rignode runs Linux binaries on Linux hosts).
func HostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// Describe reads the version (git describe), the revision and the commit's
// time from the checkout. A tree with uncommitted changes gets "-dirty".
func Describe(root string) (version, revision string, created time.Time, err error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if revision, err = git("rev-parse", "HEAD"); err != nil {
		return "", "", time.Time{}, err
	}
	if version, err = git("describe", "--tags", "--always", "--dirty", "--abbrev=12"); err != nil {
		return "", "", time.Time{}, err
	}
	if !strings.HasPrefix(version, "v") {
		version = "v0.0.0-" + version
	}
	ct, err := git("log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return "", "", time.Time{}, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		if sec, err = strconv.ParseInt(e, 10, 64); err != nil {
			return "", "", time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", e, err)
		}
	}
	return version, revision, time.Unix(sec, 0).UTC(), nil
}

// Platform is an image's platform (os, architecture, variant).
type Platform = v1.Platform
