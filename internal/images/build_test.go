package images

import (
	"archive/tar"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
)

// build builds rigsim (the smallest program) for two platforms with fixed
// stamps, into dir.
func build(t *testing.T, dir string) []Image {
	t.Helper()
	// The images' binaries come from go build, out of go test's sight: tell
	// its cache what they are made of.
	gobuild.Inputs(t, "github.com/clawfarm/clawfarm/cmd/rigsim")
	imgs, err := buildInto(dir)
	if err != nil {
		t.Fatal(err)
	}
	return imgs
}

func buildInto(dir string) ([]Image, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	return Build(context.Background(), Options{
		Root: root, Out: filepath.Join(dir, "images"), Images: []string{"rigsim"},
		Platforms: []v1.Platform{HostPlatform(), {OS: "linux", Architecture: "arm64"}},
		Version:   "v1.2.3-test", Revision: "0123456789abcdef0123456789abcdef01234567",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	})
}

// shared is one build that TestLayoutAndImage reads and
// TestBuildIsReproducible compares a second build with: a cross-build of
// two platforms fewer than a build per test.
var shared struct {
	once sync.Once
	dir  string
	imgs []Image
	err  error
}

func sharedBuild(t *testing.T) (string, []Image) {
	t.Helper()
	gobuild.Inputs(t, "github.com/clawfarm/clawfarm/cmd/rigsim")
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "images-test-"); shared.err == nil {
			shared.imgs, shared.err = buildInto(shared.dir)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.dir, shared.imgs
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// TestBuildIsReproducible builds the same image twice into two layouts and
// expects the same digests, valid OCI images and indexes, and the layout
// naming the image.
func TestBuildIsReproducible(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cross-builds a program twice")
	}
	b := build(t, t.TempDir())
	dir, a := sharedBuild(t)
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("built %d and %d images, want 1 each", len(a), len(b))
	}
	if a[0].Digest != b[0].Digest {
		t.Fatalf("two builds of one input differ: %s and %s", a[0].Digest, b[0].Digest)
	}
	t.Logf("rigsim index %s, twice", a[0].Digest)
	// Validate what was written, as a client reading the layout sees it.
	loaded, err := Load(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	if loaded[0].Digest != a[0].Digest {
		t.Fatalf("the layout names %s, the build returned %s", loaded[0].Digest, a[0].Digest)
	}
	if err := validate.Index(loaded[0].Index); err != nil {
		t.Fatalf("not a valid OCI index: %v", err)
	}
	if a[0].Ref != "clawfarm/rigsim:v1.2.3-test" {
		t.Errorf("ref %q", a[0].Ref)
	}
}

// TestLayoutAndImage reads the layout back as a registry client would and
// checks each platform's image: non-root user, entrypoint, labels, the CA
// bundle parses, the binary and its SBOM are where the config says.
func TestLayoutAndImage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cross-builds a program")
	}
	dir, _ := sharedBuild(t)
	imgs, err := Load(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Name != "rigsim" {
		t.Fatalf("layout has %+v", imgs)
	}
	im, err := imgs[0].Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("%d platforms, want 2", len(im.Manifests))
	}
	if im.Annotations["org.opencontainers.image.revision"] != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("index annotations %v", im.Annotations)
	}
	for _, d := range im.Manifests {
		img, err := imgs[0].Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate.Image(img); err != nil {
			t.Fatalf("%s: not a valid image: %v", d.Platform, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("config platform %s/%s, descriptor %s", cf.OS, cf.Architecture, d.Platform)
		}
		if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/local/bin/rigsim" {
			t.Errorf("config user %q entrypoint %v", cf.Config.User, cf.Config.Entrypoint)
		}
		for _, l := range []string{"org.opencontainers.image.source", "org.opencontainers.image.revision", "org.opencontainers.image.version"} {
			if cf.Config.Labels[l] == "" {
				t.Errorf("label %s missing: %v", l, cf.Config.Labels)
			}
		}
		files := tarFiles(t, mutate.Extract(img))
		if h := files["usr/local/bin/rigsim"]; h == nil || h.Mode&0o111 == 0 {
			t.Errorf("binary: %+v", h)
		}
		if h := files["home/nonroot"]; h == nil || h.Uid != NonRootUID {
			t.Errorf("home of nonroot: %+v", h)
		}
		var sbom struct {
			SPDXVersion string `json:"spdxVersion"`
			Packages    []struct {
				Name string `json:"name"`
			} `json:"packages"`
		}
		if err := json.Unmarshal(files["usr/share/doc/clawfarm/rigsim.spdx.json"].content, &sbom); err != nil || sbom.SPDXVersion != "SPDX-2.3" || len(sbom.Packages) < 3 {
			t.Errorf("SBOM: %v, %+v", err, sbom)
		}
		certs := 0
		rest := files[CAFile[1:]].content
		for {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
				t.Fatalf("CA bundle: %v", err)
			}
			certs++
		}
		if certs < 100 {
			t.Errorf("CA bundle has %d certificates", certs)
		}
		for n, h := range files {
			if !h.ModTime.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
				t.Errorf("%s: mtime %s, want the build's", n, h.ModTime)
			}
		}
	}
}

type tarFile struct {
	*tar.Header
	content []byte
}

func tarFiles(t *testing.T, rc io.ReadCloser) map[string]*tarFile {
	t.Helper()
	defer rc.Close()
	out := map[string]*tarFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Clean(h.Name)] = &tarFile{Header: h, content: b}
	}
}

func TestParsePlatforms(t *testing.T) {
	p, err := ParsePlatforms("linux/amd64, host,darwin/arm64")
	if err != nil || len(p) != 3 || p[1].Architecture != runtime.GOARCH || p[2].OS != "darwin" {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"linux", "amd64/"} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestTag(t *testing.T) {
	if got := Tag("v0.0.0-abc+dirty/x"); got != "v0.0.0-abc-dirty-x" {
		t.Errorf("Tag: %q", got)
	}
}
