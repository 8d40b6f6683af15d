package rignode

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Waiting reasons of a container whose image cannot be had, as the kubelet reports them.
const (
	ReasonErrImagePull       = "ErrImagePull"
	ReasonImagePullBackOff   = "ImagePullBackOff"
	ReasonInvalidImageName   = "InvalidImageName"
	ReasonErrImageNeverPull  = "ErrImageNeverPull"
	defaultImagePullBackoff  = 10 * time.Second
	maxImagePullBackoff      = 5 * time.Minute
	defaultImageGCKeepUnused = 3
	// pullTimeout bounds one pull, so a registry that stops answering
	// fails the pull (and it is retried) instead of hanging it.
	pullTimeout = 10 * time.Minute
)

// imageRoot is an image unpacked on this host: its files and its config.
type imageRoot struct {
	// Digest is the platform image's manifest digest: the root's name.
	Digest string `json:"digest"`
	// ImageID is what the pod's reference resolved to, <repository>@<digest>:
	// the container status's imageID, as containerd reports it.
	ImageID string `json:"imageID"`
	// Config is the image's entrypoint, cmd, env and working directory.
	Config v1.Config `json:"config"`
	// Dir is the unpacked filesystem.
	Dir string `json:"-"`
}

// imageStore pulls images and unpacks each into a content-addressed root,
// <root-dir>/images/roots/<digest>/rootfs, shared by every pod that runs it.
// refs.json remembers what each reference resolved to, for IfNotPresent and
// Never. Roots no pod uses beyond the keepUnused most recently used are
// deleted (gc).
type imageStore struct {
	dir        string
	platform   v1.Platform
	transport  http.RoundTripper
	keepUnused int
	logf       func(string, ...any)

	mu       sync.Mutex
	refs     map[string]imageRoot // reference (as the pod names it, normalised) → root
	inflight map[string]*pull     // by reference
}

type pull struct {
	done chan struct{}
	root *imageRoot
	err  error
}

// imagePullError is why an image cannot be had, with the waiting reason a
// kubelet gives for it.
type imagePullError struct {
	reason string
	err    error
}

func (e *imagePullError) Error() string { return e.err.Error() }
func (e *imagePullError) Unwrap() error { return e.err }

func newImageStore(dir string, keepUnused int, rt http.RoundTripper, logf func(string, ...any)) (*imageStore, error) {
	if err := os.MkdirAll(filepath.Join(dir, "roots"), 0o755); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if rt == nil {
		rt = remote.DefaultTransport
	}
	s := &imageStore{dir: dir, platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, transport: rt,
		keepUnused: keepUnused, logf: logf, refs: map[string]imageRoot{}, inflight: map[string]*pull{}}
	if b, err := os.ReadFile(s.refsFile()); err == nil {
		if err := json.Unmarshal(b, &s.refs); err != nil {
			logf("image store: %s is unreadable (%v); images will be pulled again", s.refsFile(), err)
			s.refs = map[string]imageRoot{}
		}
	}
	for ref, r := range s.refs {
		r.Dir = s.rootfs(r.Digest)
		if !exists(r.Dir) {
			delete(s.refs, ref)
			continue
		}
		s.refs[ref] = r
	}
	return s, nil
}

func (s *imageStore) refsFile() string { return filepath.Join(s.dir, "refs.json") }

func (s *imageStore) rootDir(digest string) string {
	return filepath.Join(s.dir, "roots", strings.ReplaceAll(digest, ":", "-"))
}

func (s *imageStore) rootfs(digest string) string { return filepath.Join(s.rootDir(digest), "rootfs") }

// local is the root a reference resolved to before, when it is still on disk.
func (s *imageStore) local(image string) (*imageRoot, bool) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refs[ref.Name()]
	if !ok || !exists(r.Dir) {
		return nil, false
	}
	return &r, true
}

