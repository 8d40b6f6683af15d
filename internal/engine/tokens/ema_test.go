package tokens

import (
	"math"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/provider"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestEMANumbers(t *testing.T) {
	e := NewEMA()
	if e.Ratio() != 3.0 {
		t.Fatalf("start %v", e.Ratio())
	}
	steps := []struct{ obs, want float64 }{
		{4.0, 4.0},                     // mean of 1
		{9.0, 4.0},                     // outside 0.5–8: ignored
		{0.4, 4.0},                     // ignored
		{2.0, 3.0},                     // mean of 2
		{3.0, 3.0},                     // mean of 3
		{5.0, 0.85*3.0 + 0.15*5.0},     // EMA from here
		{2.0, 0.85*3.3 + 0.15*2.0},     // 3.105
		{8.0, 3.105},                   // 8 is outside (exclusive)
		{0.5, 3.105},                   // so is 0.5
		{7.99, 0.85*3.105 + 0.15*7.99}, // inside
	}
	for i, s := range steps {
		e.ObserveRatio(s.obs)
		if !near(e.Ratio(), s.want) {
			t.Fatalf("after observation %d (%v): ratio %v, want %v", i, s.obs, e.Ratio(), s.want)
		}
	}
}

func TestEMAObserveCountsImagesSeparately(t *testing.T) {
	e := NewEMA()
	req := &provider.Request{Messages: []provider.Message{
		{Role: provider.RoleUser, Text: strings.Repeat("x", 4000)},
		{Role: provider.RoleUser, Images: []*provider.Image{provider.NewImage("image/jpeg", []byte{1})}},
	}}
	// 4000 chars in 1000 text tokens plus one image: 4.0 chars/token.
	e.Observe(req, int64(1000+ImageTokens))
	if !near(e.Ratio(), 4.0) {
		t.Fatalf("ratio %v, want 4.0", e.Ratio())
	}
	if got := e.Estimate(req); got != 1000+ImageTokens {
		t.Errorf("estimate %d, want %d", got, 1000+ImageTokens)
	}
	// A report smaller than the images alone teaches nothing.
	e.Observe(req, 10)
	if !near(e.Ratio(), 4.0) {
		t.Errorf("ratio moved to %v", e.Ratio())
	}
}

func TestEMACalibrationRoundTrip(t *testing.T) {
	a := NewEMA()
	for _, obs := range []float64{2, 4, 3, 5, 100 /* ignored */, 6} {
		a.ObserveRatio(obs)
	}
	saved := a.Calibration()
	if saved.Observations != 5 || !near(saved.WarmupSum, 9) {
		t.Fatalf("calibration %+v", saved)
	}
	b := NewEMA()
	b.Restore(saved)
	if b.Calibration() != saved {
		t.Fatalf("restored %+v, saved %+v", b.Calibration(), saved)
	}
	// Both go on identically from there.
	a.ObserveRatio(4.5)
	b.ObserveRatio(4.5)
	if !near(a.Ratio(), b.Ratio()) {
		t.Fatalf("after one more observation: %v vs %v", a.Ratio(), b.Ratio())
	}
	// A restored warm-up finishes its mean: 2 observations saved, the third averages all three.
	c := NewEMA()
	c.Restore(Calibration{CharsPerToken: 3, Observations: 2, WarmupSum: 6})
	c.ObserveRatio(6)
	if !near(c.Ratio(), 4) {
		t.Fatalf("warm-up mean after restore %v, want 4", c.Ratio())
	}
	// A corrupt calibration is ignored.
	d := NewEMA()
	d.Restore(Calibration{CharsPerToken: 0, Observations: 7})
	d.Restore(Calibration{CharsPerToken: 50, Observations: 7})
	if d.Calibration() != (Calibration{CharsPerToken: StartCharsPerToken}) {
		t.Fatalf("corrupt calibrations were taken: %+v", d.Calibration())
	}
}
