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

// An event line over MaxLine costs that line only: the turns before and
// after it read as usual, and the page says one line was unreadable.
func TestOversizeLineIsUnreadableAndTheRestReads(t *testing.T) {
	var b bytes.Buffer
	em := events.NewEmitter(&b, nil, func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) })
	em.Emit(events.ToolStart(1, "peek", "c1", []byte(`{}`)))
	b.WriteString(`{"type":"text_delta","turn":1,"text":"` + strings.Repeat("x", MaxLine+10) + "\"}\n")
	em.Emit(events.ToolStart(2, "tap", "c2", []byte(`{"bbox":[0.1,0.1,0.2,0.2]}`)))
	b.WriteString(strings.Repeat("y", 3*MaxLine)) // a last line, oversize, with no newline
	a, err := ReadAttempt(1, &b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Unreadable != 2 || len(a.Turns) != 2 || a.Turns[1].Calls[0].Tool != "tap" {
		t.Fatalf("unreadable %d, %d turns (%+v); want 2 unreadable and turns 1 and 2", a.Unreadable, len(a.Turns), a.Turns)
	}

	// A line of exactly MaxLine bytes is still read.
	b.Reset()
	pad := MaxLine - len(`{"type":"text_delta","turn":1,"text":""}`)
	b.WriteString(`{"type":"text_delta","turn":1,"text":"` + strings.Repeat("z", pad) + "\"}\n")
	if a, err = ReadAttempt(1, &b, nil); err != nil || a.Unreadable != 0 || len(a.Turns) != 1 || len(a.Turns[0].Text) != pad {
		t.Fatalf("a line of MaxLine bytes: %v, unreadable %d, %d turns", err, a.Unreadable, len(a.Turns))
	}
}