// get returns the root of image under policy, pulling it when the policy
// says so, with credentials from keys. Concurrent gets of one reference share
// one pull.
func (s *imageStore) get(ctx context.Context, image string, policy corev1.PullPolicy, keys authn.Keychain) (*imageRoot, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		//lint:ignore ST1005 the kubelet's own words, shown as the pod's waiting message
		return nil, &imagePullError{ReasonInvalidImageName, fmt.Errorf("Failed to apply default image tag %q: couldn't parse image name %q: %v", image, image, err)}
	}
	if policy == "" {
		policy = corev1.PullIfNotPresent
		if _, isTag := ref.(name.Tag); isTag && ref.Identifier() == "latest" {
			policy = corev1.PullAlways
		}
	}
	if policy != corev1.PullAlways {
		if r, ok := s.local(image); ok {
			s.touch(r.Digest)
			return r, nil
		}
		if policy == corev1.PullNever {
			//lint:ignore ST1005 the kubelet's own words, shown as the pod's waiting message
			return nil, &imagePullError{ReasonErrImageNeverPull, fmt.Errorf("Container image %q is not present with pull policy of Never", image)}
		}
	}
	s.mu.Lock()
	p, running := s.inflight[ref.Name()]
	if !running {
		p = &pull{done: make(chan struct{})}
		s.inflight[ref.Name()] = p
		go func() {
			// The pull is shared: no one waiter's stop cancels it.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pullTimeout)
			p.root, p.err = s.pull(pctx, ref, keys)
			cancel()
			s.mu.Lock()
			delete(s.inflight, ref.Name())
			if p.err == nil {
				s.refs[ref.Name()] = *p.root
				s.saveLocked()
			}
			s.mu.Unlock()
			close(p.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
	}
	if p.err != nil {
		return nil, &imagePullError{ReasonErrImagePull, fmt.Errorf("failed to pull and unpack image %q: %w", image, p.err)}
	}
	r := *p.root
	return &r, nil
}

// pull resolves ref for this host's platform and unpacks it, unless its root is there already.
func (s *imageStore) pull(ctx context.Context, ref name.Reference, keys authn.Keychain) (*imageRoot, error) {
	t := time.Now()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keys), remote.WithPlatform(s.platform), remote.WithTransport(s.transport)}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, describePullError(ref, err)
	}
	img, err := desc.Image() // an index resolves to this platform's image
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s: config: %w", ref, err)
	}
	if cf.OS != "" && cf.OS != s.platform.OS || cf.Architecture != "" && cf.Architecture != s.platform.Architecture {
		return nil, fmt.Errorf("%s is for %s/%s; this node runs %s/%s", ref, cf.OS, cf.Architecture, s.platform.OS, s.platform.Architecture)
	}
	root := &imageRoot{Digest: digest.String(), ImageID: ref.Context().Name() + "@" + desc.Digest.String(), Config: cf.Config, Dir: s.rootfs(digest.String())}
	if exists(root.Dir) {
		s.touch(root.Digest)
		return root, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "roots"), ".unpack-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	rc := mutate.Extract(img)
	err = untar(rc, filepath.Join(tmp, "rootfs"))
	_ = rc.Close()
	if err != nil {
		return nil, fmt.Errorf("unpack %s: %w", ref, err)
	}
	if err := writeJSON(filepath.Join(tmp, "image.json"), root); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, s.rootDir(root.Digest)); err != nil && !exists(root.Dir) {
		return nil, err
	}
	s.touch(root.Digest)
	s.logf("pulled %s (%s) in %.1fs", ref, root.Digest, time.Since(t).Seconds())
	return root, nil
}

// describePullError words a registry's refusal as containerd does: a missing
// image or tag says "not found", so the operator can tell it from an outage.
func describePullError(ref name.Reference, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("failed to resolve reference %q: %s: not found (%v)", ref, ref, err)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("failed to resolve reference %q: pull access denied, repository does not exist or may require authorization: %v", ref, err)
		}
	}
	return fmt.Errorf("failed to resolve reference %q: %w", ref, err)
}

// touch marks a root as just used (gc keeps the most recently used).
func (s *imageStore) touch(digest string) {
	now := time.Now()
	_ = os.Chtimes(s.rootDir(digest), now, now)
}

func (s *imageStore) saveLocked() {
	if err := writeJSON(s.refsFile(), s.refs); err != nil {
		s.logf("image store: save %s: %v", s.refsFile(), err)
	}
}

// gc deletes the roots no pod uses, except the keepUnused most recently used.
func (s *imageStore) gc(inUse map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inflight) > 0 {
		return // a pull may be about to use a root
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, "roots"))
	if err != nil {
		return
	}
	type unused struct {
		digest string
		used   time.Time
	}
	var idle []unused
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		digest := strings.Replace(e.Name(), "-", ":", 1)
		if inUse[digest] {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		idle = append(idle, unused{digest, info.ModTime()})
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].used.After(idle[j].used) })
	if len(idle) <= s.keepUnused {
		return
	}
	for _, u := range idle[s.keepUnused:] {
		if err := os.RemoveAll(s.rootDir(u.digest)); err != nil {
			s.logf("image store: remove %s: %v", u.digest, err)
			continue
		}
		for ref, r := range s.refs {
			if r.Digest == u.digest {
				delete(s.refs, ref)
			}
		}
		s.logf("image store: removed unused image %s", u.digest)
	}
	s.saveLocked()
}

