package riggate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

var (
	env *testenv.Env
	cs  *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// rigServer stands for a rig's MCP server on the host's loopback: it
// records what reaches it, and GET /mcp is a stream of events that runs
// until the client goes. Like PhysiClaw it refuses a Host that is not a
// loopback name with a port (421) and any Origin (403): the gateway must
// send neither what its own caller sent.
type rigServer struct {
	mu    sync.Mutex
	calls []string // method path, Authorization header
}

func (s *rigServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls = append(s.calls, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
	s.mu.Unlock()
	if host, port, err := net.SplitHostPort(r.Host); err != nil || port == "" || !slices.Contains([]string{"127.0.0.1", "localhost", "::1"}, host) {
		http.Error(w, `{"error":"unrecognized Host"}`, http.StatusMisdirectedRequest)
		return
	}
	if r.Header.Get("Origin") != "" {
		http.Error(w, "Invalid Origin header", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/api/status" {
		io.WriteString(w, `{"ready":true}`)
		return
	}
	if r.Method == http.MethodGet {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
}

// farm is a namespace with two runs, their attempt pods on rig-a (r1, r2)
// and rig-b (r3), r1 holding rig-a's Lease, and a gateway over rigServer.
type farm struct {
	ns     string
	gw     *Gateway
	http   *httptest.Server
	rigURL string // the rig's own server
	// policies is the CLAWFARM_TOOL_POLICIES of the attempt pods made next.
	policies string
	rig      *rigServer
	runUID   map[string]types.UID
}

func newFarm(t *testing.T) *farm {
	t.Helper()
	ctx := context.Background()
	f := &farm{ns: env.Namespace(t), rig: &rigServer{}, runUID: map[string]types.UID{}}
	if _, err := cs.CoreV1().ServiceAccounts(f.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "loop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"r1", "r2", "r3"} {
		ar := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: run}, Spec: farmv1.AgentRunSpec{
			RigRef: &farmv1.RigReference{Name: "rig-a"}, Trigger: "go", Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "m", BaseURL: "http://127.0.0.1:1/v1"}}}
		if err := env.Client.Create(ctx, ar); err != nil {
			t.Fatal(err)
		}
		f.runUID[run] = ar.UID
	}
	f.lease(t, "rig-a", "r1")
	up := httptest.NewServer(f.rig)
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	f.rigURL = up.URL
	f.gw = &Gateway{
		Upstream: func(ns, rig string) (*url.URL, bool) { return upURL, ns == f.ns && (rig == "rig-a" || rig == "rig-b") },
		Auth:     &KubeAuthority{Client: cs, Pods: env.Client, Audience: contract.DefaultRigAudience},
		Leases:   env.Client,
		Runs:     env.Client,
		Logf:     t.Logf,
	}
	f.http = httptest.NewServer(f.gw)
	t.Cleanup(f.http.Close)
	return f
}

// lease makes run the holder of rig's Lease, as the manager does.
func (f *farm) lease(t *testing.T, rig, run string) *coordinationv1.Lease {
	t.Helper()
	ctx := context.Background()
	holder := string(f.runUID[run])
	l := &coordinationv1.Lease{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: rig}, l)
	l.Labels = map[string]string{farmv1.LabelRun: run, farmv1.LabelRig: rig}
	l.Spec.HolderIdentity = &holder
	if err != nil {
		l.Namespace, l.Name = f.ns, rig
		err = env.Client.Create(ctx, l)
	} else {
		err = env.Client.Update(ctx, l)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// attemptToken makes run's attempt pod on rig and a token projected for it
// with audience.
func (f *farm) attemptToken(t *testing.T, run, rig, audience string) (string, *corev1.Pod) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: run + "-a1",
			Labels: map[string]string{farmv1.LabelKind: "attempt", farmv1.LabelRun: run, farmv1.LabelRig: rig, farmv1.LabelAttempt: "1"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: run,
				UID: f.runUID[run], Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{ServiceAccountName: "loop", Containers: []corev1.Container{{Name: "loop", Image: "loop"}}},
	}
	if f.policies != "" {
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: contract.SettingToolPolicies.Env, Value: f.policies}}
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return token(t, f.ns, pod, audience), pod
}

