package backoff

import (
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/provider"
)

func TestWait(t *testing.T) {
	p := Policy{Rand: func() float64 { return 0.5 }}
	rl := &provider.Error{Class: provider.ClassRateLimit}
	var last time.Duration
	for a := 0; a < 8; a++ {
		d := p.Wait(rl, a)
		if d < last || d > Cap {
			t.Errorf("attempt %d: %s after %s", a, d, last)
		}
		last = d
	}
	if d := p.Wait(&provider.Error{Class: provider.ClassRateLimit, RetryAfter: 9 * time.Second}, 0); d < 9*time.Second || d > 10*time.Second {
		t.Errorf("Retry-After 9s → %s", d)
	}
	for _, c := range []provider.ErrorClass{provider.ClassTimeout, provider.ClassOverloaded} {
		if d := p.Wait(&provider.Error{Class: c}, 3); d != 0 {
			t.Errorf("%s waits %s, want an immediate retry", c, d)
		}
	}
	// Jitter spreads the waits.
	lo, hi := Policy{Rand: func() float64 { return 0 }}.Wait(rl, 3), Policy{Rand: func() float64 { return 0.999 }}.Wait(rl, 3)
	if lo >= hi || lo < 4*time.Second || hi > 8*time.Second {
		t.Errorf("jitter range %s..%s", lo, hi)
	}
}
