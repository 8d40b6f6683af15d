package claw

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
	"github.com/clawfarm/clawfarm/internal/trace"
)

// These run trace and ui against a real trace server (internal/trace) on
// httptest, which authenticates and authorizes readers with the envtest
// API server (TokenReview, SubjectAccessReview), reached with --server-url.
// The user is a service account with a token in its kubeconfig.

// traceServer starts a trace server over a fresh store.
func startTraceServer(t *testing.T) *httptest.Server {
	t.Helper()
	store, err := trace.NewFSStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := &trace.Server{Store: store, Runs: env.Client, Auth: trace.NewKubeAuthority(clientset(t), ""), Logf: t.Logf}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// upload stores an attempt's trace as its loop pod would: a pod owned by
// the run, a token projected for it with the trace audience, and PUTs.
func upload(t *testing.T, srv string, run *farmv1.AgentRun, attempt int, events []byte, screens map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	cs := clientset(t)
	if _, err := cs.CoreV1().ServiceAccounts(run.Namespace).Get(ctx, "loop", metav1.GetOptions{}); err != nil {
		if _, err := cs.CoreV1().ServiceAccounts(run.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "loop"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: fmt.Sprintf("%s-a%d", run.Name, attempt),
			Labels: map[string]string{farmv1.LabelRun: run.Name, farmv1.LabelAttempt: fmt.Sprint(attempt), farmv1.LabelKind: "attempt"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: run.Name,
				UID: run.UID, Controller: ptr(true)}},
		},
		Spec: corev1.PodSpec{ServiceAccountName: "loop", Containers: []corev1.Container{{Name: "loop", Image: "loop"}}},
	}
	pod, err := cs.CoreV1().Pods(run.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(run.Namespace).CreateToken(ctx, "loop", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{trace.DefaultAudience}, ExpirationSeconds: ptr[int64](3600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("%s/api/v1/runs/%s/%s/attempts/%d", srv, run.Namespace, run.Name, attempt)
	put := func(path string, body []byte) {
		req, _ := http.NewRequest(http.MethodPut, base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("upload %s: %s %s", path, resp.Status, b)
		}
	}
	put("/events/1-0", events)
	for name, b := range screens {
		put("/screens/"+name, b)
	}
}

// viewerKubeconfig writes a kubeconfig whose user is a service account of
// ns with a token, allowed to get agentruns in ns only.
func viewerKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	return writeKubeconfig(t, ns, &clientcmdapi.AuthInfo{Token: viewerToken(t, ns)})
}

// viewerToken is a token of a service account of ns allowed to get
// agentruns in ns only.
func viewerToken(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	cs := clientset(t)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "run-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{farmv1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"get"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "run-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "run-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "viewer",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// writeKubeconfig writes a kubeconfig for the envtest API server with user
// as its user and ns as its namespace.
func writeKubeconfig(t *testing.T, ns string, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["viewer"] = user
	kc.Contexts["viewer"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "viewer", Namespace: ns}
	kc.CurrentContext = "viewer"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// recordedSession is testdata/timer.log as the loop uploads it (its event
// lines; stderr stays in the pod's log) and the lines logs renders for it.
func recordedSession(t *testing.T) (events []byte, rendered []string) {
	t.Helper()
	log, err := os.ReadFile(filepath.Join("testdata", "timer.log"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "timer.golden"))
	if err != nil {
		t.Fatal(err)
	}
	stderr := map[string]bool{}
	for _, l := range strings.SplitAfter(string(log), "\n") {
		if strings.HasPrefix(l, "{") {
			events = append(events, l...)
		} else if l != "" {
			stderr[strings.TrimSuffix(l, "\n")] = true
		}
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(golden), "\n"), "\n") {
		if !stderr[l] {
			rendered = append(rendered, l)
		}
	}
	return events, rendered
}

func screenJPEG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 90, 195))
	for y := 0; y < 195; y++ {
		for x := 0; x < 90; x++ {
			img.Set(x, y, color.RGBA{uint8(x), 120, uint8(y), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestTracePrintsTheStoredAttemptAsLogsDoes(t *testing.T) {
	t.Parallel()
	srv := startTraceServer(t)
	ns := env.Namespace(t)
	run := newRun(t, ns, "demo-timer")
	events, rendered := recordedSession(t)
	upload(t, srv.URL, run, 1, events, nil)
	kc := viewerKubeconfig(t, ns)

	c := claw(t, ns, nil, nil, "trace", "demo-timer", "--kubeconfig", kc, "--server-url", srv.URL)
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	if got := strings.TrimSuffix(c.out.String(), "\n"); got != strings.Join(rendered, "\n") {
		t.Errorf("trace printed:\n%s\nwant what logs renders for the stream:\n%s", got, strings.Join(rendered, "\n"))
	}

	// An attempt with no trace, and a run in a namespace the user may not read.
	if c := claw(t, ns, nil, nil, "trace", "demo-timer", "--attempt", "2", "--kubeconfig", kc, "--server-url", srv.URL); c.code != ExitError ||
		!strings.Contains(c.errOut.String(), "no trace of attempt 2") {
		t.Errorf("--attempt 2: exit %d, %s", c.code, c.errOut)
	}
	other := env.Namespace(t)
	newRun(t, other, "secret")
	if c := claw(t, other, nil, nil, "trace", "secret", "--kubeconfig", kc, "--server-url", srv.URL); c.code != ExitError ||
		!strings.Contains(c.errOut.String(), "403 Forbidden") || !strings.Contains(c.errOut.String(), "may not get agentruns in namespace "+other) {
		t.Errorf("another namespace's run: exit %d, %s; want the server's 403", c.code, c.errOut)
	}
}

// The token may come from a token file or an exec plugin (as with EKS,
// GKE or kubelogin) as well as from the kubeconfig itself.
func TestTraceFindsTheUsersTokenWhereClientGoDoes(t *testing.T) {
	t.Parallel()
	srv := startTraceServer(t)
	ns := env.Namespace(t)
	run := newRun(t, ns, "demo-timer")
	events, rendered := recordedSession(t)
	upload(t, srv.URL, run, 1, events, nil)
	tok := viewerToken(t, ns)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	plugin := filepath.Join(dir, "get-token")
	cred := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"` + tok + `"}}`
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho '"+cred+"'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		user *clientcmdapi.AuthInfo
	}{
		{"token file", &clientcmdapi.AuthInfo{TokenFile: tokenFile}},
		{"exec plugin", &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1",
			Command: plugin, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kc := writeKubeconfig(t, ns, c.user)
			out := claw(t, ns, nil, nil, "trace", "demo-timer", "--kubeconfig", kc, "--server-url", srv.URL)
			if out.code != 0 || strings.TrimSuffix(out.out.String(), "\n") != strings.Join(rendered, "\n") {
				t.Errorf("exit %d, %s\n%s", out.code, out.errOut, out.out)
			}
		})
	}
	// --token wins over the kubeconfig's client certificate.
	if out := claw(t, ns, nil, nil, "trace", "demo-timer", "--token", tok, "--server-url", srv.URL); out.code != 0 {
		t.Errorf("--token: exit %d, %s", out.code, out.errOut)
	}
}

func TestTraceSavesTheHTMLWithTheScreenInlinedAndTheZip(t *testing.T) {
	t.Parallel()
	srv := startTraceServer(t)
	ns := env.Namespace(t)
	run := newRun(t, ns, "demo-timer")
	events, _ := recordedSession(t)
	shot := screenJPEG(t)
	upload(t, srv.URL, run, 1, events, map[string][]byte{"screen-t0001-1.jpg": shot})
	kc := viewerKubeconfig(t, ns)
	dir := t.TempDir()
	html, zip := filepath.Join(dir, "run.html"), filepath.Join(dir, "a1.zip")

	var opened []string
	c := &cli{out: &testenv.SyncBuffer{}, errOut: &testenv.SyncBuffer{}}
	o := &Options{Browser: func(target string) error { opened = append(opened, target); return nil }}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = strings.NewReader(""), c.out, c.errOut
	c.code = o.Execute(context.Background(), []string{"--kubeconfig", kc, "-n", ns, "trace", "demo-timer",
		"--server-url", srv.URL, "--html", html, "--zip", zip, "--open"})
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	inlined := "data:image/jpeg;base64,"
	if !bytes.Contains(page, []byte(inlined)) || !bytes.Contains(page, []byte("Started a 5-minute timer")) {
		t.Errorf("the HTML file lacks the inlined screen or the recap (%d bytes)", len(page))
	}
	if len(opened) != 1 || opened[0] != html {
		t.Errorf("--open opened %v, want the saved page", opened)
	}
	z, err := os.ReadFile(zip)
	if err != nil || !bytes.HasPrefix(z, []byte("PK")) || !bytes.Contains(z, []byte("screen-t0001-1.jpg")) {
		t.Errorf("the zip file: %v, %d bytes, want a zip holding the screen", err, len(z))
	}
}

func TestTraceNeedsABearerToken(t *testing.T) {
	t.Parallel()
	srv := startTraceServer(t)
	ns := env.Namespace(t)
	newRun(t, ns, "demo-timer")
	// The suite's kubeconfig authenticates with a client certificate only.
	c := claw(t, ns, nil, nil, "trace", "demo-timer", "--server-url", srv.URL)
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "client certificate") || !strings.Contains(c.errOut.String(), "--token") ||
		!strings.Contains(c.errOut.String(), "kubectl create token") {
		t.Errorf("exit %d, %s; want the error that names --token and kubectl create token", c.code, c.errOut)
	}
	if c := claw(t, ns, nil, nil, "ui", "--no-open", "--server-url", srv.URL); c.code != ExitError || !strings.Contains(c.errOut.String(), "client certificate") {
		t.Errorf("ui: exit %d, %s", c.code, c.errOut)
	}
}

func TestUIProxiesPagesAndLiveEventsWithTheUsersToken(t *testing.T) {
	t.Parallel()
	srv := startTraceServer(t)
	ns := env.Namespace(t)
	run := newRun(t, ns, "demo-timer")
	events, _ := recordedSession(t)
	// A live attempt: the stream so far, no done event yet.
	var live []byte
	for _, l := range strings.SplitAfter(string(events), "\n") {
		if !strings.Contains(l, `"type":"done"`) {
			live = append(live, l...)
		}
	}
	upload(t, srv.URL, run, 1, live, nil)
	kc := viewerKubeconfig(t, ns)

	ctx, cancel := context.WithCancel(context.Background())
	c := &cli{out: &testenv.SyncBuffer{}, errOut: &testenv.SyncBuffer{}}
	o := &Options{Browser: func(string) error { t.Error("--no-open opened a browser"); return nil }}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = strings.NewReader(""), c.out, c.errOut
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.code = o.Execute(ctx, []string{"--kubeconfig", kc, "-n", ns, "ui", "--no-open", "--server-url", srv.URL})
	}()
	addrRe := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/`)
	var page string
	eventually(t, "ui prints its address", func() bool {
		m := addrRe.FindStringSubmatch(c.out.String())
		if m != nil {
			page = m[0]
		}
		return m != nil
	})

	// A page, as the browser asks for it: no token of its own.
	resp, err := http.Get(page + "runs/" + ns + "/demo-timer")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "looking at the phone before starting") {
		t.Errorf("run page through the proxy: %s\n%.300s", resp.Status, body)
	}

	// The live stream: the first event arrives while the attempt goes on.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, page+"api/v1/runs/"+ns+"/demo-timer/attempts/1/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				first <- sc.Text()
				return
			}
		}
		first <- ""
	}()
	select {
	case ev := <-first:
		if !strings.Contains(ev, `"type":"session_start"`) {
			t.Errorf("first event through the proxy: %q, want session_start", ev)
		}
	case <-time.After(10 * time.Second):
		t.Error("no event came through the proxy: server-sent events are held back")
	}
	resp.Body.Close()

	// Only reads, and only for its own address.
	write, _ := http.NewRequest(http.MethodPut, page+"api/v1/runs/"+ns+"/demo-timer/attempts/1/events/1-1", strings.NewReader("{}\n"))
	if code := status(t, write); code != http.StatusMethodNotAllowed {
		t.Errorf("a write through the proxy: %d, want 405", code)
	}
	rebound, _ := http.NewRequest(http.MethodGet, page, nil)
	rebound.Host = "attacker.example:" + strings.TrimPrefix(page[strings.LastIndex(page, ":"):], ":")
	if code := status(t, rebound); code != http.StatusMisdirectedRequest {
		t.Errorf("a request for another host name: %d, want 421", code)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ui did not stop when interrupted")
	}
	if c.code != 0 {
		t.Errorf("ui exit %d: %s", c.code, c.errOut)
	}
}

func status(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
