package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Setting names one loop setting: its flag and the environment variable beside it (flag wins).
type Setting struct {
	Flag string // without the leading dashes; empty for env-only settings
	Env  string
	Help string
}

// The loop's settings (docs/loop-contract.md, "Settings").
var (
	SettingRun         = Setting{"run", "CLAWFARM_RUN", "namespace/name of the AgentRun (progress is patched there; empty = no cluster)"}
	SettingAttempt     = Setting{"attempt", "CLAWFARM_ATTEMPT", "attempt number, from 1"}
	SettingRigEndpoint = Setting{"rig-endpoint", "CLAWFARM_RIG_ENDPOINT", "the rig's MCP URL"}
	// SettingRigTokenFile is optional: without it the loop sends the rig no
	// credential (a rig with no gateway in front of it).
	SettingRigTokenFile  = Setting{"rig-token-file", "CLAWFARM_RIG_TOKEN_FILE", "a service account token projected for the rig audience; sent to the rig as a bearer token, for its gateway (read before each request, as the kubelet renews it)"}
	SettingTrigger       = Setting{"trigger", "CLAWFARM_TRIGGER", "the opening message"}
	SettingModelProvider = Setting{"model-provider", "CLAWFARM_MODEL_PROVIDER", "provider preset (openai, anthropic, qwen, moonshot, deepseek, google, openai-compatible)"}
	SettingModel         = Setting{"model", "CLAWFARM_MODEL", "model name"}
	SettingModelBaseURL  = Setting{"model-base-url", "CLAWFARM_MODEL_BASE_URL", "base URL override"}
	// SettingModelAPI is optional: an operator that does not set it gets
	// the preset's wire.
	SettingModelAPI    = Setting{"model-api", "CLAWFARM_MODEL_API", "the wire of an OpenAI-style provider: chat (Chat Completions), responses (the Responses API, stateless) or responses-chained (the Responses API on stored responses, which keep superseded screens); default responses for openai, chat for the others"}
	SettingModelAPIKey = Setting{"", "CLAWFARM_MODEL_API_KEY", "the API key, from a Secret (env only: never a flag, never printed)"}
	// SettingModelKeySHA256 pins the key: the kubelet resolves the Secret
	// when the container starts, and a Secret replaced after the manager
	// checked it (an unlabelled one of the same name) must not reach the
	// model's endpoint.
	SettingModelKeySHA256 = Setting{"model-key-sha256", "CLAWFARM_MODEL_KEY_SHA256", "the SHA-256 (hex) of the model key the operator checked; the loop refuses to start with another"}
	SettingContextWindow  = Setting{"context-window", "CLAWFARM_CONTEXT_WINDOW", "input budget in tokens"}
	SettingMaxTurns       = Setting{"max-turns", "CLAWFARM_MAX_TURNS", "turn limit"}
	SettingSessionSeconds = Setting{"session-seconds", "CLAWFARM_SESSION_SECONDS", "session budget in seconds"}
	SettingStateDir       = Setting{"state-dir", "CLAWFARM_STATE_DIR", "the rig's state volume"}
	SettingSkillsDirs     = Setting{"skills-dirs", "CLAWFARM_SKILLS_DIRS", "extra skill folders (mounted ConfigMaps), comma-separated"}
	SettingDenyTools      = Setting{"deny-tools", "CLAWFARM_DENY_TOOLS", "tools the policy blocks, comma-separated"}
	SettingResume         = Setting{"resume", "CLAWFARM_RESUME", "continue this attempt from its snapshot"}
	SettingTerminationLog = Setting{"termination-log", "CLAWFARM_TERMINATION_LOG", "where the termination message is written"}
	// SettingModelTimeout is the model idle timeout, configurable per
	// provider; it is optional, so an operator that does not set it still
	// speaks v1.
	SettingModelTimeout = Setting{"model-timeout-seconds", "CLAWFARM_MODEL_TIMEOUT_SECONDS", "model idle timeout in seconds: a reply that sends nothing for this long is retried (default 120; 300 for openai-compatible)"}
	// The trace upload settings are optional too: without a URL the trace
	// stays in the state directory only.
	SettingTraceURL       = Setting{"trace-url", "CLAWFARM_TRACE_URL", "the trace server's URL; the loop uploads its events and screens there (empty: the state directory only)"}
	SettingTraceTokenFile = Setting{"trace-token-file", "CLAWFARM_TRACE_TOKEN_FILE", "the projected service account token the trace server accepts"}
	SettingTraceKeep      = Setting{"trace-keep", "CLAWFARM_TRACE_KEEP", "attempts whose trace stays in the state directory (default 20; older ones are pruned)"}
	// The budgets and the model's tuning are optional as well: unset, the
	// loop's defaults apply.
	SettingMaxErrors          = Setting{"max-errors", "CLAWFARM_MAX_ERRORS", "tool errors in a row (blocked and invalid calls included) that end the session STUCK max_errors (default 8)"}
	SettingMaxInputTokens     = Setting{"max-input-tokens", "CLAWFARM_MAX_INPUT_TOKENS", "input tokens this attempt may use (0: no limit)"}
	SettingRunInputTokensLeft = Setting{"run-input-tokens-left", "CLAWFARM_RUN_INPUT_TOKENS_LEFT", "input tokens the run has left over all its attempts (0 or unset: no limit; the operator starts no attempt with nothing left)"}
	SettingThinkingBudget     = Setting{"thinking-budget-tokens", "CLAWFARM_THINKING_BUDGET_TOKENS", "Claude's extended thinking budget per turn (0: off)"}
	SettingFold               = Setting{"fold", "CLAWFARM_FOLD", "the fold cadence AT/KEEP in turns, e.g. 30/10 (default: the provider preset's)"}
	// The system prompt's parts beyond the rig's and the skills'.
	SettingBootstrapDirs      = Setting{"bootstrap-dirs", "CLAWFARM_BOOTSTRAP_DIRS", "folders of context files for the system prompt (mounted ConfigMaps: the rig's, then the run's), comma-separated, in order"}
	SettingSystemPromptAppend = Setting{"system-prompt-append", "CLAWFARM_SYSTEM_PROMPT_APPEND", "text appended to the system prompt, last"}
	SettingMaxOutputTokens    = Setting{"max-output-tokens", "CLAWFARM_MAX_OUTPUT_TOKENS", "the reply bound in tokens (default: the provider preset's); the preflight keeps it free"}
	// SettingToolPolicies is optional: without it no ToolPolicy applies.
	SettingToolPolicies = Setting{"tool-policies", "CLAWFARM_TOOL_POLICIES", "the ToolPolicies that select the run, as JSON (internal/toolpolicy's Set): rules and webhooks asked before every tool call"}
	// SettingSteered is optional: without it the opening message carries
	// no steer message, and the loop delivers every one it reads.
	SettingSteered = Setting{"steered", "CLAWFARM_STEERED", "how many of the run's steer messages (status.joined, mode steer) the opening message already carries; the loop delivers the ones after them at its turn boundaries"}
	// SettingProgressHeartbeat is optional: without it progress that
	// carries no news is patched every DefaultProgressHeartbeat.
	SettingProgressHeartbeat = Setting{"progress-heartbeat-seconds", "CLAWFARM_PROGRESS_HEARTBEAT_SECONDS", "the least seconds between two progress patches that carry no news (a turn, tokens, the heartbeat); news goes within 2 s (default 15)"}
)

