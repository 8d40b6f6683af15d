package rignode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// defaultTokenSeconds is a projected token's lifetime when the pod names none (kubelet's default).
const defaultTokenSeconds = 3600

// serviceAccountToken is one projected token file rignode keeps fresh.
type serviceAccountToken struct {
	file      string
	audience  string
	seconds   int64
	expiresAt time.Time
}

// volumeSet is what a pod's volumes became on the host.
type volumeSet struct {
	paths  map[string]string // volume name → host directory (or file for a hostPath file)
	tokens []*serviceAccountToken
	// tokenVolume is the volume holding the first service-account token, if any.
	tokenVolume string
	tokenFile   string
}

// volumeBuilder writes a pod's volumes under its directory.
type volumeBuilder struct {
	client kubernetes.Interface
	pod    *corev1.Pod
	dir    string // the pod's volumes directory
	// adopting: the pod's processes already run (rignode restarted), so a
	// token file they read that is still fresh is kept, not asked for again.
	adopting bool
}

func (b *volumeBuilder) build(ctx context.Context) (*volumeSet, error) {
	vs := &volumeSet{paths: map[string]string{}}
	for _, v := range b.pod.Spec.Volumes {
		p, err := b.volume(ctx, v, vs)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		vs.paths[v.Name] = p
	}
	return vs, nil
}

func (b *volumeBuilder) volume(ctx context.Context, v corev1.Volume, vs *volumeSet) (string, error) {
	dir := filepath.Join(b.dir, v.Name)
	switch {
	case v.HostPath != nil:
		return hostPath(v.HostPath)
	case v.EmptyDir != nil:
		return dir, os.MkdirAll(dir, 0o777)
	case v.PersistentVolumeClaim != nil:
		return b.claim(ctx, v.PersistentVolumeClaim.ClaimName)
	case v.ConfigMap != nil:
		return dir, b.configMap(ctx, dir, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, modeOr(v.ConfigMap.DefaultMode))
	case v.Secret != nil:
		return dir, b.secret(ctx, dir, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, modeOr(v.Secret.DefaultMode))
	case v.DownwardAPI != nil:
		return dir, b.downward(dir, v.DownwardAPI.Items, modeOr(v.DownwardAPI.DefaultMode))
	case v.Projected != nil:
		mode := modeOr(v.Projected.DefaultMode)
		for _, src := range v.Projected.Sources {
			var err error
			switch {
			case src.ConfigMap != nil:
				err = b.configMap(ctx, dir, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, mode)
			case src.Secret != nil:
				err = b.secret(ctx, dir, src.Secret.Name, src.Secret.Items, src.Secret.Optional, mode)
			case src.DownwardAPI != nil:
				err = b.downward(dir, src.DownwardAPI.Items, mode)
			case src.ServiceAccountToken != nil:
				t := &serviceAccountToken{
					file:     filepath.Join(dir, src.ServiceAccountToken.Path),
					audience: src.ServiceAccountToken.Audience,
					seconds:  ptr.Deref(src.ServiceAccountToken.ExpirationSeconds, defaultTokenSeconds),
				}
				if err = b.token(ctx, t); err == nil {
					vs.tokens = append(vs.tokens, t)
					// The pod's kubeconfig gets the API server's token (no
					// audience, as kube-api-access has), never one projected
					// for another audience, whatever the volumes' order.
					if vs.tokenFile == "" && t.audience == "" {
						vs.tokenVolume, vs.tokenFile = v.Name, t.file
					}
				}
			default:
				err = fmt.Errorf("projected source kind is not supported by rignode (supported: configMap, secret, downwardAPI, serviceAccountToken)")
			}
			if err != nil {
				return "", err
			}
		}
		return dir, os.MkdirAll(dir, 0o755)
	default:
		return "", fmt.Errorf("volume type is not supported by rignode (supported: hostPath, emptyDir, persistentVolumeClaim bound to a hostPath or local volume, configMap, secret, downwardAPI, projected)")
	}
}

func modeOr(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m)
}

func hostPath(h *corev1.HostPathVolumeSource) (string, error) {
	p := h.Path
	t := ptr.Deref(h.Type, corev1.HostPathUnset)
	st, err := os.Stat(p)
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if err != nil {
			return p, os.MkdirAll(p, 0o755)
		}
		if !st.IsDir() {
			return "", fmt.Errorf("hostPath %s exists and is not a directory", p)
		}
	case corev1.HostPathDirectory:
		if err != nil || !st.IsDir() {
			return "", fmt.Errorf("hostPath %s is not an existing directory (type Directory)", p)
		}
	case corev1.HostPathFileOrCreate:
		if err != nil {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return "", err
			}
			return p, f.Close()
		}
	case corev1.HostPathFile:
		if err != nil || st.IsDir() {
			return "", fmt.Errorf("hostPath %s is not an existing file (type File)", p)
		}
	}
	return p, nil
}

