// Package bench holds the operator's benchmarks: `make bench-operator`
// (200 rigs, 1,000 runs, beside the Job controller on the same work) and
// `make bench-scale` (2,000 rigs, 10,000 runs; a reduced run of it is part
// of `make test`).
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/gobuild"
)

// auditPolicy logs every write at the Metadata level, once, when it is
// answered: who wrote what, and the answer's code. Reads are not logged;
// the log costs the API server the same in every phase it measures.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditedEnv is an envtest whose API server writes the audit log at path.
func auditedEnv(t *testing.T, crds string) (*envtest.Environment, string) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	// BENCH_AUDIT_DIR keeps the audit log after the test, to follow one
	// run's writes request by request.
	logDir := dir
	if d := os.Getenv("BENCH_AUDIT_DIR"); d != "" {
		logDir = d
	}
	log := filepath.Join(logDir, "audit.log")
	env := &envtest.Environment{CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", policy)
	args.Set("audit-log-path", log)
	args.Set("audit-log-mode", "batch")
	args.Set("audit-log-batch-max-wait", "1s")
	args.Set("audit-log-maxsize", "0")
	args.Set("profiling", "true")
	return env, log
}

// apiServer is the benchmark's control plane: an envtest API server that
// writes an audit log, its process, and an admin client for the harness.
type apiServer struct {
	scheme   *kruntime.Scheme
	cfg      *rest.Config // admin
	kcfg     *rest.Config // admin, at the rate of a harness that stands for many kubelets
	client   client.Client
	auditLog string
	pid      int
}

// startAPIServer starts the audited envtest with the CRDs; the harness's
// client may send qps requests a second (twice that in a burst).
func startAPIServer(t *testing.T, qps float32) *apiServer {
	t.Helper()
	a := &apiServer{scheme: kruntime.NewScheme()}
	_ = clientgoscheme.AddToScheme(a.scheme)
	_ = farmv1.AddToScheme(a.scheme)
	env, log := auditedEnv(t, "../../config/crd/bases")
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	a.cfg, a.auditLog, a.pid = cfg, log, apiserverPID(t, env)
	a.kcfg = rest.CopyConfig(cfg)
	a.kcfg.QPS, a.kcfg.Burst = qps, int(2*qps)
	if a.client, err = client.New(a.kcfg, client.Options{Scheme: a.scheme}); err != nil {
		t.Fatal(err)
	}
	return a
}

// healthyRig is a rig health route's answer with every part ready.
const healthyRig = `{"arm":true,"camera":true,"bridge":true,"calibrated":true,"origin_pinned":true,"ready":true,"layout_learned":true}`

// writeCount is the writes of one user as the audit log shows them.
type writeCount struct {
	total   int
	byKey   map[string]int // "create pods" → n
	refused map[string]int // "update agentruns/status 409" → n
}

// auditWrites counts the writes each user made between two times (the
// request's receipt), by verb and resource. users maps a username to the
// name it is counted under; other users are not counted.
func auditWrites(t *testing.T, path string, from, to time.Time, users map[string]string) map[string]*writeCount {
	t.Helper()
	time.Sleep(2 * time.Second) // the batch backend flushes every second
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	out := map[string]*writeCount{}
	for _, name := range users {
		out[name] = &writeCount{byKey: map[string]int{}, refused: map[string]int{}}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb string `json:"verb"`
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		name, ok := users[ev.User.Username]
		if !ok || ev.RequestReceivedTimestamp.Before(from) || ev.RequestReceivedTimestamp.After(to) {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		key := ev.Verb + " " + res
		c := out[name]
		c.total++
		c.byKey[key]++
		if ev.ResponseStatus.Code >= 300 {
			c.refused[fmt.Sprintf("%s %d", key, ev.ResponseStatus.Code)]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("audit log: %v", err)
	}
	return out
}

// perUnit prints a user's writes per unit (run or pod), most first.
func (c *writeCount) perUnit(units int) string {
	keys := make([]string, 0, len(c.byKey))
	for k := range c.byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c.byKey[keys[i]] > c.byKey[keys[j]] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "      %-34s %6.2f\n", k, float64(c.byKey[k])/float64(units))
	}
	return b.String()
}