// AllSettings lists every setting in contract order.
var AllSettings = []Setting{
	SettingRun, SettingAttempt, SettingRigEndpoint, SettingRigTokenFile, SettingTrigger,
	SettingModelProvider, SettingModel, SettingModelBaseURL, SettingModelAPIKey, SettingModelKeySHA256,
	SettingContextWindow, SettingMaxTurns, SettingSessionSeconds, SettingStateDir,
	SettingSkillsDirs, SettingDenyTools, SettingResume, SettingTerminationLog,
	SettingModelTimeout, SettingTraceURL, SettingTraceTokenFile, SettingTraceKeep,
	SettingModelAPI, SettingMaxErrors, SettingMaxInputTokens, SettingRunInputTokensLeft,
	SettingThinkingBudget, SettingFold, SettingBootstrapDirs, SettingSystemPromptAppend, SettingMaxOutputTokens,
	SettingToolPolicies,
	SettingSteered, SettingProgressHeartbeat,
}

// Defaults of the contract.
const (
	DefaultMaxTurns       = 300
	DefaultSessionSeconds = 3600
	DefaultContextWindow  = 128000
	DefaultTerminationLog = "/dev/termination-log"
	// DefaultModelTimeoutSeconds is the model idle timeout (docs/loop-contract.md, "Settings": 120 s).
	DefaultModelTimeoutSeconds = 120
	// StateMountPath is where the operator mounts the rig's state volume in a loop pod.
	StateMountPath = "/var/lib/clawfarm/state"
	// OwnStateCommand, as the loop's first argument, makes it the pod's init
	// step that gives a hostPath state directory to the loop's user.
	OwnStateCommand = "own-state"
	// SkillsMountRoot is where skill ConfigMaps are mounted, one folder each.
	SkillsMountRoot = "/etc/clawfarm/skills"
	// BootstrapMountRoot is where bootstrap ConfigMaps are mounted, one folder each.
	BootstrapMountRoot = "/etc/clawfarm/bootstrap"
	// MaxBootstrapFileBytes and MaxBootstrapBytes cap one context file and
	// all of a session's together: the system prompt goes with every request.
	MaxBootstrapFileBytes = 16 << 10
	MaxBootstrapBytes     = 64 << 10
	// DefaultTraceKeep is how many attempts' traces a state directory keeps.
	DefaultTraceKeep = 20
	// DefaultTraceAudience is the audience of the trace token: the trace
	// server accepts no other, and the API server does not accept it.
	DefaultTraceAudience = "clawfarm-trace"
	// DefaultRigAudience is the audience of the token a loop presents to a
	// rig gateway (internal/riggate): a token for the API server or the
	// trace server is refused there, and the other way round.
	DefaultRigAudience = "clawfarm-rig"
	// RigTokenPath is where the operator projects the rig token in a loop pod.
	RigTokenPath = "/var/run/secrets/clawfarm.dev/rig/token"
	// TraceTokenPath is where the operator projects the trace token in a loop pod.
	TraceTokenPath = "/var/run/secrets/clawfarm.dev/trace/token"
)

