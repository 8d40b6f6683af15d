package images

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pushed is an image in a registry.
type Pushed struct {
	Name string
	// Repository is <registry>/<repository>/<name>.
	Repository string
	// Tag is the version's tag.
	Tag string
	// Digest is the index's digest ("sha256:…").
	Digest string
}

// Ref is the image by digest: what a chart or a pod should name.
func (p Pushed) Ref() string { return p.Repository + "@" + p.Digest }

// Push writes each image to registry (host:port) under its layout name and
// returns where they are. Credentials come from the Docker config
// ($DOCKER_CONFIG); loopback and private-network registries are spoken to
// over plain HTTP, as go-containerregistry does.
func Push(ctx context.Context, imgs []Image, registry string) ([]Pushed, error) {
	var out []Pushed
	for _, img := range imgs {
		ref, err := name.NewTag(strings.TrimSuffix(registry, "/") + "/" + img.Ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", img.Name, err)
		}
		if err := remote.WriteIndex(ref, img.Index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		out = append(out, Pushed{Name: img.Name, Repository: ref.Context().Name(), Tag: ref.TagStr(), Digest: img.Digest.String()})
	}
	return out, nil
}

// Load reads the images of an OCI layout Build wrote.
func Load(dir string) ([]Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	root, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, d := range im.Manifests {
		ref := d.Annotations[RefNameAnnotation]
		if ref == "" {
			continue
		}
		idx, err := root.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		n := ref
		if i := strings.LastIndex(n, ":"); i > strings.LastIndex(n, "/") {
			n = n[:i]
		}
		n = n[strings.LastIndex(n, "/")+1:]
		out = append(out, Image{Name: n, Ref: ref, Digest: d.Digest, Index: idx})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no named images in index.json", dir)
	}
	return out, nil
}
