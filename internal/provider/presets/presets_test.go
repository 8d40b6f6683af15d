package presets

import (
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/provider"
)

func TestPresets(t *testing.T) {
	for _, name := range []string{"openai", "anthropic", "qwen", "moonshot", "deepseek", "google"} {
		p, err := New(name, "", provider.Options{APIKey: "k", Model: "m"}, 0)
		if err != nil || p.Name() != name || p.Model() != "m" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New("OpenAI-Compatible", "", provider.Options{Model: "llama", BaseURL: "http://ollama:11434/v1"}, 0); err != nil {
		t.Errorf("a compatible server without a key: %v", err)
	}
	for _, c := range []struct {
		name string
		o    provider.Options
		want string
	}{
		{"openai-compatible", provider.Options{Model: "m"}, "needs a base URL"},
		{"openai", provider.Options{Model: "m"}, "needs an API key"},
		{"nope", provider.Options{Model: "m"}, "unknown model provider"},
		{"openai", provider.Options{Model: "m", APIKey: "k", BaseURL: "ftp://x"}, "not an http(s) URL"},
	} {
		if _, err := New(c.name, "", c.o, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want %q", c.name, c.o, err, c.want)
		}
	}
	if _, err := New("anthropic", "", provider.Options{APIKey: "k", Model: "claude"}, 4096); err != nil {
		t.Errorf("a thinking budget on anthropic: %v", err)
	}
	if _, err := New("qwen", "", provider.Options{APIKey: "k", Model: "m"}, 4096); err == nil || !strings.Contains(err.Error(), "takes no thinking budget") {
		t.Errorf("a thinking budget on qwen: %v, want a refusal", err)
	}
}

// Each preset's wire: the openai preset defaults to the stateless
// Responses API, the other OpenAI-style presets to Chat Completions, and a
// run may choose (the chained Responses wire only when asked for by name);
// anthropic speaks its Messages API only.
func TestAPIFor(t *testing.T) {
	for _, c := range []struct {
		preset, api, want, err string
	}{
		{"openai", "", "responses", ""},
		{"openai", "chat", "chat", ""},
		{"openai", "responses-chained", "responses-chained", ""},
		{"anthropic", "responses-chained", "", "Messages API only"},
		{"qwen", "", "chat", ""},
		{"openai-compatible", "", "chat", ""},
		{"openai-compatible", "Responses", "responses", ""},
		{"anthropic", "", "", ""},
		{"anthropic", "responses", "", "Messages API only"},
		{"openai", "completions", "", "unknown model API"},
	} {
		p, err := Lookup(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.APIFor(c.api)
		if got != c.want || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s with api %q: %q, %v; want %q, error %q", c.preset, c.api, got, err, c.want, c.err)
		}
	}
}
