package devcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/clawfarm/clawfarm/internal/images"
)

// RegistryHost is the dev cluster's registry, host:port on loopback.
func (c *Cluster) RegistryHost() string { return fmt.Sprintf("127.0.0.1:%d", c.Ports().Registry) }

// Image is where the cluster's registry serves the project's image name
// (manager, loop, rigsim, modelsim), by digest.
func (c *Cluster) Image(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.images[name]
}

// startRegistry starts the CNCF Distribution registry (hack/build-registry.sh)
// on loopback, builds the project's images for this host's platform
// (internal/images, as `make images` does) and pushes them there. Every
// operator pod runs from them: rignode pulls them like a kubelet.
func (c *Cluster) startRegistry(ctx context.Context) error {
	bin := c.RegistryBin
	if bin == "" {
		var err error
		if bin, err = c.hackTool(ctx, "build-registry.sh"); err != nil {
			return err
		}
	}
	if _, err := StartRegistry(ctx, bin, c.Dir, c.RegistryHost(), c.run); err != nil {
		return err
	}
	if c.Manager == ManagerNone {
		c.mu.Lock()
		c.images = map[string]string{}
		c.mu.Unlock()
		return nil // whoever installs the operator pushes its images
	}

	t := time.Now()
	built, err := images.Build(ctx, images.Options{
		Root: c.Root, Out: filepath.Join(c.Dir, "images"), Platforms: []v1.Platform{images.HostPlatform()},
		Log: func(f string, a ...any) { c.Log("images: "+f, a...) },
	})
	if err != nil {
		return err
	}
	pushed, err := images.Push(ctx, built, c.RegistryHost())
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.images = map[string]string{}
	for _, p := range pushed {
		c.images[p.Name] = p.Ref()
	}
	c.mu.Unlock()
	c.Log("built and pushed %d images in %.1fs (%s)", len(pushed), time.Since(t).Seconds(), c.Image("loop"))
	return c.saveState()
}

// StartRegistry starts the Distribution registry bin serving plain HTTP on
// addr (host:port), its blobs and configuration under dir, with run (nil:
// start, logging under dir/logs), and waits until it answers.
func StartRegistry(ctx context.Context, bin, dir, addr string, run func(name, bin string, args, env []string) (*Proc, error)) (*Proc, error) {
	if run == nil {
		run = func(name, bin string, args, env []string) (*Proc, error) { return start(dir, name, bin, args, env) }
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfg, []byte(registryConfig(addr, filepath.Join(dir, "registry"))), 0o644); err != nil {
		return nil, err
	}
	proc, err := run("registry", bin, []string{"serve", cfg}, nil)
	if err != nil {
		return nil, err
	}
	return proc, waitFor(ctx, "the registry", 30*time.Second, []*Proc{proc}, func() error {
		return httpOK(ctx, http.DefaultClient, "http://"+addr+"/v2/")
	})
}

// registryConfig is the Distribution registry's configuration: plain HTTP
// on loopback, blobs on disk, no access log.
func registryConfig(addr, dir string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  secret: clawfarm-dev-registry
`, dir, addr)
}

// PushPause packs the pause binary (hack/build-node.sh) as the sandbox
// image every pod of a kubelet node starts with — registry.k8s.io cannot
// be reached — pushes it to registry and returns its reference by digest.
func PushPause(ctx context.Context, registry string, tools NodeTools) (string, error) {
	return PushBinary(ctx, registry+"/clawfarm/pause:dev", filepath.Join(tools.Bins, "pause"), "65535:65535")
}

// PushBinary packs one static binary as a one-layer image of this host's
// platform — the binary at /<its name>, its entrypoint, run as user — pushes
// it to the plain-HTTP registry of tag (host:port/repository:tag) and
// returns the image's reference by digest.
func PushBinary(ctx context.Context, tag, bin, user string) (string, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	base := filepath.Base(bin)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: base, Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(b); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cf = cf.DeepCopy()
	p := images.HostPlatform()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Config = v1.Config{Entrypoint: []string{"/" + base}, User: user}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	ref, err := name.NewTag(tag, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Name() + "@" + d.String(), nil
}
