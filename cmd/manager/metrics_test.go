package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The manager's metrics endpoint, as its flags make it by default, on a real
// API server: HTTPS; no token, a malformed one or one the API server did
// not issue → 401 (not 500); a token whose subject may not get
// /metrics → 403; Prometheus's token, bound to config/rbac's metrics-reader
// role → the metrics. With --metrics-secure=false it is plain HTTP to all.
func TestMetricsNeedAReader(t *testing.T) {
	testenv.Needs(t, testenv.Assets)
	env, err := testenv.Start("../../config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(env.Config)

	role := createMetricsReaderRole(ctx, t, cs)
	prometheus, stranger := serviceAccountToken(ctx, t, cs, "prometheus"), serviceAccountToken(ctx, t, cs, "stranger")
	bindMetricsReader(ctx, t, cs, role, "prometheus")

	serve := func(args ...string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		f := newManagerFlags()
		if err := f.parse(append([]string{"--metrics-bind-address=" + addr}, args...)); err != nil {
			t.Fatal(err)
		}
		httpClient, err := rest.HTTPClientFor(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := metricsserver.NewServer(f.metricsOptions(), env.Config, httpClient)
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		go func() { _ = srv.Start(sctx) }()
		return addr
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for {
			resp, err := client.Do(req)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("GET %s: %v", url, err)
				}
				time.Sleep(100 * time.Millisecond) // the server is starting
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(body)
		}
	}

	addr := serve()
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"a malformed token", "not-a-token!", http.StatusUnauthorized},
		{"a token the API server did not issue", prometheus[:len(prometheus)-4] + "AAAA", http.StatusUnauthorized},
		{"a stranger", stranger, http.StatusForbidden}, {"prometheus", prometheus, http.StatusOK}} {
		code, body := get("https://"+addr+"/metrics", c.token)
		if code != c.want {
			t.Errorf("%s: %d %q, want %d", c.who, code, body, c.want)
		}
		if c.want == http.StatusOK && !strings.Contains(body, "# HELP") {
			t.Errorf("%s: no metrics in %q", c.who, body)
		}
	}
	if code, _ := get("http://"+addr+"/metrics", prometheus); code == http.StatusOK {
		t.Error("the secure endpoint answers plain HTTP")
	}

	addr = serve("--metrics-secure=false")
	if code, body := get(fmt.Sprintf("http://%s/metrics", addr), ""); code != http.StatusOK || !strings.Contains(body, "# HELP") {
		t.Errorf("--metrics-secure=false: %d %q, want the metrics to anyone", code, body)
	}
}

// createMetricsReaderRole creates config/rbac's metrics-reader ClusterRole,
// the one the chart binds Prometheus's token to, and returns its name.
func createMetricsReaderRole(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	b, err := os.ReadFile("../../config/rbac/metrics_reader_role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return role.Name
}

// serviceAccountToken creates the ServiceAccount default/name and returns a
// token the API server issued for it.
func serviceAccountToken(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// bindMetricsReader binds the ClusterRole role to the ServiceAccount default/name.
func bindMetricsReader(ctx context.Context, t *testing.T, cs kubernetes.Interface, role, name string) {
	t.Helper()
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: name}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