// Settings is the loop's configuration. The operator renders it into a pod's
// environment with Environ; the loop reads it back with flags over the environment.
type Settings struct {
	Run         string // namespace/name
	Attempt     int
	RigEndpoint string
	// RigTokenFile is where the rig-audience token is projected; empty: none.
	RigTokenFile   string
	Trigger        string
	ModelProvider  string
	Model          string
	ModelBaseURL   string
	ContextWindow  int
	MaxTurns       int
	SessionSeconds int
	StateDir       string
	SkillsDirs     []string
	DenyTools      []string
	Resume         bool
	TerminationLog string
	// ModelTimeoutSeconds is the model idle timeout; 0 means the default (120 s).
	ModelTimeoutSeconds int
	// TraceURL, when set, is where the loop uploads its trace, presenting
	// the token in TraceTokenFile.
	TraceURL       string
	TraceTokenFile string
	// TraceKeep is how many attempts' traces the state directory keeps; 0 means the default.
	TraceKeep int
	// ModelAPI is the wire (chat, responses or responses-chained); empty means the preset's.
	ModelAPI string
	// MaxErrors is the consecutive tool error limit; 0 means the default (8).
	MaxErrors int
	// MaxInputTokens and RunInputTokensLeft are the input token budgets of
	// this attempt and of what is left of the run's; 0 means no limit.
	MaxInputTokens     int64
	RunInputTokensLeft int64
	// ThinkingBudgetTokens turns on Claude's extended thinking; 0 leaves it off.
	ThinkingBudgetTokens int
	// Fold is the fold cadence "AT/KEEP"; empty means the preset's.
	Fold string
	// BootstrapDirs are folders of context files for the system prompt, in order.
	BootstrapDirs []string
	// SystemPromptAppend is appended to the system prompt.
	SystemPromptAppend string
	// MaxOutputTokens bounds each reply; 0 means the preset's.
	MaxOutputTokens int
	// ToolPolicies is the JSON of the ToolPolicies that select the run; empty: none.
	ToolPolicies string
	// Steered is how many steer messages the opening message carries.
	Steered int
	// ModelKeySHA256 is KeySHA256 of the key the operator checked; empty: no pin.
	ModelKeySHA256 string
	// ProgressHeartbeatSeconds is the least time between two progress
	// patches that carry no news; 0 means the default.
	ProgressHeartbeatSeconds int
}

