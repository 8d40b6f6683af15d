// Package testenv is what the controllers' integration suites share: an
// envtest API server with clawfarm's CRDs, fresh namespaces, Ready nodes,
// a stand-in for the rigs' health route, polling helpers and a metric
// reader. Each controller's suite starts its own manager on top.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// Env is a running API server and etcd, with a client and a health route.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	Health *Health

	env    *envtest.Environment
	health *httptest.Server
}

// Assets names the directory of the control plane's binaries envtest runs;
// `make test` builds them from source and sets it.
const Assets = "KUBEBUILDER_ASSETS"

// Strict is set to 1 by `make test`: there a test whose tools are missing
// fails instead of skipping, so a suite is never skipped silently.
const Strict = "CLAWFARM_TEST_STRICT"

func strict() bool { return os.Getenv(Strict) == "1" }

// MainNeeds is called first by a TestMain whose suite needs the control
// plane (or another tool named by an environment variable): when one of vars
// is unset it says so and ends the process, with 0 — the suite is skipped,
// as `make unit` wants — or with 1 under `make test` (Strict). A process that
// never reaches m.Run leaves no result in go test's cache.
func MainNeeds(vars ...string) {
	for _, v := range vars {
		if os.Getenv(v) != "" {
			continue
		}
		if strict() {
			fmt.Fprintf(os.Stderr, "%s is not set, and %s=1 says every test must run: run `make test`, which sets it\n", v, Strict)
			os.Exit(1)
		}
		fmt.Printf("skipping: %s is not set; run `make test`, which builds the control plane and the tools from source and sets it\n", v)
		os.Exit(0)
	}
}

// Needs skips t when one of vars is unset, or fails it under `make test`
// (Strict). Reading the variables here, inside a test, also makes go test's
// cache key on their values.
func Needs(t testing.TB, vars ...string) {
	t.Helper()
	for _, v := range vars {
		if os.Getenv(v) == "" {
			Unavailable(t, "%s is not set; run `make test`, which builds the control plane and the tools from source and sets it", v)
		}
	}
}

// Unavailable skips t because a tool it needs is missing (why says which),
// or fails it under `make test` (Strict), where nothing may be skipped.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if strict() {
		t.Fatalf(format+" (%s=1: every test must run)", append(args, Strict)...)
	}
	t.Skipf("skipping: "+format, args...)
}

// inputs reads, once and inside a test, what the environment gives the
// suite, so that go test's cache keys on it: a TestMain's own reads happen
// before go test starts recording them.
var inputs sync.Once

func recordInputs() { inputs.Do(func() { _ = os.Getenv(Assets) }) }