// apiserverPID finds the envtest API server's process by its certificate
// directory, which envtest makes for each environment.
func apiserverPID(t *testing.T, env *envtest.Environment) int {
	want := "--cert-dir=" + env.ControlPlane.GetAPIServer().CertDir
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "kube-apiserver") {
			for _, a := range args {
				if a == want {
					return pid
				}
			}
		}
	}
	t.Fatal("kube-apiserver's process not found")
	return 0
}

// cpuSeconds is a process's user+system CPU time.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command may hold spaces: the fields follow its closing parenthesis.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// peakRSSOf is a process's high-water resident set (VmHWM), in bytes.
func peakRSSOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// kubeconfig writes a kubeconfig for a bearer token against cfg's server.
func kubeconfig(t *testing.T, cfg *rest.Config, token string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: bench
  user: {token: %q}
contexts:
- name: bench
  context: {cluster: bench, user: bench}
current-context: bench
`, cfg.Host, b64(cfg.CAData), token)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// process is a program the benchmark starts and measures.
type process struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // keep the tail only
		l.b.Reset()
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t *testing.T, path string, args []string, env ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(path, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// buildManager builds cmd/manager once per benchmark run.
func buildManager(t *testing.T) string {
	t.Helper()
	return gobuild.Build(t, "../../cmd/manager")
}

// scrape reads a Prometheus text endpoint into "name{labels}" → value.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, nil
}

// sum adds the samples of a metric whose labels contain every one of want.
func sum(m map[string]float64, name string, want ...string) float64 {
	var s float64
	for k, v := range m {
		if !strings.HasPrefix(k, name+"{") && k != name {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(k, w) {
				ok = false
				break
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// percentile of a sorted slice.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*p/100)]
}

func sortDurations(d []time.Duration) []time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}

// managerConfig makes the manager's ServiceAccount, binds it the generated
// ClusterRole (config/rbac/role.yaml), and returns a config that authenticates
// with a token of it.
func managerConfig(ctx context.Context, t *testing.T, admin *rest.Config, c client.Client) *rest.Config {
	b, err := os.ReadFile("../../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatalf("config/rbac/role.yaml: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "clawfarm-system", Name: "clawfarm-manager"}}
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sa.Namespace}}))
	must(t, c.Create(ctx, sa))
	must(t, c.Create(ctx, &role))
	must(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}}))
	return tokenConfig(ctx, t, admin, c, sa)
}

// tokenConfig is a rest config that authenticates as sa with a token of an
// hour, on admin's API server.
func tokenConfig(ctx context.Context, t *testing.T, admin *rest.Config, c client.Client, sa *corev1.ServiceAccount) *rest.Config {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	must(t, c.SubResource("token").Create(ctx, sa, tr))
	return &rest.Config{Host: admin.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}}
}

// pipelineClient is a client that creates and cancels runs in ns as a
// ServiceAccount with a Role for that alone, the way a CI pipeline or a
// GitOps tool does: its requests share the API server through API Priority
// and Fairness, as the manager's do.
func pipelineClient(ctx context.Context, t *testing.T, admin *rest.Config, c client.Client, ns string, scheme *kruntime.Scheme) client.Client {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "run-pipeline"}}
	must(t, c.Create(ctx, sa))
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "run-pipeline"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{farmv1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"create", "get", "patch"}}}}
	must(t, c.Create(ctx, role))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "run-pipeline"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}}))
	cfg := tokenConfig(ctx, t, admin, c, sa)
	cfg.QPS = -1
	pc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func must(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
		runtime.Goexit()
	}
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out: %s", what)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// benchWorkers is the manager's --agentrun-workers: 32, the setting for a
// farm of this size (cmd/manager defaults to 8), or BENCH_WORKERS.
func benchWorkers() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_WORKERS")); err == nil && n > 0 {
		return n
	}
	return 32
}
