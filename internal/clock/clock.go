// Package clock is the one context-aware sleep: the engine's wall clock, the
// rig client's retries and the simulators all wait through it, so a
// cancelled context ends every wait the same way.
package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx.Err() when the context ended it. A d of zero or less does not wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
