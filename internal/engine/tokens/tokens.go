// Package tokens estimates a request's size in tokens before it is sent, and
// refuses one that would not fit (docs/engine.md, "Token accounting").
// Fixed is a fixed characters-per-token ratio (the engine's default); the
// calibrated estimator (EMA, the production one) plugs in behind the same
// Estimator interface.
package tokens

import (
	"fmt"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// The numbers.
const (
	// StartCharsPerToken is the conservative starting ratio (docs/engine.md, "Token accounting": 3.0 chars/token).
	StartCharsPerToken = 3.0
	// PreflightShare is the largest share of the input budget a prompt may take (docs/engine.md, "Token accounting": 60%).
	PreflightShare = 0.60
	// ImageTokens is what one image is counted as (ours: a ~1566 px JPEG costs about this much).
	ImageTokens = 1600
	// FoldReserve is kept free beside the reply bound for a fold: the fold
	// message grows the head before the turns it replaces are gone (ours:
	// about 200 summary lines; docs/engine.md, "The system prompt").
	FoldReserve = 2048
)

// Estimator guesses a request's prompt tokens and learns from what the
// provider reports.
type Estimator interface {
	Estimate(req *provider.Request) int
	Observe(req *provider.Request, promptTokens int64)
}

// Fixed is the plain chars/ratio estimator.
type Fixed struct {
	CharsPerToken float64
}

// Estimate counts characters of every text the request carries, over the ratio, plus images.
func (f Fixed) Estimate(req *provider.Request) int {
	ratio := f.CharsPerToken
	if ratio <= 0 {
		ratio = StartCharsPerToken
	}
	chars, images := Count(req)
	return int(float64(chars)/ratio) + images*ImageTokens
}

// Observe does nothing: the ratio is fixed.
func (Fixed) Observe(*provider.Request, int64) {}

// Count returns the characters of text and the number of images in a request.
func Count(req *provider.Request) (chars, images int) {
	chars = len(req.System)
	for _, t := range req.Tools {
		chars += len(t.Name) + len(t.Description) + len(t.Schema)
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		chars += len(m.Text) + len(m.Reasoning)
		for _, c := range m.ToolCalls {
			chars += len(c.Name) + len(c.Arguments)
		}
		images += len(m.Images)
	}
	return chars, images
}

// ErrTooLarge is preflight's refusal.
type ErrTooLarge struct {
	Estimate, Limit, Budget, Reserve int
}

func (e *ErrTooLarge) Error() string {
	if e.Reserve > 0 && e.Limit == e.Budget-e.Reserve {
		return fmt.Sprintf("prompt of ~%d tokens leaves less than the %d tokens reserved for the reply and a fold in the %d-token context window (limit %d)",
			e.Estimate, e.Reserve, e.Budget, e.Limit)
	}
	return fmt.Sprintf("prompt of ~%d tokens is over %.0f%% of the %d-token input budget (%d)", e.Estimate, PreflightShare*100, e.Budget, e.Limit)
}

// Preflight refuses an estimate over PreflightShare of budget, or one that
// leaves less than reserve tokens of it free (budget ≤ 0: no limit). The
// reserve is the reply bound plus FoldReserve: on a small context window
// (a local model's 8k) it is what binds.
func Preflight(estimate, budget, reserve int) error {
	if budget <= 0 {
		return nil
	}
	limit := int(float64(budget) * PreflightShare)
	if reserve > 0 && budget-reserve < limit {
		limit = max(budget-reserve, 0)
	}
	if estimate > limit {
		return &ErrTooLarge{Estimate: estimate, Limit: limit, Budget: budget, Reserve: reserve}
	}
	return nil
}