// Environ renders the settings as environment variables (name → value),
// leaving out empty ones. The API key is not part of Settings: the operator
// wires it from a Secret reference, never as a literal.
func (s Settings) Environ() []EnvVar {
	var out []EnvVar
	add := func(st Setting, v string) {
		if v != "" {
			out = append(out, EnvVar{Name: st.Env, Value: v})
		}
	}
	itoa := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	add(SettingRun, s.Run)
	add(SettingAttempt, itoa(s.Attempt))
	add(SettingRigEndpoint, s.RigEndpoint)
	add(SettingRigTokenFile, s.RigTokenFile)
	add(SettingTrigger, s.Trigger)
	add(SettingModelProvider, s.ModelProvider)
	add(SettingModel, s.Model)
	add(SettingModelBaseURL, s.ModelBaseURL)
	add(SettingContextWindow, itoa(s.ContextWindow))
	add(SettingMaxTurns, itoa(s.MaxTurns))
	add(SettingSessionSeconds, itoa(s.SessionSeconds))
	add(SettingStateDir, s.StateDir)
	add(SettingSkillsDirs, strings.Join(s.SkillsDirs, ","))
	add(SettingDenyTools, strings.Join(s.DenyTools, ","))
	if s.Resume {
		add(SettingResume, "true")
	}
	add(SettingTerminationLog, s.TerminationLog)
	add(SettingModelTimeout, itoa(s.ModelTimeoutSeconds))
	add(SettingTraceURL, s.TraceURL)
	add(SettingTraceTokenFile, s.TraceTokenFile)
	add(SettingTraceKeep, itoa(s.TraceKeep))
	add(SettingModelAPI, s.ModelAPI)
	add(SettingMaxErrors, itoa(s.MaxErrors))
	add(SettingMaxInputTokens, itoa64(s.MaxInputTokens))
	add(SettingRunInputTokensLeft, itoa64(s.RunInputTokensLeft))
	add(SettingThinkingBudget, itoa(s.ThinkingBudgetTokens))
	add(SettingFold, s.Fold)
	add(SettingBootstrapDirs, strings.Join(s.BootstrapDirs, ","))
	add(SettingSystemPromptAppend, s.SystemPromptAppend)
	add(SettingMaxOutputTokens, itoa(s.MaxOutputTokens))
	add(SettingToolPolicies, s.ToolPolicies)
	add(SettingSteered, itoa(s.Steered))
	add(SettingModelKeySHA256, s.ModelKeySHA256)
	add(SettingProgressHeartbeat, itoa(s.ProgressHeartbeatSeconds))
	return out
}

func itoa64(n int64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// ParseFold reads a fold cadence "AT/KEEP" (30/10: the first fold at 30
// complete turns keeps the newest 10; the next comes 20 turns later).
func ParseFold(v string) (at, keep int, err error) {
	a, k, ok := strings.Cut(v, "/")
	if ok {
		at, err = strconv.Atoi(strings.TrimSpace(a))
		if err == nil {
			keep, err = strconv.Atoi(strings.TrimSpace(k))
		}
	}
	if !ok || err != nil || keep < 1 || at <= keep {
		return 0, 0, fmt.Errorf("%s=%q: want AT/KEEP in turns with 1 <= KEEP < AT, e.g. 30/10", SettingFold.Env, v)
	}
	return at, keep, nil
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name, Value string
}

// ParseRunRef splits "namespace/name".
func ParseRunRef(ref string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("%s=%q: want namespace/name", SettingRun.Env, ref)
	}
	return ns, n, nil
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// KeySHA256 is the hex SHA-256 of a model key as the loop reads it (spaces
// around it trimmed): the operator puts it in SettingModelKeySHA256.
func KeySHA256(key string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return hex.EncodeToString(sum[:])
}
