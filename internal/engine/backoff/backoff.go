// Package backoff decides how long to wait before retrying a failed model
// call, by the error's class (docs/engine.md, "Reading the loop", ask): a
// rate limit waits with exponential backoff and jitter, honouring
// Retry-After; a timeout or overload retries at once.
package backoff

import (
	"math/rand/v2"
	"time"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// The policy's numbers (ours: docs/engine.md names the strategy, not the numbers).
const (
	Base          = time.Second
	Cap           = 60 * time.Second
	MaxRetryAfter = 5 * time.Minute
)

// Policy computes waits. The zero value uses the constants and math/rand.
type Policy struct {
	Base, Cap, MaxRetryAfter time.Duration
	// Rand returns a number in [0,1); nil uses math/rand.
	Rand func() float64
}

// Wait is the pause before retry number attempt (from 0) after err.
func (p Policy) Wait(err *provider.Error, attempt int) time.Duration {
	if err.Class != provider.ClassRateLimit {
		return 0 // timeout, overload: immediate retry
	}
	r := p.rand()
	if err.RetryAfter > 0 {
		d := min(err.RetryAfter, p.or(p.MaxRetryAfter, MaxRetryAfter))
		return d + time.Duration(r*0.1*float64(d)) // never earlier than the server asked
	}
	d := p.or(p.Base, Base) << min(attempt, 16)
	d = min(d, p.or(p.Cap, Cap))
	return d/2 + time.Duration(r*float64(d/2)) // "equal jitter": at least half the step
}

func (p Policy) rand() float64 {
	if p.Rand != nil {
		return p.Rand()
	}
	return rand.Float64()
}

func (Policy) or(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}
