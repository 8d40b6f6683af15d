package breaker

import (
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	var b Breaker
	for i := 1; i < Threshold; i++ {
		if b.Failure(now) {
			t.Fatalf("opened after %d failures", i)
		}
	}
	if !b.Failure(now) || b.OpenUntil(now) != now.Add(Cooldown) || b.Trips() != 1 {
		t.Fatal("did not open at the threshold for the cool-down")
	}
	if !b.OpenUntil(now.Add(Cooldown)).IsZero() {
		t.Error("still open after the cool-down")
	}
	b.Success()
	if b.Trips() != 0 || !b.OpenUntil(now).IsZero() {
		t.Error("success did not close it")
	}
}
