package trace

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine/events"
)

// A call a ToolPolicy held carries its request and answer: who decided what,
// why and after how long, as the run page shows it.
func TestHeldCallsCarryTheirApproval(t *testing.T) {
	var b bytes.Buffer
	em := events.NewEmitter(&b, nil, func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) })
	for _, call := range []struct {
		id, approval string
		approved     bool
		by, reason   string
	}{{"c1", "a1-t2-1", true, "alice", ""}, {"c2", "a1-t3-2", false, "bob", "wrong card"}} {
		em.Emit(events.ToolStart(2, "tap", call.id, []byte(`{"bbox":[0.4,0.81,0.6,0.85]}`)))
		em.Emit(events.ApprovalRequested(2, call.approval, "tap", call.id, nil, "shop", "pay", "money leaves the farm"))
		em.Emit(events.ApprovalAnswered(2, call.approval, "tap", call.id, call.by, call.approved, call.reason, 90*time.Second))
		em.Emit(events.ToolResult(2, "tap", call.id, "done", !call.approved, 0, !call.approved))
	}
	a, err := ReadAttempt(1, &b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Unreadable != 0 || len(a.Turns) != 1 || len(a.Turns[0].Calls) != 2 {
		t.Fatalf("read %+v", a)
	}
	approved, denied := a.Turns[0].Calls[0].Approval, a.Turns[0].Calls[1].Approval
	if approved == nil || approved.Summary() != "approved by alice after 1m30s (ToolPolicy shop, rule pay)" {
		t.Errorf("approved: %+v", approved)
	}
	if denied == nil || denied.Summary() != "denied by bob after 1m30s (ToolPolicy shop, rule pay): wrong card" || denied.Message != "money leaves the farm" {
		t.Errorf("denied: %+v", denied)
	}
	if !strings.Contains((&Approval{Policy: "p", Rule: "r"}).Summary(), "waiting for approval") {
		t.Error("an unanswered request")
	}
}
