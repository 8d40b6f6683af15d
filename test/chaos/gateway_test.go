package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The rigs of rignode and of the kubelet host are served through a rig
// gateway (`rignode gateway`), as on a real rig host: their DeviceRigs name
// the gateway, and every session calls its rig once through it with its
// pod's rig token (test/chaos/session). Behind the gateway, rigBackend
// plays the rigs: it answers their health route and checks each call it is
// handed against the rig's Lease at that moment — a call of a run that
// does not hold the Lease reached the phone past the gateway, a safety
// figure. The harness, as a stranger with no token, calls every rig now
// and then: each of those calls must be refused.

// sessionHeader is test/chaos/session's SessionHeader.
const sessionHeader = "X-Chaos-Session"

type rigGate struct {
	t       *testing.T
	c       client.Client
	url     string
	backend *httptest.Server
	cmd     *exec.Cmd

	mu                   sync.Mutex
	admitted             int
	intruders            []string
	strangers, strangeIn int
}

// startGateway starts the rig backend and a gateway in front of it for the
// rigs with the given indexes, with bin as rignode's binary.
func startGateway(t *testing.T, env *testenv.Env, dir, bin string, rigs []int) *rigGate {
	t.Helper()
	g := &rigGate{t: t, c: env.Client, url: "http://127.0.0.1:" + fmt.Sprint(testenv.FreePort(t))}
	g.backend = httptest.NewServer(g.rig(env.Health))
	kcPath := kubeconfigFile(t, env, "chaos-rig-gateway", filepath.Join(dir, "rig-gateway.kubeconfig"))
	args := []string{"gateway", "--kubeconfig", kcPath, "--listen", strings.TrimPrefix(g.url, "http://")}
	for _, i := range rigs {
		args = append(args, fmt.Sprintf("--rig=%s/%s=%s/rigs/%s", ns, rigName(i), g.backend.URL, rigName(i)))
	}
	log, err := os.Create(filepath.Join(dir, "rig-gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command(bin, args...)
	g.cmd.Stdout, g.cmd.Stderr = log, log
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start the rig gateway: %v", err)
	}
	go func() { _ = g.cmd.Wait(); log.Close() }()
	testenv.Eventually(t, "the rig gateway to serve "+g.rigURL(rigs[0])+"/api/status (its log: "+filepath.Join(dir, "rig-gateway.log")+")", func() bool {
		resp, err := http.Get(g.rigURL(rigs[0]) + "/api/status")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return g
}

// rigURL is rig i's base URL behind the gateway.
func (g *rigGate) rigURL(i int) string { return g.url + "/rigs/" + ns + "/" + rigName(i) }

func (g *rigGate) stop() {
	if g.cmd.Process != nil {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	}
	g.backend.Close()
}

// rig serves the rigs behind the gateway: the health route from health,
// and an MCP endpoint that checks the caller against the rig's Lease.
func (g *rigGate) rig(health http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/api/status") {
			health.ServeHTTP(w, r)
			return
		}
		rig, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/rigs/"), "/mcp")
		if !ok || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		session := r.Header.Get(sessionHeader)
		run, _, _ := strings.Cut(session, " ")
		var l coordinationv1.Lease
		err := g.c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: rig}, &l)
		holder := l.Labels[farmv1.LabelRun]
		g.mu.Lock()
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			g.t.Logf("rig %s: read its Lease: %v", rig, err)
		case run == "" || holder != run:
			g.intruders = append(g.intruders, fmt.Sprintf("%s: %q while the Lease is held by %q", rig, session, holder))
		default:
			g.admitted++
		}
		g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a screen"}]}}`)
	})
}

// callAsStranger calls the rigs in turn, every second until ctx ends, as a
// process on the rig host that holds no token.
func (g *rigGate) callAsStranger(ctx context.Context, rigs []int) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tap","arguments":{"x":1,"y":1}}}`
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.rigURL(rigs[n%len(rigs)])+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // the gateway is not there to answer: nothing reached the rig either
		}
		resp.Body.Close()
		g.mu.Lock()
		g.strangers++
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			g.strangeIn++
		}
		g.mu.Unlock()
	}
}

// callOutcomes counts the sessions' own records of their rig calls (the
// .chaos-calls lines under the rigs' state directories) by outcome.
func callOutcomes(dirs ...string) map[string]int {
	out := map[string]int{}
	for _, d := range dirs {
		for _, line := range lockLines(d, callsFile) {
			f := strings.Fields(line)
			if len(f) >= 4 { // "<rig>: <run> <attempt> <outcome>…"
				out[f[3]]++
			}
		}
	}
	return out
}