func token(t *testing.T, ns string, pod *corev1.Pod, audience string) string {
	t.Helper()
	spec := authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}
	if pod != nil {
		spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "loop", &authnv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// call makes a peek on the rig with the token (none when empty).
func (f *farm) call(t *testing.T, rig, tok string) (int, string) {
	t.Helper()
	return f.callTool(t, rig, tok, "peek", "{}")
}

// callTool posts a tools/call of tool with the JSON args to the rig, with
// the token (none when empty), and returns the status and the body.
func (f *farm) callTool(t *testing.T, rig, tok, tool, args string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args)
	req, _ := http.NewRequest(http.MethodPost, f.http.URL+"/rigs/"+f.ns+"/"+rig+"/mcp", strings.NewReader(body))
	// The gateway is reached by the rig network's name, from a page that
	// may send its own Origin: neither may reach the rig's server.
	req.Host = "rig-host-1.farm.example:8050"
	req.Header.Set("Origin", "http://rig-host-1.farm.example:8050")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Only the attempt pod of the run that holds the rig's Lease reaches the
// rig, and without the cluster's credential; everyone else is refused
// with a status and a sentence that say why.
func TestOnlyTheLeaseHoldersPodReachesTheRig(t *testing.T) {
	f := newFarm(t)
	holder, _ := f.attemptToken(t, "r1", "rig-a", contract.DefaultRigAudience)
	other, _ := f.attemptToken(t, "r2", "rig-a", contract.DefaultRigAudience)
	elsewhere, _ := f.attemptToken(t, "r3", "rig-b", contract.DefaultRigAudience)

	if code, body := f.call(t, "rig-a", holder); code != http.StatusOK || !strings.Contains(body, `"result"`) {
		t.Fatalf("the holder's pod: %d %s", code, body)
	}
	f.rig.mu.Lock()
	calls := strings.Join(f.rig.calls, "\n")
	f.rig.mu.Unlock()
	if calls != "POST /mcp auth=" {
		t.Errorf("the rig saw %q, want one POST /mcp without an Authorization header", calls)
	}

	var pod corev1.Pod
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "r1-a1"}, &pod); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, rig, tok string
		code           int
		want           string
	}{
		{"no token", "rig-a", "", http.StatusUnauthorized, "no bearer token"},
		{"the holder pod's token for the API server", "rig-a", token(t, f.ns, &pod, ""), http.StatusUnauthorized, ""},
		{"the holder pod's token for the trace server", "rig-a", token(t, f.ns, &pod, contract.DefaultTraceAudience), http.StatusUnauthorized, ""},
		{"a token of the loop's account bound to no pod", "rig-a", token(t, f.ns, nil, contract.DefaultRigAudience), http.StatusForbidden, "is not a pod's service account token"},
		{"another run's pod for the same rig, waiting its turn", "rig-a", other, http.StatusForbidden, "rig " + f.ns + "/rig-a is held by run r1, not by run r2"},
		{"a pod of another rig", "rig-a", elsewhere, http.StatusForbidden, "drives rig " + f.ns + "/rig-b, not " + f.ns + "/rig-a"},
		{"a pod on its rig, which no run holds", "rig-b", elsewhere, http.StatusForbidden, "is held by no run"},
		{"a rig this gateway does not front", "rig-z", holder, http.StatusNotFound, "not behind this gateway"},
	} {
		if code, body := f.call(t, c.rig, c.tok); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q, want %d with %q", c.what, code, body, c.code, c.want)
		}
	}
	f.rig.mu.Lock()
	defer f.rig.mu.Unlock()
	if len(f.rig.calls) != 1 {
		t.Errorf("the rig saw %d requests, want only the holder's one: %v", len(f.rig.calls), f.rig.calls)
	}
}

// A session whose Lease moves loses the rig at once: its open stream is
// cut, and its next call is refused; a pod that is gone is no caller.
func TestALeaseThatMovesCutsTheSession(t *testing.T) {
	f := newFarm(t)
	holder, pod := f.attemptToken(t, "r1", "rig-a", contract.DefaultRigAudience)
	next, _ := f.attemptToken(t, "r2", "rig-a", contract.DefaultRigAudience)

	req, _ := http.NewRequest(http.MethodGet, f.http.URL+"/rigs/"+f.ns+"/rig-a/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+holder)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := bufio.NewReader(resp.Body)
	if line, err := events.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("the holder's stream: %q %v", line, err)
	}
	if n := f.gw.InFlight(f.ns, "rig-a"); n != 1 {
		t.Fatalf("%d requests in flight on rig-a, want the stream", n)
	}

	moved := time.Now()
	l := f.lease(t, "rig-a", "r2") // the run is cancelled and the rig handed on
	f.gw.LeaseChanged(f.ns, "rig-a", l)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := events.ReadString('\n'); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case <-ended:
		if d := time.Since(moved); d > time.Second {
			t.Errorf("the stream was cut %s after the Lease moved, want within a second", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the old holder's stream still runs 5 s after the Lease moved")
	}
	if code, body := f.call(t, "rig-a", holder); code != http.StatusForbidden || !strings.Contains(body, "held by run r2, not by run r1") {
		t.Errorf("the old holder's next call: %d %s, want 403", code, body)
	}
	if code, body := f.call(t, "rig-a", next); code != http.StatusOK {
		t.Errorf("the new holder: %d %s", code, body)
	}

	// A pod that is gone (here the old holder's) is refused although its
	// token's review is cached.
	f.lease(t, "rig-a", "r1")
	if err := env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := f.call(t, "rig-a", holder)
		if code == http.StatusForbidden && (strings.Contains(body, "is gone") || strings.Contains(body, "being deleted")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a deleted pod's call: %d %s, want 403", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
