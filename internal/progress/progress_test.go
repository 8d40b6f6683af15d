package progress

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// recorder is a PatchFunc that keeps every patch and when it came.
type recorder struct {
	t       *testing.T
	mu      sync.Mutex
	patches []contract.Progress
	times   []time.Time
}

func (r *recorder) patch(_ context.Context, b []byte) error {
	var v map[string]map[string]contract.Progress
	if err := json.Unmarshal(b, &v); err != nil {
		r.t.Errorf("patch is not JSON: %s", b)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.patches = append(r.patches, v["status"]["progress"])
	r.times = append(r.times, time.Now())
	return nil
}

func (r *recorder) got() ([]contract.Progress, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]contract.Progress(nil), r.patches...), append([]time.Time(nil), r.times...)
}

func TestPatcherThrottlesAndFlushes(t *testing.T) {
	rec := &recorder{t: t}
	p := New(rec.patch, 100*time.Millisecond, 100*time.Millisecond, nil)
	start := time.Now()
	for i := 1; i <= 50; i++ {
		p.Report(contract.Progress{Attempt: 1, Turn: i, LastNote: "n"})
		time.Sleep(5 * time.Millisecond)
	}
	p.Close(context.Background())
	elapsed := time.Since(start)
	patches, times := rec.got()
	if max := int(elapsed/(100*time.Millisecond)) + 2; len(patches) > max || len(patches) < 2 {
		t.Errorf("%d patches in %s", len(patches), elapsed)
	}
	for i := 1; i < len(times)-1; i++ { // the last is Close's, which sends what is pending at once
		if gap := times[i].Sub(times[i-1]); gap < 90*time.Millisecond {
			t.Errorf("patches %d and %d only %s apart", i-1, i, gap)
		}
	}
	if last := patches[len(patches)-1]; last.Turn != 50 {
		t.Errorf("the last patch carries turn %d, want the final 50", last.Turn)
	}
	p.Report(contract.Progress{Attempt: 1, Turn: 51}) // after Close: dropped, no panic
}

// News does not wait for the heartbeat: a routine turn waits behind it, an
// approval request that replaces it goes at once, and carries the turn.
func TestNewsGoesBeforeTheHeartbeat(t *testing.T) {
	rec := &recorder{t: t}
	p := New(rec.patch, 20*time.Millisecond, time.Hour, nil)
	p.Report(contract.Progress{Attempt: 1, Turn: 1})
	waitPatches(t, rec, 1)
	p.Report(contract.Progress{Attempt: 1, Turn: 2, LastTool: "tap"})
	time.Sleep(100 * time.Millisecond) // five news intervals: turn 2 alone is not news
	if patches, _ := rec.got(); len(patches) != 1 {
		t.Fatalf("a routine turn was sent before the heartbeat: %+v", patches)
	}
	ask := &contract.Approval{ID: "a1", Tool: "tap"}
	p.Report(contract.Progress{Attempt: 1, Turn: 2, LastTool: "tap", Approval: ask})
	waitPatches(t, rec, 2)
	p.Report(contract.Progress{Attempt: 1, Turn: 2, LastTool: "tap", Approval: ask, UpdatedAt: "later"})
	p.Close(context.Background()) // Close sends what is pending, heartbeat or not
	patches, _ := rec.got()
	if len(patches) != 3 || patches[1].Approval == nil || patches[1].Approval.ID != "a1" || patches[1].Turn != 2 || patches[2].UpdatedAt != "later" {
		t.Fatalf("patches %+v: want turn 1, then the approval request with turn 2, then the pending heartbeat at Close", patches)
	}
}

func waitPatches(t *testing.T, rec *recorder, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if patches, _ := rec.got(); len(patches) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	patches, _ := rec.got()
	t.Fatalf("%d patches after 5 s, want %d", len(patches), n)
}

