package devcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

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
	cfg := filepath.Join(c.Dir, "registry.yml")
	if err := os.WriteFile(cfg, []byte(registryConfig(c.RegistryHost(), filepath.Join(c.Dir, "registry"))), 0o644); err != nil {
		return err
	}
	proc, err := c.run("registry", bin, []string{"serve", cfg}, nil)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "the registry", 30*time.Second, []*Proc{proc}, func() error {
		return httpOK(ctx, http.DefaultClient, "http://"+c.RegistryHost()+"/v2/")
	}); err != nil {
		return err
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
