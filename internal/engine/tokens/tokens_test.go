package tokens

import (
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/provider"
)

func TestEstimateAndPreflight(t *testing.T) {
	req := &provider.Request{System: strings.Repeat("a", 300), Messages: []provider.Message{
		{Role: provider.RoleUser, Text: strings.Repeat("b", 300), Images: []*provider.Image{provider.NewImage("image/jpeg", nil)}},
	}}
	if got := (Fixed{}).Estimate(req); got != 200+ImageTokens {
		t.Errorf("estimate %d", got)
	}
	if Preflight(600, 1000) != nil || Preflight(601, 1000) == nil || Preflight(1e9, 0) != nil {
		t.Error("preflight refuses above 60% only")
	}
}