func TestIsNews(t *testing.T) {
	base := contract.Progress{Attempt: 1, Turn: 3, Tokens: 10, LastTool: "tap", LastNote: "n", UpdatedAt: "t1", Steered: 1,
		Approval: &contract.Approval{ID: "a", Tool: "tap"}}
	for name, tc := range map[string]struct {
		change func(*contract.Progress)
		news   bool
	}{
		"a later turn": {func(p *contract.Progress) {
			p.Turn, p.Tokens, p.LastTool, p.LastNote, p.UpdatedAt = 4, 99, "swipe", "m", "t2"
		}, false},
		"the same approval":    {func(p *contract.Progress) { p.Approval = &contract.Approval{ID: "a", Tool: "tap"} }, false},
		"another attempt":      {func(p *contract.Progress) { p.Attempt = 2 }, true},
		"a steer delivered":    {func(p *contract.Progress) { p.Steered = 2 }, true},
		"an approval answered": {func(p *contract.Progress) { p.Approval = nil }, true},
		"another approval":     {func(p *contract.Progress) { p.Approval = &contract.Approval{ID: "b", Tool: "tap"} }, true},
	} {
		p := base
		tc.change(&p)
		if got := IsNews(base, p); got != tc.news {
			t.Errorf("%s: IsNews = %v, want %v", name, got, tc.news)
		}
	}
	if !IsNews(contract.Progress{Attempt: 1}, contract.Progress{Attempt: 1, Approval: &contract.Approval{ID: "a"}}) {
		t.Error("an approval asked is news")
	}
}

// A patch the API server refused is sent again with the next one due,
// unless newer progress replaced it.
func TestRefusedPatchIsSentAgain(t *testing.T) {
	p := newPatcher(func(context.Context, []byte) error { return nil }, 2*time.Second, 15*time.Second, nil)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	p.Report(contract.Progress{Attempt: 1, Turn: 1})
	pr, _ := p.next(now)
	p.sentAt(pr, now, errors.New("the API server is away"))
	if pr, at := p.next(now.Add(time.Second)); pr != nil || !at.Equal(now.Add(2*time.Second)) {
		t.Fatalf("after a refused first patch: sent %+v, due %v; want it again at %v", pr, at, now.Add(2*time.Second))
	}
	if pr, _ := p.next(now.Add(2 * time.Second)); pr == nil || pr.Turn != 1 {
		t.Fatalf("the refused patch was not sent again: %+v", pr)
	}
}

// timedReport is one Report of a simulated session, at its time since the start.
type timedReport struct {
	at time.Duration
	p  contract.Progress
}

// simulate plays reports through the patcher's own decisions on a
// simulated clock, every patch answered at once, and returns when each
// patch went and what it carried.
func simulate(p *Patcher, reports []timedReport) ([]time.Duration, []contract.Progress) {
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	now := start
	var at []time.Duration
	var sent []contract.Progress
	for i := 0; ; {
		p.mu.Lock()
		pr, due := p.next(now)
		if pr != nil {
			p.sentAt(pr, now, nil)
		}
		p.mu.Unlock()
		if pr != nil {
			at, sent = append(at, now.Sub(start)), append(sent, *pr)
			continue
		}
		switch {
		case i < len(reports) && (due.IsZero() || !start.Add(reports[i].at).After(due)):
			now = start.Add(reports[i].at)
			p.Report(reports[i].p)
			i++
		case !due.IsZero():
			now = due
		default:
			return at, sent
		}
	}
}

// session is ten minutes of a loop: a turn every 4 s, its tool result 1 s
// later, an approval asked at 3:00 and answered at 3:40 (the loop renews
// its heartbeat at 3:30 while it waits), a steer delivered at 6:02.
func session() []timedReport {
	var out []timedReport
	approval := &contract.Approval{ID: "a1", Tool: "tap"}
	steered := 0
	for turn := 1; turn*4 <= 600; turn++ {
		at := time.Duration(turn*4-4) * time.Second
		if at >= 180*time.Second && at < 220*time.Second {
			continue // held for the approval below
		}
		if at >= 362*time.Second {
			steered = 1
		}
		p := contract.Progress{Attempt: 1, Turn: turn, UpdatedAt: at.String(), Steered: steered}
		out = append(out, timedReport{at, p})
		p.LastTool, p.UpdatedAt = "tap", (at + time.Second).String()
		out = append(out, timedReport{at + time.Second, p})
	}
	out = append(out,
		timedReport{180 * time.Second, contract.Progress{Attempt: 1, Turn: 45, Approval: approval}},
		timedReport{210 * time.Second, contract.Progress{Attempt: 1, Turn: 45, Approval: approval, UpdatedAt: "3m30s"}},
		timedReport{220 * time.Second, contract.Progress{Attempt: 1, Turn: 45}})
	slices.SortStableFunc(out, func(a, b timedReport) int { return int(a.at - b.at) })
	return out
}

