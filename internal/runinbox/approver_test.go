package runinbox

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
)

// annotatedRun serves the run's JSON with the annotations set so far;
// answerAt is the read (from 1) from which answer applies.
type annotatedRun struct {
	mu       sync.Mutex
	reads    int
	answerAt int
	answer   map[string]string
	fail     bool
}

func (r *annotatedRun) read(context.Context) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if r.fail && r.reads == 1 {
		return nil, errors.New("the API server is restarting")
	}
	ann := map[string]string{}
	if r.answerAt > 0 && r.reads >= r.answerAt {
		ann = r.answer
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
}

// instantClock makes the approver's waits take no time.
type instantClock struct{ now time.Time }

func (c *instantClock) Now() time.Time { return c.now }
func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// The approver reads the run every contract.ApprovalPoll until an answer to
// its request comes, in any case, with who and why; a failed read, an
// answer to an earlier request and a malformed one are no answer; a minute's
// wait renews the heartbeat; the attempt's allowance bounds all its waits.
func TestApprover(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	req := func(id string, timeout time.Duration) engine.ApprovalRequest {
		return engine.ApprovalRequest{ID: id, Tool: "tap", Deadline: start.Add(timeout)}
	}
	for _, c := range []struct {
		name  string
		run   *annotatedRun
		want  engine.ApprovalAnswer
		waits time.Duration
	}{
		{"approved on the third read", &annotatedRun{answerAt: 3, answer: map[string]string{
			contract.AnnotationApproval: "Approve/a1-t2-1", contract.AnnotationApprovedBy: "alice"}}, engine.ApprovalAnswer{Approved: true, By: "alice"}, 2 * contract.ApprovalPoll},
		{"denied with a reason, after a failed read", &annotatedRun{fail: true, answerAt: 2, answer: map[string]string{
			contract.AnnotationApproval: "deny/a1-t2-1", contract.AnnotationApprovedBy: "bob", contract.AnnotationApprovalReason: "wrong card"}}, engine.ApprovalAnswer{By: "bob", Reason: "wrong card"}, contract.ApprovalPoll},
		{"an answer to an earlier request is no answer", &annotatedRun{answerAt: 1, answer: map[string]string{
			contract.AnnotationApproval: "Approve/a1-t1-1", contract.AnnotationApprovedBy: "alice"}}, engine.ApprovalAnswer{TimedOut: true}, time.Minute},
		{"a malformed answer is no answer", &annotatedRun{answerAt: 1, answer: map[string]string{
			contract.AnnotationApproval: "Sure/a1-t2-1"}}, engine.ApprovalAnswer{TimedOut: true}, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &instantClock{now: start}
			beats := 0
			a := NewApprover(c.run.read, clk, time.Hour, t.Logf)
			r := req("a1-t2-1", time.Minute)
			r.Heartbeat = func() { beats++ }
			got := a.Await(context.Background(), r)
			if got != c.want {
				t.Errorf("answer %+v, want %+v", got, c.want)
			}
			if waited := clk.now.Sub(start); waited != c.waits {
				t.Errorf("waited %s, want %s", waited, c.waits)
			}
			if c.waits == time.Minute && beats != 1 {
				t.Errorf("%d heartbeats in a minute's wait, want 1 (every %s)", beats, contract.ApprovalHeartbeat)
			}
		})
	}

	// The attempt's allowance bounds all its waits together.
	clk := &instantClock{now: start}
	a := NewApprover((&annotatedRun{}).read, clk, 90*time.Second, t.Logf)
	if got := a.Await(context.Background(), req("x1", time.Minute)); !got.TimedOut {
		t.Fatalf("first wait: %+v", got)
	}
	if got := a.Await(context.Background(), engine.ApprovalRequest{ID: "x2", Deadline: clk.now.Add(time.Minute)}); !got.TimedOut || clk.now.Sub(start) != 90*time.Second {
		t.Fatalf("second wait: %+v after %s, want a timeout at the allowance (90s)", got, clk.now.Sub(start))
	}
	if got := a.Await(context.Background(), engine.ApprovalRequest{ID: "x3", Deadline: clk.now.Add(time.Minute)}); got.TimedOut || got.Reason == "" || clk.now.Sub(start) != 90*time.Second {
		t.Fatalf("third: %+v, want an immediate deny that says the time is spent", got)
	}
}
