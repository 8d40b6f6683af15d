package pricing

import (
	"strings"
	"testing"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func TestCost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		price farmv1.ModelPricing
		usage farmv1.TokenUsage
		want  string
	}{
		// (1000-400-100)·3 + 400·0.3 + 100·3.75 + 200·15 = 1500+120+375+3000 = 4995 per million
		{"every kind", farmv1.ModelPricing{Input: "3", CachedInput: "0.3", CacheWrite: "3.75", Output: "15"},
			farmv1.TokenUsage{PromptTokens: 1000, CachedTokens: 400, CacheWriteTokens: 100, CompletionTokens: 200}, "0.004995"},
		// cached input and cache writes at the input price when unset
		{"defaults", farmv1.ModelPricing{Input: "2", Output: "8"},
			farmv1.TokenUsage{PromptTokens: 1_000_000, CachedTokens: 500_000, CacheWriteTokens: 100_000, CompletionTokens: 250_000}, "4"},
		// 1 token at 0.000001 per million: rounds to 0 at six places
		{"rounds", farmv1.ModelPricing{Input: "0.000001", Output: "0"}, farmv1.TokenUsage{PromptTokens: 1}, "0"},
		// 0.15·333 / 1e6 = 0.00004995 → 0.00005 (half away from zero)
		{"half up", farmv1.ModelPricing{Input: "0.15", Output: "0.6"}, farmv1.TokenUsage{PromptTokens: 333}, "0.00005"},
		// no float anywhere: 0.1 + 0.2 is 0.3
		{"exact", farmv1.ModelPricing{Input: "0.1", Output: "0.2"},
			farmv1.TokenUsage{PromptTokens: 1_000_000, CompletionTokens: 1_000_000}, "0.3"},
		{"big", farmv1.ModelPricing{Input: "999999.999999", Output: "1"},
			farmv1.TokenUsage{PromptTokens: 100_000_000_000}, "99999999999.9"},
	} {
		p, err := FromSpec(&tc.price)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := Format(p.Cost(tc.usage)); got != tc.want {
			t.Errorf("%s: cost %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestSum(t *testing.T) {
	if got, err := Sum("0.1", "0.2"); err != nil || got != "0.3" {
		t.Errorf("Sum = %q, %v", got, err)
	}
	if got, err := Sum("", "1.5"); err != nil || got != "1.5" {
		t.Errorf("Sum = %q, %v", got, err)
	}
	if _, err := Sum("1/3", ""); err == nil {
		t.Error("a fraction was summed")
	}
}

func TestParseList(t *testing.T) {
	l, err := ParseList([]byte(`
gpt-4.1: {input: "2", cachedInput: "0.5", output: "8"}
anthropic/claude-sonnet-4-5: {input: 3, cachedInput: 0.30, cacheWrite: 3.75, output: 15}
tiny: {input: 0.000001, output: 0.000002}
broken: {input: "two", output: "8"}
typo: {inptu: "1", output: "8"}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, ok, err := l.Lookup("anthropic/claude-sonnet-4-5")
	if !ok || err != nil || p.CachedInput.RatString() != "3/10" || p.CacheWrite.RatString() != "15/4" {
		t.Fatalf("claude: %+v %v %v", p, ok, err)
	}
	if p, _, err := l.Lookup("gpt-4.1"); err != nil || p.CacheWrite.RatString() != "2" {
		t.Fatalf("gpt-4.1: cache write %v (want the input price), %v", p.CacheWrite, err)
	}
	if p, _, err := l.Lookup("tiny"); err != nil || p.Input.RatString() != "1/1000000" {
		t.Fatalf("tiny: %v %v", p.Input, err)
	}
	if _, ok, err := l.Lookup("broken"); !ok || err == nil || !strings.Contains(err.Error(), `input "two"`) || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("broken: %v", err)
	}
	if _, _, err := l.Lookup("typo"); err == nil || !strings.Contains(err.Error(), `unknown field "inptu"`) || !strings.Contains(err.Error(), "input is missing") {
		t.Errorf("typo: %v", err)
	}
	if _, ok, _ := l.Lookup("unlisted"); ok {
		t.Error("an unlisted model has a price")
	}
	if _, err := ParseList([]byte("- not a map")); err == nil {
		t.Error("a list parsed as a price list")
	}
}
