package rignode_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clawfarm/clawfarm/internal/rignode"
)

// The program of the test images: it says what it was given and checks that
// the certificate file its image's environment names is readable.
const helloScript = `#!/bin/sh
echo "hello $GREETING args=$*"
if test -r "$SSL_CERT_FILE"; then echo "cert ok: $(cat "$SSL_CERT_FILE")"; fi
`

// registry serves the OCI distribution API on loopback (go-containerregistry's
// in-memory registry); repositories under private/ need user:secret.
func registry(t *testing.T) string {
	t.Helper()
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/private/") {
			if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "secret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushHello pushes a one-layer image whose entrypoint is helloScript, as
// a multi-platform index, and returns its index digest.
func pushHello(t *testing.T, ref, greeting string) string {
	idx, _ := pushHelloImage(t, ref, greeting)
	return idx
}

// pushHelloImage is pushHello, and also returns the digest of this
// platform's image (the name of its root on the node).
func pushHelloImage(t *testing.T, ref, greeting string) (index, image string) {
	t.Helper()
	layer, err := tarball.LayerFromOpener(tarOf(t, map[string]string{
		"usr/local/bin/hello": helloScript,
		"etc/ssl/cert.pem":    "CERT-" + greeting,
	}), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{
		Entrypoint: []string{"/usr/local/bin/hello"}, Cmd: []string{"default-arg"},
		Env: []string{"GREETING=" + greeting, "SSL_CERT_FILE=/etc/ssl/cert.pem", "PATH=/usr/local/bin:/usr/bin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", rignodeArch()
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	other := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	other, _ = mutate.AppendLayers(other, static.NewLayer([]byte("not this platform"), types.OCILayer))
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: rignodeArch()}}},
	)
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: "user", Password: "secret"}))); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	id, _ := img.Digest()
	return d.String(), id.String()
}

func imagePod(t *testing.T, image string, args ...string) *corev1.Pod {
	pod := newPod(t)
	c := &pod.Spec.Containers[0]
	c.Image, c.Args, c.Env = image, args, nil
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	return pod
}

func logsOf(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).Do(context.Background()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func waitingFor(reason string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == reason
	}
}

// A pod runs its image's entrypoint and cmd with the image's environment,
// the paths in it rewritten into the unpacked root, and reports the digest
// the tag resolved to; args replace the cmd, a command both.
func TestPulledImageRuns(t *testing.T) {
	reg := registry(t)
	digest := pushHello(t, reg+"/hello:v1", "world")

	p := waitPod(t, create(t, imagePod(t, reg+"/hello:v1")), time.Minute, "Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	out := logsOf(t, p)
	if p.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, "hello world args=default-arg") || !strings.Contains(out, "cert ok: CERT-world") {
		t.Fatalf("phase %s, log %q", p.Status.Phase, out)
	}
	if got, want := p.Status.ContainerStatuses[0].ImageID, reg+"/hello@"+digest; got != want {
		t.Fatalf("imageID %q, want %q", got, want)
	}

	p = waitPod(t, create(t, imagePod(t, reg+"/hello:v1", "given")), time.Minute, "Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	if out := logsOf(t, p); !strings.Contains(out, "hello world args=given") {
		t.Fatalf("args did not replace the image's cmd: %q", out)
	}
	pod := imagePod(t, reg+"/hello@"+digest)
	pod.Spec.Containers[0].Command = []string{"hello", "from-command"}
	p = waitPod(t, create(t, pod), time.Minute, "Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	if out := logsOf(t, p); !strings.Contains(out, "hello world args=from-command") {
		t.Fatalf("a command found in the image's PATH did not replace entrypoint and cmd: %q", out)
	}
	if got := p.Status.ContainerStatuses[0].ImageID; got != reg+"/hello@"+digest {
		t.Fatalf("imageID by digest %q", got)
	}
}

// A missing image waits ErrImagePull, then ImagePullBackOff, each with the
// registry's "not found": the words the operator reads as a configuration
// error.
func TestMissingImageWaitsErrImagePullThenBackOff(t *testing.T) {
	reg := registry(t)
	pod := create(t, imagePod(t, reg+"/nope:v1"))
	p := waitPod(t, pod, 30*time.Second, "ErrImagePull", waitingFor(rignode.ReasonErrImagePull))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "not found") || !strings.Contains(msg, reg+"/nope:v1") {
		t.Fatalf("ErrImagePull message %q", msg)
	}
	p = waitPod(t, pod, 30*time.Second, "ImagePullBackOff", waitingFor(rignode.ReasonImagePullBackOff))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "Back-off pulling image") || !strings.Contains(msg, "not found") {
		t.Fatalf("ImagePullBackOff message %q", msg)
	}
	// Pushed later, the image is pulled at the next try.
	pushHello(t, reg+"/nope:v1", "late")
	p = waitPod(t, pod, time.Minute, "Succeeded", phaseIs(corev1.PodSucceeded))
	if out := logsOf(t, p); !strings.Contains(out, "hello late") {
		t.Fatalf("log %q", out)
	}
}

