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
	if Preflight(600, 1000, 0) != nil || Preflight(601, 1000, 0) == nil || Preflight(1e9, 0, 0) != nil {
		t.Error("preflight refuses above 60% only")
	}
}

// The reserve for the reply and a fold binds on a small context window and
// not on a large one, and the refusal says which limit it met.
func TestPreflightReserve(t *testing.T) {
	// 8k window, 4k reply bound: 8192-4096-2048 = 2048 tokens, under 60% (4915).
	reserve := 4096 + FoldReserve
	if Preflight(2048, 8192, reserve) != nil {
		t.Error("a prompt that fits beside the reserve was refused")
	}
	err := Preflight(2049, 8192, reserve)
	if err == nil || !strings.Contains(err.Error(), "reserved for the reply and a fold") {
		t.Errorf("over the reserve: %v", err)
	}
	// 128k window: 60% (76800) binds, the reserve does not.
	if Preflight(76800, 128000, reserve) != nil || Preflight(76801, 128000, reserve) == nil {
		t.Error("on a large window the 60% share should bind")
	}
	if err := Preflight(76801, 128000, reserve); !strings.Contains(err.Error(), "60%") {
		t.Errorf("refusal %v does not name the 60%% share", err)
	}
}