// A ten-minute session patches its run a few times a minute, not every
// 2 s; the news in it goes within ProgressInterval of its report, and no
// gap between two patches is longer than the heartbeat and the time to the
// session's next report.
func TestSessionPatchesOnItsHeartbeat(t *testing.T) {
	reports := session()
	old, _ := simulate(newPatcher(nil, contract.ProgressInterval, contract.ProgressInterval, nil), reports)
	at, sent := simulate(newPatcher(nil, contract.ProgressInterval, contract.DefaultProgressHeartbeat, nil), reports)
	t.Logf("ten minutes, a turn every 4 s: %d progress patches every %s, %d with news every %s and the rest every %s",
		len(old), contract.ProgressInterval, len(sent), contract.ProgressInterval, contract.DefaultProgressHeartbeat)
	if limit := 600/15 + 2*4; len(sent) > limit {
		t.Errorf("%d patches in ten minutes, want at most %d", len(sent), limit)
	}
	if len(old) < 3*len(sent) {
		t.Errorf("%d patches against %d every 2 s: the heartbeat saves too little", len(sent), len(old))
	}
	// when the first patch from the report on that pred says yes went
	newsAt := func(reported time.Duration, pred func(contract.Progress) bool) time.Duration {
		for i, p := range sent {
			if at[i] >= reported && pred(p) {
				return at[i]
			}
		}
		return -1
	}
	for name, c := range map[string]struct {
		reported time.Duration
		pred     func(contract.Progress) bool
	}{
		"the first progress":    {0, func(p contract.Progress) bool { return p.Turn == 1 }},
		"the approval request":  {180 * time.Second, func(p contract.Progress) bool { return p.Approval != nil }},
		"the approval answered": {220 * time.Second, func(p contract.Progress) bool { return p.Approval == nil }},
		"the steer delivered":   {362 * time.Second, func(p contract.Progress) bool { return p.Steered == 1 }},
	} {
		if got := newsAt(c.reported, c.pred); got < 0 {
			t.Errorf("%s, reported at %s, was never sent", name, c.reported)
		} else if got > c.reported+contract.ProgressInterval {
			t.Errorf("%s, reported at %s, went at %s", name, c.reported, got)
		}
	}
	// Nothing reported waits past its heartbeat: a report between two
	// patches went with the second, no later than the heartbeat after the first.
	for i, r := 1, 0; i < len(at); i++ {
		for ; r < len(reports) && reports[r].at < at[i]; r++ {
			if reports[r].at > at[i-1] && at[i] > max(reports[r].at, at[i-1]+contract.DefaultProgressHeartbeat) {
				t.Errorf("progress reported at %s waited from the patch at %s to %s", reports[r].at, at[i-1], at[i])
			}
		}
	}
	if last := sent[len(sent)-1]; last.Turn != 150 || last.LastTool != "tap" {
		t.Errorf("the last patch carries %+v, want turn 150's tool result", last)
	}
}

func TestProgressHeartbeatFor(t *testing.T) {
	for stall, want := range map[time.Duration]time.Duration{
		0: contract.DefaultProgressHeartbeat, 10 * time.Minute: contract.DefaultProgressHeartbeat,
		40 * time.Second: 10 * time.Second, 4 * time.Second: contract.ProgressInterval,
	} {
		if got := contract.ProgressHeartbeatFor(stall); got != want {
			t.Errorf("ProgressHeartbeatFor(%s) = %s, want %s", stall, got, want)
		}
	}
}

// On rignode a pod has no /var/run/secrets mount: its service-account
// credentials come as a kubeconfig named by KUBECONFIG, and progress reaches
// the run's status through it.
func TestNewInClusterUsesKubeconfig(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Authorization") + " " + string(b)
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
	p, err := NewInCluster("farm/timer", time.Second, nil)
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

	// The loop reads its run from the API server's watch cache.
	read, err := NewInClusterReader("farm/timer")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if req := <-got; !strings.HasPrefix(req, "GET /apis/farm.clawfarm.dev/v1alpha1/namespaces/farm/agentruns/timer?resourceVersion=0 Bearer pod-token") {
		t.Fatalf("read %q, want a GET of the run at resourceVersion 0", req)
	}

	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	if _, err := NewInCluster("farm/timer", time.Second, nil); err == nil || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Fatalf("a missing kubeconfig: %v", err)
	}
}
