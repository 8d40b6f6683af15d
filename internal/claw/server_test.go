package claw

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	certutil "k8s.io/client-go/util/cert"

	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The port-forward path, end to end: the trace server's Service selects a
// pod on a rignode node; kubectl claw finds the pod, port-forwards to its
// named port through the API server and rignode, and the pod's process
// (this test binary as a proxy) hands the requests to the trace server.

const (
	proxyPodTarget = "CLAW_TEST_PROXY_TARGET"
	proxyPodListen = "CLAW_TEST_PROXY_LISTEN"
	proxyPodTLS    = "CLAW_TEST_PROXY_TLS"
	traceNode      = "claw-trace-node"
)

// proxyPod is the pod's program: a reverse proxy on listen to target,
// over HTTPS with a self-signed certificate when CLAW_TEST_PROXY_TLS is set.
func proxyPod(target, listen string) int {
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening")
	// A bound on its life, should the test end without deleting the pod.
	go func() { time.Sleep(5 * time.Minute); os.Exit(0) }()
	h := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	if os.Getenv(proxyPodTLS) == "" {
		_ = http.Serve(l, h)
		return 1
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("trace.example", nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = http.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{pair}}), h)
	return 1
}

// startNode runs a rignode node on the envtest API server until the test ends.
func startNode(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	n, _, err := rignode.NewNode(rignode.NodeConfig{
		Provider: rignode.Config{NodeName: traceNode, NodeIP: "127.0.0.1", RootDir: t.TempDir(),
			Images: rignode.ImageMap{"example.com/trace-proxy": self}},
		Client: clientset(t), Port: int32(port), ListenAddress: "127.0.0.1", AnonymousAuth: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-n.Done()
	})
	if err := n.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// serverBehindService runs the proxy pod on the rignode node and a Service
// selecting it, its targetPort the pod's port named http; with useTLS the
// pod speaks HTTPS, and its readiness probe says so, as the chart's does.
func serverBehindService(t *testing.T, ns, traceURL string, useTLS bool) {
	t.Helper()
	ctx := context.Background()
	cs := clientset(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trace-server-0", Labels: map[string]string{"app.kubernetes.io/component": "server"}},
		Spec: corev1.PodSpec{NodeName: traceNode, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr[int64](2),
			Containers: []corev1.Container{{Name: "server", Image: "example.com/trace-proxy:v1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
				Env:   []corev1.EnvVar{{Name: proxyPodTarget, Value: traceURL}, {Name: proxyPodListen, Value: fmt.Sprintf("127.0.0.1:%d", port)}},
			}}},
	}
	if useTLS {
		c := &pod.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: proxyPodTLS, Value: "1"})
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTPS}}}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stop the pod's process before its node goes: rignode leaves
		// processes running when it stops, as a kubelet does.
		_ = cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("pod %s/%s was not deleted", ns, pod.Name)
	})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "clawfarm-server"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/component": "server"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the proxy pod is Ready and listening", func() bool {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || !podReady(p) {
			return false
		}
		log, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).Do(ctx).Raw()
		return err == nil && strings.Contains(string(log), "listening")
	})
}

// grantPortForward lets the viewer of home find and port-forward to the
// trace server's pods in ns: what docs/kubectl-claw.md says a user needs.
func grantPortForward(t *testing.T, ns, home string) {
	t.Helper()
	ctx := context.Background()
	cs := clientset(t)
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "trace-ui"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"get", "create"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "trace-ui"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "trace-ui"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: home}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer learns of the binding from its informers:
	// wait until it applies, as a person would see it apply.
	user := "system:serviceaccount:" + home + ":viewer"
	eventually(t, "the port-forward RBAC applies", func() bool {
		for _, a := range []authzv1.ResourceAttributes{
			{Namespace: ns, Verb: "get", Resource: "services"},
			{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "portforward"},
		} {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
				Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}, ResourceAttributes: &a},
			}, metav1.CreateOptions{})
			if err != nil || !sar.Status.Allowed {
				return false
			}
		}
		return true
	})
}

func TestTraceAndUIThroughAPortForwardToTheServersPod(t *testing.T) {
	t.Parallel()
	startNode(t)
	srv := startTraceServer(t)
	ns, system := env.Namespace(t), env.Namespace(t)
	run := newRun(t, ns, "demo-timer")
	events, rendered := recordedSession(t)
	upload(t, srv.URL, run, 1, events, nil)
	kc := viewerKubeconfig(t, ns)
	serverBehindService(t, system, srv.URL, false)

	// Without the port-forward RBAC, the error says what is missing.
	c := claw(t, ns, nil, nil, "trace", "demo-timer", "--kubeconfig", kc, "--server-namespace", system)
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "forbidden") {
		t.Errorf("without access to the server's namespace: exit %d, %s", c.code, c.errOut)
	}

	grantPortForward(t, system, ns)
	c = claw(t, ns, nil, nil, "trace", "demo-timer", "--kubeconfig", kc, "--server-namespace", system)
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	if got := strings.TrimSuffix(c.out.String(), "\n"); got != strings.Join(rendered, "\n") {
		t.Errorf("trace through the port-forward printed:\n%s\nwant:\n%s", got, strings.Join(rendered, "\n"))
	}

	ctx, cancel := context.WithCancel(context.Background())
	out := &testenv.SyncBuffer{}
	o := &Options{}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = strings.NewReader(""), out, &testenv.SyncBuffer{}
	done := make(chan int)
	go func() {
		done <- o.Execute(ctx, []string{"--kubeconfig", kc, "-n", ns, "ui", "--no-open", "--server-namespace", system})
	}()
	var page string
	eventually(t, "ui prints its address", func() bool {
		if _, rest, ok := strings.Cut(out.String(), "http://"); ok {
			page = "http://" + strings.Fields(rest)[0]
		}
		return page != ""
	})
	resp, err := http.Get(page + "runs/" + ns + "/demo-timer")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("run page through ui and the port-forward: %s", resp.Status)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("ui exit %d", code)
	}

	// A server that speaks HTTPS (the chart's server.tls) is spoken to so.
	secure := env.Namespace(t)
	serverBehindService(t, secure, srv.URL, true)
	grantPortForward(t, secure, ns)
	c = claw(t, ns, nil, nil, "trace", "demo-timer", "--kubeconfig", kc, "--server-namespace", secure)
	if c.code != 0 || strings.TrimSuffix(c.out.String(), "\n") != strings.Join(rendered, "\n") {
		t.Errorf("trace through a port-forward to an HTTPS server: exit %d, %s\n%s", c.code, c.errOut, c.out)
	}
}
