package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/provider/presets"
)

// config is the loop's configuration: the contract's settings plus the key.
type config struct {
	contract.Settings
	APIKey string
}

// errHelp is -h: print usage, exit 0.
var errHelp = errors.New("help requested")

// parseConfig reads every setting from its flag or, when the flag is not
// given, from its environment variable (the flag wins). The API key is read
// from the environment only. An error names the setting that is wrong.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (config, error) {
	fs := flag.NewFlagSet("loop", flag.ContinueOnError)
	fs.SetOutput(usage)
	vals := map[contract.Setting]*string{}
	for _, s := range contract.AllSettings {
		if s.Flag == "" {
			continue
		}
		vals[s] = fs.String(s.Flag, "", s.Help+" (env "+s.Env+")")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, errHelp
		}
		var c config
		c.TerminationLog = strings.TrimSpace(getenv(contract.SettingTerminationLog.Env))
		return c, fmt.Errorf("bad command line: %w (the API key is read from %s only)", err, contract.SettingModelAPIKey.Env)
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q: every setting is a --flag or an environment variable", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	get := func(s contract.Setting) string {
		if s.Flag != "" && given[s.Flag] {
			return strings.TrimSpace(*vals[s])
		}
		return strings.TrimSpace(getenv(s.Env))
	}

	var c config
	var err error
	// First, so a bad configuration can be reported there.
	c.TerminationLog = get(contract.SettingTerminationLog)
	if c.TerminationLog == "" {
		c.TerminationLog = contract.DefaultTerminationLog
	}
	num := func(s contract.Setting, def, lo int) int {
		v := get(s)
		if v == "" || err != nil {
			return def
		}
		n, perr := strconv.Atoi(v)
		if perr != nil || n < lo {
			err = fmt.Errorf("%s: %q is not a whole number of at least %d", name(s), v, lo)
			return def
		}
		return n
	}
	num64 := func(s contract.Setting) int64 { // a token count, 0 or more
		v := get(s)
		if v == "" || err != nil {
			return 0
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			err = fmt.Errorf("%s: %q is not a whole number of tokens (0 or more)", name(s), v)
			return 0
		}
		return n
	}
	c.Run = get(contract.SettingRun)
	if c.Run != "" {
		if _, _, perr := contract.ParseRunRef(c.Run); perr != nil {
			return c, fmt.Errorf("%s: %q is not namespace/name", name(contract.SettingRun), c.Run)
		}
	}
	c.Attempt = num(contract.SettingAttempt, 1, 1)
	c.ContextWindow = num(contract.SettingContextWindow, contract.DefaultContextWindow, 1000)
	c.MaxTurns = num(contract.SettingMaxTurns, contract.DefaultMaxTurns, 1)
	c.SessionSeconds = num(contract.SettingSessionSeconds, contract.DefaultSessionSeconds, 1)
	c.ModelTimeoutSeconds = num(contract.SettingModelTimeout, 0, 1) // 0: the preset's default
	c.TraceKeep = num(contract.SettingTraceKeep, contract.DefaultTraceKeep, 1)
	c.MaxErrors = num(contract.SettingMaxErrors, 0, 1) // 0: the engine's default
	c.ThinkingBudgetTokens = num(contract.SettingThinkingBudget, 0, 0)
	c.MaxOutputTokens = num(contract.SettingMaxOutputTokens, 0, 256) // 0: the preset's
	c.Steered = num(contract.SettingSteered, 0, 0)
	c.ProgressHeartbeatSeconds = num(contract.SettingProgressHeartbeat, int(contract.DefaultProgressHeartbeat/time.Second), 1)
	c.MaxInputTokens = num64(contract.SettingMaxInputTokens)
	c.RunInputTokensLeft = num64(contract.SettingRunInputTokensLeft)
	if err != nil {
		return c, err
	}

	c.RigEndpoint = get(contract.SettingRigEndpoint)
	c.RigTokenFile = get(contract.SettingRigTokenFile)
	if c.RigEndpoint == "" {
		return c, fmt.Errorf("%s is required: the rig's MCP URL, e.g. http://rig:8048/mcp", name(contract.SettingRigEndpoint))
	}
	if u, perr := url.Parse(c.RigEndpoint); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("%s: %q is not an http(s) URL", name(contract.SettingRigEndpoint), c.RigEndpoint)
	}
	c.Trigger = get(contract.SettingTrigger)
	if c.Trigger == "" {
		return c, fmt.Errorf("%s is required: the opening message that woke the agent", name(contract.SettingTrigger))
	}
	c.ModelProvider = get(contract.SettingModelProvider)
	if c.ModelProvider == "" {
		c.ModelProvider = "openai"
	}
	preset, perr := presets.Lookup(c.ModelProvider)
	if perr != nil {
		return c, fmt.Errorf("%s: %v", name(contract.SettingModelProvider), perr)
	}
	c.Model = get(contract.SettingModel)
	if c.Model == "" {
		return c, fmt.Errorf("%s is required: the model name", name(contract.SettingModel))
	}
	c.ModelBaseURL = get(contract.SettingModelBaseURL)
	if c.ModelBaseURL == "" && preset.BaseURL == "" {
		return c, fmt.Errorf("%s is required for the %s provider: the server's /v1 URL", name(contract.SettingModelBaseURL), preset.Name)
	}
	if c.ModelBaseURL != "" {
		if u, perr := url.Parse(c.ModelBaseURL); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("%s: %q is not an http(s) URL", name(contract.SettingModelBaseURL), c.ModelBaseURL)
		}
	}
	if c.ModelAPI, perr = preset.APIFor(get(contract.SettingModelAPI)); perr != nil {
		return c, fmt.Errorf("%s: %v", name(contract.SettingModelAPI), perr)
	}
	if c.ThinkingBudgetTokens > 0 && preset.Wire != presets.Messages {
		return c, fmt.Errorf("%s: extended thinking is Claude's (the anthropic provider); %s does not take a thinking budget", name(contract.SettingThinkingBudget), preset.Name)
	}
	if c.Fold = get(contract.SettingFold); c.Fold != "" {
		if _, _, perr := contract.ParseFold(c.Fold); perr != nil {
			return c, fmt.Errorf("%s: %q is not AT/KEEP in turns with 1 <= KEEP < AT, e.g. 30/10", name(contract.SettingFold), c.Fold)
		}
	}
	c.APIKey = strings.TrimSpace(getenv(contract.SettingModelAPIKey.Env))
	if want := get(contract.SettingModelKeySHA256); want != "" && contract.KeySHA256(c.APIKey) != strings.ToLower(want) {
		return c, fmt.Errorf("%s is not the model key the operator checked (%s): its Secret was replaced after the pod was made; refusing to send it to the model's endpoint",
			contract.SettingModelAPIKey.Env, contract.SettingModelKeySHA256.Env)
	}
	if c.APIKey == "" && preset.NeedsKey {
		return c, fmt.Errorf("%s is empty: the %s provider needs an API key (from the run's Secret)", contract.SettingModelAPIKey.Env, preset.Name)
	}
	c.StateDir = get(contract.SettingStateDir)
	c.SkillsDirs = contract.SplitList(get(contract.SettingSkillsDirs))
	c.BootstrapDirs = contract.SplitList(get(contract.SettingBootstrapDirs))
	c.SystemPromptAppend = get(contract.SettingSystemPromptAppend)
	c.DenyTools = contract.SplitList(get(contract.SettingDenyTools))
	c.ToolPolicies = get(contract.SettingToolPolicies)
	if v := get(contract.SettingResume); v != "" {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			return c, fmt.Errorf("%s: %q is not true or false", name(contract.SettingResume), v)
		}
		c.Resume = b
	}
	c.TraceURL = get(contract.SettingTraceURL)
	if c.TraceURL != "" {
		if u, perr := url.Parse(c.TraceURL); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("%s: %q is not an http(s) URL", name(contract.SettingTraceURL), c.TraceURL)
		}
		c.TraceTokenFile = get(contract.SettingTraceTokenFile)
		if c.TraceTokenFile == "" {
			c.TraceTokenFile = contract.TraceTokenPath
		}
	}
	return c, nil
}

// fold is the fold cadence: the run's, else the preset's (0, 0: the engine's default).
func (c config) fold() (at, keep int) {
	if c.Fold != "" {
		at, keep, _ = contract.ParseFold(c.Fold) // checked by parseConfig
		return at, keep
	}
	p, _ := presets.Lookup(c.ModelProvider)
	return p.FoldAt, p.FoldKeep
}

// name is how an error names a setting: its flag and its variable.
func name(s contract.Setting) string {
	if s.Flag == "" {
		return s.Env
	}
	return "--" + s.Flag + " / " + s.Env
}
