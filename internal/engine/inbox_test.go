package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
)

// scriptedInbox hands out its messages at the turn boundaries listed: at[i]
// is the Take call (from 0) that delivers msgs[i].
type scriptedInbox struct {
	mu    sync.Mutex
	calls int
	at    []int
	msgs  []engine.InboxMessage
}

func (b *scriptedInbox) Take(context.Context) []engine.InboxMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []engine.InboxMessage
	for i, n := range b.at {
		if n == b.calls {
			out = append(out, b.msgs[i])
		}
	}
	b.calls++
	return out
}

type progressSeen struct {
	mu  sync.Mutex
	all []contract.Progress
}

func (p *progressSeen) Report(pr contract.Progress) {
	p.mu.Lock()
	p.all = append(p.all, pr)
	p.mu.Unlock()
}

// A message put in the inbox while the model works on turn 1 is in the very
// next request, as a user message after turn 1's results that names its run;
// it is traced and counted in progress.
func TestInboxMessageReachesTheNextRequest(t *testing.T) {
	h := newHarness(t, turn("peek", `{}`), turn("tap", `{"bbox":[0.1,0.2,0.3,0.4]}`), end("DONE"))
	inbox := &scriptedInbox{at: []int{1}, msgs: []engine.InboxMessage{{From: "steer-1", Text: "also turn on Wi-Fi"}}}
	prog := &progressSeen{}
	h.cfg.Inbox, h.cfg.Progress = inbox, prog
	h.cfg.State = &engine.State{Steered: 2} // two steer messages came in the opening message
	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)

	if b := string(h.model.Body(0)); strings.Contains(b, "also turn on Wi-Fi") {
		t.Fatalf("the first request carries a message delivered after it")
	}
	second := string(h.model.Body(1))
	if !strings.Contains(second, "New instruction from run steer-1") || !strings.Contains(second, "also turn on Wi-Fi") {
		t.Fatalf("the second request lacks the inbox message: %s", second)
	}
	tr := h.sess.Transcript()
	checkPairing(t, tr)
	found := -1
	for i, msg := range tr {
		if strings.Contains(msg.Text, "also turn on Wi-Fi") {
			found = i
		}
	}
	if found < 2 || tr[found].Role != "user" || tr[found-1].Role != "tool" && len(tr[found-1].Images) == 0 {
		t.Fatalf("the inbox message is not a user message after turn 1's results: %+v", tr)
	}
	ev := h.events("inbox")
	if len(ev) != 1 || ev[0].Run != "steer-1" || ev[0].Turn != 1 || !strings.Contains(ev[0].Text, "also turn on Wi-Fi") {
		t.Fatalf("inbox events %+v", ev)
	}
	prog.mu.Lock()
	last := prog.all[len(prog.all)-1]
	prog.mu.Unlock()
	if last.Steered != 3 {
		t.Fatalf("progress reports %d steer messages, want 3 (two in the opening message, one delivered)", last.Steered)
	}
	if inbox.calls != 3 {
		t.Fatalf("the inbox was read %d times, want once per turn (3)", inbox.calls)
	}
}
