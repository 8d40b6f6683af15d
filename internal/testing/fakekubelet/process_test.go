package fakekubelet

import (
	"testing"
	"time"
)

// A process whose script hung and then lets it end ends when the kubelet
// sees the change, not back when it last saw it hanging: the ledger must
// not shorten a session that really ran until its gate opened.
func TestHungProcessEndsWhenTheChangeIsSeen(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &process{start: t0, clock: t0, checked: t0}
	p.settle(Ending{Hang: true}, t0.Add(time.Second))
	if !p.live() {
		t.Fatalf("a hanging process ended at %v", p.end)
	}
	p.settle(Ending{ExitCode: 0}, t0.Add(3*time.Second))
	if want := t0.Add(3 * time.Second); !p.end.Equal(want) {
		t.Fatalf("ended at +%v, want +%v (when the script's change was seen)", p.end.Sub(t0), want.Sub(t0))
	}

	// A script that did not hang keeps its own clock: After counts from the
	// start, whenever the kubelet looks.
	q := &process{start: t0, clock: t0, checked: t0}
	q.settle(Ending{After: 500 * time.Millisecond}, t0.Add(100*time.Millisecond))
	q.settle(Ending{After: 500 * time.Millisecond}, t0.Add(2*time.Second))
	if want := t0.Add(500 * time.Millisecond); !q.end.Equal(want) {
		t.Fatalf("ended at +%v, want +%v", q.end.Sub(t0), want.Sub(t0))
	}
}