// untar writes a flattened image filesystem (mutate.Extract: whiteouts
// applied) under dir. Entries are confined to dir; devices and ownership are
// left out, since the processes run as rignode's user.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		dst := filepath.Join(dir, rel)
		if err := noSymlinkIn(dir, filepath.Dir(rel)); err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&(os.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(dst, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(dst)
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return err
			}
		case tar.TypeLink:
			srcRel := filepath.Clean("/" + h.Linkname)
			if err := noSymlinkIn(dir, filepath.Dir(srcRel)); err != nil {
				return fmt.Errorf("hard link %q: %w", h.Name, err)
			}
			src := filepath.Join(dir, srcRel)
			_ = os.Remove(dst)
			if err := os.Link(src, dst); err != nil {
				return err
			}
		}
	}
}

// noSymlinkIn refuses a directory path (rel, "/"-rooted, inside dir) any
// of whose existing components is a symbolic link: an image's symlink
// (etc -> /etc) must not carry a later entry's write out of the root. A
// cleaned "/"-rooted path cannot climb out by "..", so the links are the
// only way out.
func noSymlinkIn(dir, rel string) error {
	p := dir
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		if part == "" {
			continue
		}
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link in the image: an entry under it would leave the image root", strings.TrimPrefix(p, dir))
		}
	}
	return nil
}

// pullSecretsKeychain answers registry credentials from a pod's
// imagePullSecrets (kubernetes.io/dockerconfigjson and the older
// kubernetes.io/dockercfg), then anonymously.
type pullSecretsKeychain map[string]authn.AuthConfig

// keychainOf reads the pod's imagePullSecrets. A Secret that is missing or
// malformed is skipped, as the kubelet does (the pull then fails unauthorized).
func keychainOf(ctx context.Context, p *Provider, pod *corev1.Pod) pullSecretsKeychain {
	kc := pullSecretsKeychain{}
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := p.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			p.cfg.Logf("pod %s/%s: image pull secret %s: %v", pod.Namespace, pod.Name, ref.Name, err)
			continue
		}
		if err := kc.add(s); err != nil {
			p.cfg.Logf("pod %s/%s: image pull secret %s: %v", pod.Namespace, pod.Name, ref.Name, err)
		}
	}
	return kc
}

type dockerAuth struct {
	Auth     string `json:"auth"`
	Username string `json:"username"`
	Password string `json:"password"`
	Identity string `json:"identitytoken"`
}

func (kc pullSecretsKeychain) add(s *corev1.Secret) error {
	var auths map[string]dockerAuth
	switch {
	case len(s.Data[corev1.DockerConfigJsonKey]) > 0:
		var cfg struct {
			Auths map[string]dockerAuth `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			return fmt.Errorf("%s: %w", corev1.DockerConfigJsonKey, err)
		}
		auths = cfg.Auths
	case len(s.Data[corev1.DockerConfigKey]) > 0:
		if err := json.Unmarshal(s.Data[corev1.DockerConfigKey], &auths); err != nil {
			return fmt.Errorf("%s: %w", corev1.DockerConfigKey, err)
		}
	default:
		return fmt.Errorf("has neither %s nor %s", corev1.DockerConfigJsonKey, corev1.DockerConfigKey)
	}
	for server, a := range auths {
		cfg := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.Identity}
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return fmt.Errorf("auth of %s: %w", server, err)
			}
			cfg.Username, cfg.Password, _ = strings.Cut(string(dec), ":")
		}
		kc[registryHost(server)] = cfg
	}
	return nil
}

// registryHost is the host[:port] of a docker config key, which may be a URL.
func registryHost(server string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(server, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	if s == "docker.io" || s == "registry-1.docker.io" {
		return name.DefaultRegistry
	}
	return s
}

// Resolve implements authn.Keychain.
func (kc pullSecretsKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if cfg, ok := kc[r.RegistryStr()]; ok {
		return authn.FromConfig(cfg), nil
	}
	return authn.Anonymous, nil
}
