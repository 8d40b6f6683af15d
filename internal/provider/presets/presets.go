// Package presets names the model providers a run can choose and builds the
// adapter for each: which wire format it speaks and where it lives.
package presets

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/anthropic"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
)

// Wire is the API a preset speaks.
type Wire string

// The wire formats.
const (
	ChatCompletions Wire = "chat-completions"
	Messages        Wire = "messages"
)

// Preset is one named provider.
type Preset struct {
	Name    string
	Wire    Wire
	BaseURL string // empty: the run must give one
	// NeedsKey is false for servers that usually run without a key (vLLM, Ollama).
	NeedsKey bool
	// MaxCompletionTokensField: see openai.Config.
	MaxCompletionTokensField bool
	// IdleTimeout is the preset's model idle timeout when the run sets none
	// (0: provider.DefaultIdleTimeout).
	IdleTimeout time.Duration
	// API is the default wire of a Chat Completions preset: openai.APIChat,
	// or openai.APIResponses (stateless) where the provider serves its
	// newest models and features there first (OpenAI).
	API string
	// FoldAt and FoldKeep are the preset's fold cadence in turns (0: the
	// engine's default, 30/10), chosen for its prompt cache.
	FoldAt, FoldKeep int
}

// LocalIdleTimeout is the idle timeout of self-hosted servers (ours: Ollama
// and vLLM may load a model before the first token, so a slow local
// provider gets a longer idle window than provider.DefaultIdleTimeout).
const LocalIdleTimeout = 300 * time.Second

// OpenAICompatible is the preset for any OpenAI-compatible base URL.
const OpenAICompatible = "openai-compatible"

// The fold cadences, measured by BenchmarkPromptCache300
// (docs/benchmarks.md, "Prompt caching"): on the Messages wire 50/10 is
// the one that serves at least 80% of the input from the cache with the
// request at turn 300 within 1.3× of turn 40; on the OpenAI-style wires
// 40/10 costs least at the cached prices of today's models (a tenth to a
// quarter of the input price) within the same bound. The cost differs by
// a few percent between cadences; the breakpoints and a stable prefix are
// what the cache pays for.
const (
	messagesFoldAt, messagesFoldKeep = 50, 10
	chatFoldAt, chatFoldKeep         = 40, 10
)

var all = map[string]Preset{
	"openai":         {Name: "openai", Wire: ChatCompletions, BaseURL: "https://api.openai.com/v1", NeedsKey: true, MaxCompletionTokensField: true, API: openai.APIResponses, FoldAt: chatFoldAt, FoldKeep: chatFoldKeep},
	"anthropic":      {Name: "anthropic", Wire: Messages, BaseURL: anthropic.DefaultBaseURL, NeedsKey: true, FoldAt: messagesFoldAt, FoldKeep: messagesFoldKeep},
	"qwen":           {Name: "qwen", Wire: ChatCompletions, BaseURL: "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", NeedsKey: true, FoldAt: chatFoldAt, FoldKeep: chatFoldKeep},
	"moonshot":       {Name: "moonshot", Wire: ChatCompletions, BaseURL: "https://api.moonshot.ai/v1", NeedsKey: true, FoldAt: chatFoldAt, FoldKeep: chatFoldKeep},
	"deepseek":       {Name: "deepseek", Wire: ChatCompletions, BaseURL: "https://api.deepseek.com/v1", NeedsKey: true, FoldAt: chatFoldAt, FoldKeep: chatFoldKeep},
	"google":         {Name: "google", Wire: ChatCompletions, BaseURL: "https://generativelanguage.googleapis.com/v1beta/openai", NeedsKey: true, FoldAt: chatFoldAt, FoldKeep: chatFoldKeep},
	OpenAICompatible: {Name: OpenAICompatible, Wire: ChatCompletions, IdleTimeout: LocalIdleTimeout, FoldAt: chatFoldAt, FoldKeep: chatFoldKeep},
}

// Names lists the presets.
func Names() []string {
	var out []string
	for n := range all {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup finds a preset by name (any case).
func Lookup(name string) (Preset, error) {
	p, ok := all[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Preset{}, fmt.Errorf("unknown model provider %q: want one of %s", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// APIFor returns the wire a run asks for on a preset: api when set, else the
// preset's default. The Messages preset has one wire only.
func (p Preset) APIFor(api string) (string, error) {
	api = strings.ToLower(strings.TrimSpace(api))
	switch {
	case api == "" && p.Wire == Messages:
		return "", nil
	case api == "" && p.API != "":
		return p.API, nil
	case api == "":
		return openai.APIChat, nil
	case api != openai.APIChat && api != openai.APIResponses && api != openai.APIResponsesChained:
		return "", fmt.Errorf("unknown model API %q: want %s, %s or %s", api, openai.APIChat, openai.APIResponses, openai.APIResponsesChained)
	case p.Wire == Messages:
		return "", fmt.Errorf("the %s provider speaks its Messages API only; model API %q applies to OpenAI-style providers", p.Name, api)
	}
	return api, nil
}

// New builds the adapter for a preset on the wire api (empty: the
// preset's). A base URL in o overrides the preset's. thinking is Claude's
// extended thinking budget in tokens (0: off); only the Messages wire takes it.
func New(name, api string, o provider.Options, thinking int) (provider.Provider, error) {
	p, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if api, err = p.APIFor(api); err != nil {
		return nil, err
	}
	if o.BaseURL == "" {
		o.BaseURL = p.BaseURL
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = p.IdleTimeout
	}
	if o.BaseURL == "" {
		return nil, fmt.Errorf("the %s provider needs a base URL (the server's /v1 URL, e.g. http://vllm:8000/v1)", p.Name)
	}
	if u, err := url.Parse(o.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("model base URL %q is not an http(s) URL", o.BaseURL)
	}
	if o.Model == "" {
		return nil, fmt.Errorf("no model name given for the %s provider", p.Name)
	}
	if p.NeedsKey && o.APIKey == "" {
		return nil, fmt.Errorf("the %s provider needs an API key and none was given", p.Name)
	}
	if thinking > 0 && p.Wire != Messages {
		return nil, fmt.Errorf("the %s provider takes no thinking budget: extended thinking is Claude's (anthropic)", p.Name)
	}
	switch p.Wire {
	case Messages:
		return anthropic.New(anthropic.Config{Options: o, ThinkingBudget: thinking}), nil
	default:
		return openai.New(openai.Config{Options: o, Name: p.Name, MaxCompletionTokensField: p.MaxCompletionTokensField, API: api}), nil
	}
}