// Start starts the API server and etcd from KUBEBUILDER_ASSETS with the CRDs
// in crdDir, and a health route for rigs.
func Start(crdDir string) (*Env, error) {
	if os.Getenv(Assets) == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make test`, which builds the control plane from source and points envtest at it")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := farmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	e := &Env{Scheme: scheme, env: &envtest.Environment{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true}}
	var err error
	if e.Config, err = e.env.Start(); err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	if e.Client, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		_ = e.env.Stop()
		return nil, err
	}
	e.Health = &Health{down: map[string]bool{}}
	e.health = httptest.NewServer(e.Health)
	e.Health.URL = e.health.URL
	return e, nil
}

// Kubeconfig provisions an administrator (system:masters) named name and
// returns a kubeconfig for it, for processes the test starts.
func (e *Env) Kubeconfig(name string) ([]byte, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", name, err)
	}
	return u.KubeConfig()
}

// Stop stops the health route, the API server and etcd.
func (e *Env) Stop() {
	e.health.Close()
	_ = e.env.Stop()
}

// Health serves /rigs/<name>/api/status, the PhysiClaw status JSON; a rig
// marked down answers all false.
type Health struct {
	URL  string
	mu   sync.Mutex
	down map[string]bool
}

func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/rigs/"), "/api/status")
	h.mu.Lock()
	ok := !h.down[name]
	h.mu.Unlock()
	_ = json.NewEncoder(w).Encode(contract.RigStatus{Arm: ok, Camera: ok, Bridge: ok, Calibrated: ok,
		OriginPinned: ok, Ready: ok, LayoutLearned: ok})
}

// Set marks the rig served as <name> up or down.
func (h *Health) Set(name string, up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down[name] = !up
}

var nsSeq struct {
	sync.Mutex
	n int
}

// Namespace makes a fresh namespace for one test.
func (e *Env) Namespace(t *testing.T) string {
	t.Helper()
	recordInputs()
	nsSeq.Lock()
	nsSeq.n++
	name := fmt.Sprintf("t%d-%s", nsSeq.n, strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, t.Name()))
	nsSeq.Unlock()
	if len(name) > 50 {
		name = strings.TrimRight(name[:50], "-")
	}
	if err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// MakeRig creates a Ready node and a rig on it, served by the health route as
// <ns>-<name>, and waits for the rig to be Ready.
func (e *Env) MakeRig(t *testing.T, ns, name string, labels map[string]string) *farmv1.DeviceRig {
	t.Helper()
	node := e.MakeNode(t, ns+"-"+name)
	rig := &farmv1.DeviceRig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: farmv1.DeviceRigSpec{NodeName: node, Endpoint: farmv1.RigEndpoint{
			URL:       e.Health.URL + "/rigs/" + ns + "-" + name + "/mcp",
			HealthURL: e.Health.URL + "/rigs/" + ns + "-" + name + "/api/status",
		}, Phone: farmv1.Phone{Platform: "ios", Model: "iPhone 15"}},
	}
	if err := e.Client.Create(context.Background(), rig); err != nil {
		t.Fatal(err)
	}
	return e.WaitRig(t, ns, name, func(r *farmv1.DeviceRig) bool { return r.Status.Phase == farmv1.RigReady })
}

// MakeNode creates a Ready node.
func (e *Env) MakeNode(t *testing.T, name string) string {
	t.Helper()
	recordInputs()
	if err := e.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	e.SetNodeReady(t, name, true)
	return name
}

// SetNodeReady sets the node's Ready condition, as its kubelet would.
func (e *Env) SetNodeReady(t *testing.T, name string, ready bool) {
	t.Helper()
	var n corev1.Node
	if err := e.Client.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "Test",
		Message: "set by the test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := e.Client.Status().Update(context.Background(), &n); err != nil {
		t.Fatal(err)
	}
}

// WaitRig polls the rig until ok, for up to 30 s, and fails with its status.
func (e *Env) WaitRig(t *testing.T, ns, name string, ok func(*farmv1.DeviceRig) bool) *farmv1.DeviceRig {
	t.Helper()
	var rig farmv1.DeviceRig
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := e.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &rig); err == nil && ok(&rig) {
			return &rig
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(rig.Status, "", "  ")
	t.Fatalf("rig %s/%s did not reach the expected state; status:\n%s", ns, name, b)
	return nil
}

// Eventually polls cond for up to 30 s.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// MetricValue reads one sample (counter, gauge, or a histogram's sample
// count) by name and label pairs; a missing sample fails the test, except for
// a counter vector, which shows a label set only once it has counted.
func MetricValue(t *testing.T, g prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labelPairs); i += 2 {
				if have[labelPairs[i]] != labelPairs[i+1] {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetGauge().GetValue()
		}
	}
	if strings.HasSuffix(name, "_total") {
		return 0
	}
	t.Fatalf("no sample %s%v", name, labelPairs)
	return 0
}

// OffsetClock is real time plus an offset a test can advance.
type OffsetClock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the real time plus the offset.
func (c *OffsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Since is Now() - t.
func (c *OffsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Advance moves the clock forward by d.
func (c *OffsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// RunManager starts a controller manager on the API server, as a suite's
// TestMain does: opts with the Env's scheme, no metrics endpoint and
// controller names free to repeat, setup adding the controllers. stop ends
// the manager and waits for it.
func (e *Env) RunManager(opts ctrl.Options, setup func(ctrl.Manager) error) (stop func(), err error) {
	opts.Scheme = e.Scheme
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.Controller.SkipNameValidation = ptr.To(true)
	mgr, err := ctrl.NewManager(e.Config, opts)
	if err != nil {
		return nil, err
	}
	if err := setup(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// BuiltTool is the path of a tool a hack/ script builds from its Go module:
// $envVar when set (make test sets each), else what `script --print`
// names, from a test two directories below the repository's root. A tool
// that is not built makes the test Unavailable.
func BuiltTool(t testing.TB, envVar, script, what string) string {
	t.Helper()
	bin := os.Getenv(envVar)
	if bin == "" {
		out, err := exec.Command("../../hack/"+script, "--print").Output()
		if err != nil {
			t.Fatalf("hack/%s --print: %v", script, err)
		}
		bin = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(bin); err != nil {
		Unavailable(t, "%s is not built (%v): run hack/%s, as `make test` does", what, err, script)
	}
	return bin
}

// FreeAddr is a loopback address ("127.0.0.1:port") nothing listens on
// now, for a server a test starts in a process of its own.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// SyncBuffer is an output several goroutines write to at once (a command's
// stdout and stderr, a logger) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