// claim follows a PVC to its bound PersistentVolume; only hostPath and local volumes are usable from a host process.
func (b *volumeBuilder) claim(ctx context.Context, name string) (string, error) {
	pvc, err := b.client.CoreV1().PersistentVolumeClaims(b.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("claim %s: %w", name, err)
	}
	if pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("claim %s is not bound to a volume yet", name)
	}
	pv, err := b.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("claim %s: volume %s: %w", name, pvc.Spec.VolumeName, err)
	}
	switch {
	case pv.Spec.HostPath != nil:
		return hostPath(pv.Spec.HostPath)
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path, nil
	}
	return "", fmt.Errorf("claim %s is bound to volume %s, which is neither hostPath nor local: a host process cannot mount it", name, pv.Name)
}

func (b *volumeBuilder) configMap(ctx context.Context, dir, name string, items []corev1.KeyToPath, optional *bool, mode os.FileMode) error {
	cm, err := b.client.CoreV1().ConfigMaps(b.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return writeKeys(dir, "configmap "+name, data, items, mode)
}

func (b *volumeBuilder) secret(ctx context.Context, dir, name string, items []corev1.KeyToPath, optional *bool, mode os.FileMode) error {
	s, err := b.client.CoreV1().Secrets(b.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return writeKeys(dir, "secret "+name, s.Data, items, mode)
}

func writeKeys(dir, what string, data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode) error {
	if len(items) == 0 {
		for k, v := range data {
			if err := writeFile(dir, k, v, mode); err != nil {
				return err
			}
		}
		return os.MkdirAll(dir, 0o755)
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		if err := writeFile(dir, it.Path, v, m); err != nil {
			return err
		}
	}
	return nil
}

func (b *volumeBuilder) downward(dir string, items []corev1.DownwardAPIVolumeFile, mode os.FileMode) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downwardAPI item %s: only fieldRef is supported by rignode", it.Path)
		}
		v, err := FieldValue(b.pod, it.FieldRef.FieldPath)
		if err != nil {
			return fmt.Errorf("downwardAPI item %s: %w", it.Path, err)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		if err := writeFile(dir, it.Path, []byte(v), m); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// writeFile writes dir/rel atomically (temp file + rename), refusing paths that leave dir.
func writeFile(dir, rel string, data []byte, mode os.FileMode) error {
	clean := filepath.Clean(rel)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("path %q leaves the volume", rel)
	}
	p := filepath.Join(dir, clean)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".rignode-tmp"
	if err := os.WriteFile(tmp, data, mode|0o200); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode|0o200); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// tokenBindingWait bounds how long a token request waits for the API
// server's NodeRestriction to see the pod bound to this node.
const tokenBindingWait = 10 * time.Second

// bindingNotSeen reports NodeRestriction refusing a token for a pod it does
// not yet know is on this node.
func bindingNotSeen(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "bound to a pod scheduled on a different node")
}

// token writes a fresh token for t. An adopted pod's own token, written by
// the rignode before this one and not yet due for renewal, is kept: a
// rignode that restarts under a node full of pods would otherwise ask for
// every pod's tokens at once, as it must take them up.
func (b *volumeBuilder) token(ctx context.Context, t *serviceAccountToken) error {
	if b.adopting {
		if exp, ok := tokenExpiry(t.file); ok && time.Until(exp) > time.Duration(t.seconds)*time.Second/5 {
			t.expiresAt = exp
			return nil
		}
	}
	return b.refreshToken(ctx, t)
}

// tokenExpiry reads the expiry of the JWT in file. The signature is not
// checked: the file is one rignode wrote itself, read only to know when to
// renew it.
func tokenExpiry(file string) (time.Time, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, false
	}
	parts := strings.Split(strings.TrimSpace(string(b)), ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// refreshToken asks the API for a token bound to the pod and writes it.
func (b *volumeBuilder) refreshToken(ctx context.Context, t *serviceAccountToken) error {
	sa := b.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(t.seconds),
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: b.pod.Name, UID: b.pod.UID},
	}}
	if t.audience != "" {
		req.Spec.Audiences = []string{t.audience}
	}
	tr, err := b.client.CoreV1().ServiceAccounts(b.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	// NodeRestriction checks the bound pod's node in its own cache, which
	// may not have seen the pod's binding yet: a moment later it has, and
	// a kubelet retries its volume mounts the same way.
	for deadline := time.Now().Add(tokenBindingWait); err != nil && bindingNotSeen(err) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		tr, err = b.client.CoreV1().ServiceAccounts(b.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("service account token for %s/%s: %w", b.pod.Namespace, sa, err)
	}
	t.expiresAt = tr.Status.ExpirationTimestamp.Time
	return writeFile(filepath.Dir(t.file), filepath.Base(t.file), []byte(tr.Status.Token), 0o600)
}

// refreshTokens keeps the pod's tokens fresh, renewing each at 80% of its
// lifetime as the kubelet does, until ctx ends.
func (b *volumeBuilder) refreshTokens(ctx context.Context, tokens []*serviceAccountToken, logf func(string, ...any)) {
	if len(tokens) == 0 {
		return
	}
	for {
		next := time.Now().Add(time.Hour)
		for _, t := range tokens {
			life := time.Duration(t.seconds) * time.Second
			due := t.expiresAt.Add(-life / 5)
			if !time.Now().Before(due) {
				if err := b.refreshToken(ctx, t); err != nil {
					logf("refresh token: %v", err)
					due = time.Now().Add(10 * time.Second)
				} else {
					due = t.expiresAt.Add(-life / 5)
				}
			}
			if due.Before(next) {
				next = due
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
}
