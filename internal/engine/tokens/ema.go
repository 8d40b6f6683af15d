package tokens

import (
	"sync"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// The calibration's numbers (docs/engine.md, "Token accounting").
const (
	// WarmupObservations are averaged plainly before the EMA takes over.
	WarmupObservations = 3
	// Alpha is the EMA's weight of a new observation.
	Alpha = 0.15
	// MinObserved and MaxObserved bound a believable chars/token observation
	// (exclusive); anything outside is ignored.
	MinObserved = 0.5
	MaxObserved = 8.0
)

// EMA is the calibrated estimator: it starts at StartCharsPerToken, takes the
// mean of the first WarmupObservations observations, then follows an EMA with
// Alpha. An observation is the request's text characters over the prompt
// tokens the provider reported, less the images' share (ImageTokens each:
// images are counted separately, never by characters).
type EMA struct {
	mu    sync.Mutex
	ratio float64
	n     int
	sum   float64
}

// Calibration is what an EMA has learned, kept in the session snapshot so a
// resumed attempt goes on from it instead of starting over at
// StartCharsPerToken.
type Calibration struct {
	// CharsPerToken is the current ratio.
	CharsPerToken float64 `json:"charsPerToken"`
	// Observations is how many believable observations it has seen.
	Observations int `json:"observations"`
	// WarmupSum is the sum of the warm-up observations (the first
	// WarmupObservations), which the warm-up mean needs.
	WarmupSum float64 `json:"warmupSum,omitempty"`
}

// Calibrated is an estimator whose calibration can be saved and restored.
type Calibrated interface {
	Calibration() Calibration
	Restore(Calibration)
}

// Calibration returns what the EMA has learned.
func (e *EMA) Calibration() Calibration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Calibration{CharsPerToken: e.ratio, Observations: e.n, WarmupSum: e.sum}
}

// Restore continues from a saved calibration. One outside the believable
// range (a corrupt snapshot) is ignored: the EMA starts over.
func (e *EMA) Restore(c Calibration) {
	if !(c.CharsPerToken > MinObserved && c.CharsPerToken < MaxObserved) || c.Observations < 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ratio, e.n, e.sum = c.CharsPerToken, c.Observations, c.WarmupSum
}

// NewEMA starts at StartCharsPerToken.
func NewEMA() *EMA { return &EMA{ratio: StartCharsPerToken} }

// Ratio is the current characters per token.
func (e *EMA) Ratio() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ratio == 0 {
		return StartCharsPerToken
	}
	return e.ratio
}

// Estimate counts the request's text over the calibrated ratio, plus its images.
func (e *EMA) Estimate(req *provider.Request) int {
	chars, images := Count(req)
	return int(float64(chars)/e.Ratio()) + images*ImageTokens
}

// Observe learns from the prompt tokens the provider reported for req.
func (e *EMA) Observe(req *provider.Request, promptTokens int64) {
	chars, images := Count(req)
	text := float64(promptTokens) - float64(images*ImageTokens)
	if text <= 0 {
		return
	}
	e.ObserveRatio(float64(chars) / text)
}

// ObserveRatio feeds one chars/token observation.
func (e *EMA) ObserveRatio(obs float64) {
	if !(obs > MinObserved && obs < MaxObserved) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.n <= WarmupObservations {
		e.sum += obs
		e.ratio = e.sum / float64(e.n)
		return
	}
	e.ratio = (1-Alpha)*e.ratio + Alpha*obs
}
