// Package breaker is the circuit breaker over model calls (docs/engine.md,
// "Reading the loop", ask): after Threshold consecutive failures it opens
// for Cooldown, so a failing provider is not hammered with retries.
package breaker

import "time"

// The breaker's numbers (docs/engine.md, "Reading the loop": five consecutive failures open it for 60 s).
const (
	Threshold = 5
	Cooldown  = 60 * time.Second
)

// Breaker counts consecutive failures. The zero value uses the package's
// Threshold and Cooldown.
type Breaker struct {
	Threshold int
	Cooldown  time.Duration
	failures  int
	openUntil time.Time
	trips     int
}

// Success closes the breaker and forgets past failures and trips.
func (b *Breaker) Success() {
	b.failures = 0
	b.trips = 0
	b.openUntil = time.Time{}
}

// Failure records a failure at now and reports whether it opened the breaker.
func (b *Breaker) Failure(now time.Time) bool {
	b.failures++
	if b.failures < b.threshold() {
		return false
	}
	b.failures = 0
	b.trips++
	b.openUntil = now.Add(b.cooldown())
	return true
}

// OpenUntil is when an open breaker lets the next trial through (zero when closed).
func (b *Breaker) OpenUntil(now time.Time) time.Time {
	if now.Before(b.openUntil) {
		return b.openUntil
	}
	return time.Time{}
}

// Trips is how often the breaker opened since the last success.
func (b *Breaker) Trips() int { return b.trips }

func (b *Breaker) threshold() int {
	if b.Threshold > 0 {
		return b.Threshold
	}
	return Threshold
}

func (b *Breaker) cooldown() time.Duration {
	if b.Cooldown > 0 {
		return b.Cooldown
	}
	return Cooldown
}
