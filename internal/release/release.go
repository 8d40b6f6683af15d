// Package release builds a clawfarm release into one directory, dist/
// (`make release`, hack/release, docs/release.md): the images as an OCI
// layout and, with a registry, pushed; the chart packaged with the
// release's version and its images' repository, and pushed as an OCI
// artifact; install.yaml and a kustomize base naming every image by digest;
// kubectl-claw's krew archives and manifest; the rig-host archives (rignode
// and the loop for hosts without a container runtime, the service units);
// an SPDX SBOM of every binary; and SHA256SUMS over it all.
package release

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/clawfarm/clawfarm/internal/images"
)

// Options says what to build.
type Options struct {
	// Root is the checkout (go.mod, cmd/, charts/).
	Root string
	// Out is the release directory; it is replaced.
	Out string
	// Version is the release's version, v-prefixed semver (v0.3.0); the
	// images' tag and the chart's appVersion. Default: git describe.
	Version string
	// Registry (host:port), when set, gets the images and the chart.
	Registry string
	// Repository is where the chart and install.yaml say the images are,
	// <Repository>/<name>: <Registry>/clawfarm with a Registry, else
	// ghcr.io/clawfarm.
	Repository string
	// Platforms of the images; Binaries those of the krew and rig-host
	// archives.
	Platforms, Binaries []v1.Platform
	// DownloadURL is where the archives will be published, for the krew
	// manifest (default: the GitHub release of Version).
	DownloadURL string
	// Helm is the helm binary.
	Helm string
	// Log receives progress lines (default: none).
	Log func(format string, args ...any)
}

// Result is what Build wrote.
type Result struct {
	Version, ChartVersion string
	// Images are the images by digest: <Repository>/<name>@sha256:….
	Images map[string]string
	// Chart is the packaged chart's path; ChartRef, with a Registry, the
	// chart in it (oci://…/clawfarm, version ChartVersion).
	Chart, ChartRef string
	// Files are every file of Out but the image layout, relative to Out:
	// what SHA256SUMS lists.
	Files []string
}

// DefaultBinaries are the platforms of kubectl-claw and the rig-host tools.
var DefaultBinaries = []v1.Platform{
	{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"},
	{OS: "darwin", Architecture: "amd64"}, {OS: "darwin", Architecture: "arm64"},
}

// Layout of Out.
const (
	ImagesDir    = "images"
	SBOMDir      = "sbom"
	InstallFile  = "install.yaml"
	KustomizeDir = "kustomize"
	KrewManifest = "claw.yaml"
	SumsFile     = "SHA256SUMS"
)

// Build writes the release into o.Out.
func Build(ctx context.Context, o Options) (*Result, error) {
	revision, created, err := o.defaults()
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Out, SBOMDir), 0o755); err != nil {
		return nil, err
	}
	res := &Result{Version: o.Version, ChartVersion: strings.TrimPrefix(o.Version, "v"), Images: map[string]string{}}

	t := time.Now()
	built, err := images.Build(ctx, images.Options{
		Root: o.Root, Out: filepath.Join(o.Out, ImagesDir), Platforms: o.Platforms, Repository: "clawfarm",
		Version: o.Version, Revision: revision, Created: created, SBOMDir: filepath.Join(o.Out, SBOMDir), Log: o.Log,
	})
	if err != nil {
		return nil, err
	}
	o.Log("images in %.1fs", time.Since(t).Seconds())
	for _, b := range built {
		res.Images[b.Name] = o.Repository + "/" + b.Name + "@" + b.Digest.String()
	}
	if o.Registry != "" {
		pushed, err := images.Push(ctx, built, o.Registry)
		if err != nil {
			return nil, err
		}
		for _, p := range pushed {
			if p.Repository != o.Repository+"/"+p.Name {
				return nil, fmt.Errorf("pushed %s to %s, not under %s", p.Name, p.Repository, o.Repository)
			}
			o.Log("pushed %s:%s %s", p.Repository, p.Tag, p.Digest)
		}
	}

	bin := images.Options{Root: o.Root, Version: o.Version, Revision: revision}
	if err := o.archives(ctx, bin, created); err != nil {
		return nil, err
	}
	if err := o.chart(ctx, res); err != nil {
		return nil, err
	}
	if res.Files, err = writeSums(o.Out); err != nil {
		return nil, err
	}
	return res, nil
}

// defaults fills in what o leaves out and checks it; it returns the
// checkout's revision and commit time, which stamp the build.
func (o *Options) defaults() (revision string, created time.Time, err error) {
	if o.Root == "" || o.Out == "" || o.Helm == "" {
		return "", created, errors.New("release: Root, Out and Helm are required")
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	// Out is replaced: it must not be the checkout or hold it.
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return "", created, err
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return "", created, err
	}
	if rel, err := filepath.Rel(out, root); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return "", created, fmt.Errorf("release: Out %s is the checkout or holds it, and would be deleted", o.Out)
	}
	version, revision, created, err := images.Describe(o.Root)
	if err != nil {
		return "", created, err
	}
	if o.Version == "" {
		o.Version = version
	}
	if err := checkVersion(o.Version); err != nil {
		return "", created, err
	}
	if o.Repository == "" {
		o.Repository = "ghcr.io/clawfarm"
		if o.Registry != "" {
			o.Repository = strings.TrimSuffix(o.Registry, "/") + "/clawfarm"
		}
	}
	if len(o.Platforms) == 0 {
		o.Platforms = images.DefaultPlatforms
	}
	if len(o.Binaries) == 0 {
		o.Binaries = DefaultBinaries
	}
	if o.DownloadURL == "" {
		o.DownloadURL = "https://" + images.Module + "/releases/download/" + o.Version
	}
	return revision, created, nil
}

// checkVersion refuses a version that cannot be both an image tag and, its
// v dropped, a chart's semver version.
func checkVersion(v string) error {
	rest, ok := strings.CutPrefix(v, "v")
	if !ok || images.Tag(v) != v {
		return fmt.Errorf("release: version %q: want v<major>.<minor>.<patch>[-prerelease], usable as an image tag", v)
	}
	core, _, _ := strings.Cut(rest, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return fmt.Errorf("release: version %q: want v<major>.<minor>.<patch>[-prerelease]", v)
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" || (len(p) > 1 && p[0] == '0') {
			return fmt.Errorf("release: version %q: %q is not a semver number", v, p)
		}
	}
	return nil
}