// A private repository needs the pod's imagePullSecrets; without them the
// pull is refused with words the operator reads as a configuration error.
func TestPrivateImageNeedsPullSecret(t *testing.T) {
	reg := registry(t)
	pushHello(t, reg+"/private/hello:v1", "secret-world")

	p := waitPod(t, create(t, imagePod(t, reg+"/private/hello:v1")), 30*time.Second, "ErrImagePull", waitingFor(rignode.ReasonErrImagePull))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "pull access denied") {
		t.Fatalf("message %q", msg)
	}

	pod := imagePod(t, reg+"/private/hello:v1")
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{"http://" + reg + "/": map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte("user:secret"))}}})
	if _, err := cs.CoreV1().Secrets(pod.Namespace).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pull"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	p = waitPod(t, create(t, pod), time.Minute, "Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	if out := logsOf(t, p); p.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, "hello secret-world") {
		t.Fatalf("phase %s, log %q", p.Status.Phase, out)
	}
}

// Never pulls nothing: an image not on the node waits ErrImageNeverPull.
func TestPullNeverWithoutTheImage(t *testing.T) {
	reg := registry(t)
	pushHello(t, reg+"/never:v1", "x")
	pod := imagePod(t, reg+"/never:v1")
	pod.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	p := waitPod(t, create(t, pod), 30*time.Second, "ErrImageNeverPull", waitingFor(rignode.ReasonErrImageNeverPull))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "pull policy of Never") {
		t.Fatalf("message %q", msg)
	}
}

// Unused images are collected once their pods are gone, beyond the one the
// suite's node keeps; images in use never are.
func TestUnusedImagesAreCollected(t *testing.T) {
	reg := registry(t)
	ns := ""
	var pods []*corev1.Pod
	rootOf := map[string]string{}
	for _, tag := range []string{"a", "b", "c"} {
		_, img := pushHelloImage(t, reg+"/gc:"+tag, "gc-"+tag)
		rootOf[tag] = filepath.Join(rootDir, "images", "roots", strings.Replace(img, ":", "-", 1))
		pod := imagePod(t, reg+"/gc:"+tag)
		if ns != "" {
			pod.Namespace = ns
		}
		pod.Name = "gc-" + tag
		ns = pod.Namespace
		pods = append(pods, waitPod(t, create(t, pod), time.Minute, "Succeeded", phaseIs(corev1.PodSucceeded)))
	}
	digests := map[string]bool{}
	for _, p := range pods {
		d := p.Status.ContainerStatuses[0].ImageID
		digests[d] = true
	}
	if len(digests) != 3 {
		t.Fatalf("three tags gave %d images", len(digests))
	}
	// A long-running pod keeps its image whatever is collected.
	keep := imagePod(t, reg+"/gc:a", "keep")
	keep.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "echo started; sleep 60"}
	keep = create(t, keep)
	waitLog(t, keep, "started")
	for _, p := range pods {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	// gc:b is the oldest unused image (the node keeps one unused: gc:c or
	// another test's); gc:a is in use.
	deadline := time.Now().Add(30 * time.Second)
	for exists(rootOf["b"]) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if exists(rootOf["b"]) {
		t.Fatalf("the unused image gc:b is still on the node: %s", rootOf["b"])
	}
	if !exists(rootOf["a"]) {
		t.Fatalf("the image gc:a was collected while a pod runs it")
	}
	k, err := cs.CoreV1().Pods(keep.Namespace).Get(context.Background(), keep.Name, metav1.GetOptions{})
	if err != nil || k.Status.Phase != corev1.PodRunning {
		t.Fatalf("the pod using gc:a: %v %v", err, k.Status.Phase)
	}
	_ = cs.CoreV1().Pods(keep.Namespace).Delete(context.Background(), keep.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
}

func rignodeArch() string { return runtime.GOARCH }

// tarOf is a tar of files (path → content), each executable, in path order.
func tarOf(t *testing.T, files map[string]string) tarball.Opener {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
