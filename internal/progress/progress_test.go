package progress

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

func TestPatcherThrottlesAndFlushes(t *testing.T) {
	var mu sync.Mutex
	var patches []map[string]map[string]contract.Progress
	var times []time.Time
	p := New(func(_ context.Context, b []byte) error {
		var v map[string]map[string]contract.Progress
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("patch is not JSON: %s", b)
		}
		mu.Lock()
		patches = append(patches, v)
		times = append(times, time.Now())
		mu.Unlock()
		return nil
	}, 100*time.Millisecond, nil)
	start := time.Now()
	for i := 1; i <= 50; i++ {
		p.Report(contract.Progress{Attempt: 1, Turn: i, LastNote: "n"})
		time.Sleep(5 * time.Millisecond)
	}
	p.Close(context.Background())
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if max := int(elapsed/(100*time.Millisecond)) + 2; len(patches) > max || len(patches) < 2 {
		t.Errorf("%d patches in %s", len(patches), elapsed)
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 90*time.Millisecond {
			t.Errorf("patches %d and %d only %s apart", i-1, i, gap)
		}
	}
	if last := patches[len(patches)-1]["status"]["progress"]; last.Turn != 50 {
		t.Errorf("the last patch carries turn %d, want the final 50", last.Turn)
	}
}

// On rignode a pod has no /var/run/secrets mount: its service-account
// credentials come as a kubeconfig named by KUBECONFIG, and progress reaches
// the run's status through it.
func TestNewInClusterUsesKubeconfig(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization") + " " + string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"farm.clawfarm.dev/v1alpha1","kind":"AgentRun","metadata":{"name":"timer","namespace":"farm"}}`))
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: pod-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	p, err := NewInCluster("farm/timer", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Report(contract.Progress{Attempt: 1, Turn: 3, LastNote: "opened Clock"})
	p.Close(context.Background())
	select {
	case req := <-got:
		want := "PATCH /apis/farm.clawfarm.dev/v1alpha1/namespaces/farm/agentruns/timer/status Bearer pod-token "
		if !strings.HasPrefix(req, want) || !strings.Contains(req, `"turn":3`) {
			t.Fatalf("request %q, want %q… with turn 3", req, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no progress patch reached the API server")
	}

	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	if _, err := NewInCluster("farm/timer", nil); err == nil || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Fatalf("a missing kubeconfig: %v", err)
	}
}
