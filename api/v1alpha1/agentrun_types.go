package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RigReference names a DeviceRig in the run's namespace.
type RigReference struct {
	// Name of the DeviceRig.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// RigSelector picks any Ready, free, schedulable rig whose labels match.
type RigSelector struct {
	// MatchLabels are the labels a DeviceRig must carry. Empty matches every rig.
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// ModelProvider is a provider preset of the loop.
// +kubebuilder:validation:Enum=openai;anthropic;qwen;moonshot;deepseek;google;openai-compatible
type ModelProvider string

// ModelAPI is the wire an OpenAI-style provider is spoken on.
// +kubebuilder:validation:Enum=chat;responses;responses-chained
type ModelAPI string

// The wires (docs/engine.md, "The Responses wire").
const (
	// ModelAPIChat is Chat Completions: the whole context every request.
	ModelAPIChat ModelAPI = "chat"
	// ModelAPIResponses is OpenAI's Responses API, stateless: store false,
	// the whole compacted context every request (only the newest screen),
	// reasoning carried as encrypted items.
	ModelAPIResponses ModelAPI = "responses"
	// ModelAPIResponsesChained is the Responses API on stored responses
	// (previous_response_id): each request sends only what is new, and the
	// service keeps up to four superseded screens, which the model reads
	// and every request bills.
	ModelAPIResponsesChained ModelAPI = "responses-chained"
)

// ModelSpec says which model drives the agent.
// +kubebuilder:validation:XValidation:rule="self.provider != 'openai-compatible' || has(self.baseURL)",message="model.baseURL is required when model.provider is openai-compatible"
// +kubebuilder:validation:XValidation:rule="!has(self.api) || self.provider != 'anthropic'",message="model.api applies to OpenAI-style providers; the anthropic provider speaks the Messages API only"
// +kubebuilder:validation:XValidation:rule="!has(self.thinkingBudgetTokens) || self.provider == 'anthropic'",message="model.thinkingBudgetTokens is Claude's extended thinking: it needs provider anthropic"
type ModelSpec struct {
	// Provider is the provider preset.
	// +kubebuilder:default=openai
	Provider ModelProvider `json:"provider,omitempty"`

	// Name is the model name, as the provider spells it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// BaseURL overrides the preset's endpoint (vLLM, Ollama, a proxy).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	BaseURL string `json:"baseURL,omitempty"`

	// API is the wire: chat (Chat Completions), responses (the Responses
	// API, stateless: the whole compacted conversation every request) or
	// responses-chained (the Responses API continuing the provider's stored
	// responses: fewer bytes sent, but the provider keeps superseded
	// screens, which the model reads and every request bills). Unset:
	// responses for the openai provider, chat for the others.
	// +optional
	API ModelAPI `json:"api,omitempty"`

	// APIKeySecretRef is the Secret key holding the API key. The key reaches the
	// loop as an environment variable only. The Secret must be labelled
	// farm.clawfarm.dev/model-key=true; its annotation
	// farm.clawfarm.dev/max-sessions, when set, caps how many sessions the
	// runs using it have at once, and the others wait Queued
	// (ModelAccountBusy).
	// +optional
	APIKeySecretRef *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// ContextWindow is the input budget in tokens.
	// +kubebuilder:default=128000
	// +kubebuilder:validation:Minimum=4096
	// +kubebuilder:validation:Maximum=10000000
	ContextWindow int32 `json:"contextWindow,omitempty"`

	// MaxOutputTokens bounds each reply. Unset: the provider preset's. The
	// preflight keeps it free in the context window, with room for a fold.
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=200000
	// +optional
	MaxOutputTokens int32 `json:"maxOutputTokens,omitempty"`

	// ThinkingBudgetTokens turns on Claude's extended thinking with this many
	// tokens per turn (anthropic only); the thinking blocks stay in the
	// transcript, as tool use with thinking requires.
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=128000
	// +optional
	ThinkingBudgetTokens int32 `json:"thinkingBudgetTokens,omitempty"`

	// Fold overrides the provider preset's fold cadence: how often the
	// transcript's older turns are folded into one-line summaries. Folding
	// rewrites the head of the transcript, so it also spends the prompt cache
	// (docs/engine.md, "Prompt caching and the fold policy").
	// +optional
	Fold *FoldPolicy `json:"fold,omitempty"`

	// Pricing is what the model costs, in USD per million tokens; with it
	// the run's status.usage.cost is filled in. Unset: the manager's price
	// list (--pricing-configmap), if it names the model.
	// +optional
	Pricing *ModelPricing `json:"pricing,omitempty"`
}

// FoldPolicy is a fold cadence: the first fold comes at AtTurns complete
// turns and keeps the newest KeepTurns whole; the next comes AtTurns-KeepTurns
// turns later.
// +kubebuilder:validation:XValidation:rule="self.keepTurns < self.atTurns",message="fold.keepTurns must be less than fold.atTurns"
type FoldPolicy struct {
	// AtTurns complete turns in the transcript trigger a fold.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1000
	AtTurns int32 `json:"atTurns"`
	// KeepTurns are kept whole by a fold.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=999
	KeepTurns int32 `json:"keepTurns"`
}

// ModelPricing is a price list in USD per million tokens, as decimal strings
// ("3", "0.30"). Cached input defaults to input; cache writes (Anthropic)
// default to input too.
type ModelPricing struct {
	// Input is the price of a million uncached input tokens.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	Input string `json:"input"`
	// CachedInput is the price of a million input tokens read from the prompt cache.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	// +optional
	CachedInput string `json:"cachedInput,omitempty"`
	// CacheWrite is the price of a million input tokens written to the prompt cache.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	// +optional
	CacheWrite string `json:"cacheWrite,omitempty"`
	// Output is the price of a million output tokens.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	Output string `json:"output"`
}

// RunLimits bounds a run.
// +kubebuilder:validation:XValidation:rule="!has(self.maxInputTokens) || !has(self.maxRunInputTokens) || self.maxInputTokens == 0 || self.maxRunInputTokens == 0 || self.maxInputTokens <= self.maxRunInputTokens",message="limits.maxInputTokens (one attempt) cannot exceed limits.maxRunInputTokens (the whole run)"
// +kubebuilder:validation:XValidation:rule="!has(self.stallSeconds) || self.stallSeconds == 0 || self.stallSeconds >= 10",message="limits.stallSeconds is 0 (no stall watchdog) or at least 10"
type RunLimits struct {
	// MaxTurns is the turn limit of one attempt.
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxTurns int32 `json:"maxTurns,omitempty"`

	// MaxAttempts is how many counted attempts (STUCK, crashes) a run may use.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	MaxAttempts int32 `json:"maxAttempts,omitempty"`

	// MaxInfraRetries is how many free retries infrastructure failures (a pod
	// that never started, an eviction, a lost node) may use over the whole run.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	// +optional
	MaxInfraRetries *int32 `json:"maxInfraRetries,omitempty"`

	// QueueTimeoutSeconds fails a run that has waited this long for a rig. 0 waits forever.
	// +kubebuilder:default=86400
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	// +optional
	QueueTimeoutSeconds *int32 `json:"queueTimeoutSeconds,omitempty"`

	// AttemptTimeoutSeconds is the session budget of one attempt (the loop's
	// --session-seconds); the pod's activeDeadlineSeconds adds a grace minute.
	// An attempt that runs out of it ends STUCK and a fresh attempt follows,
	// up to maxAttempts: a slow phone is not a lost task.
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=86400
	AttemptTimeoutSeconds int32 `json:"attemptTimeoutSeconds,omitempty"`

	// RunTimeoutSeconds fails the whole run, queue time included, after this long. 0: no limit.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	RunTimeoutSeconds int32 `json:"runTimeoutSeconds,omitempty"`

	// MaxErrors is how many tool errors in a row end an attempt STUCK
	// (max_errors): the rig's error results, calls the policy blocked, and
	// calls the model got wrong all count; a call that runs cleanly resets it.
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxErrors int32 `json:"maxErrors,omitempty"`

	// MaxInputTokens bounds the input tokens one attempt may send to the
	// model; reaching it ends the attempt STUCK (budget_exhausted) and the
	// run Failed, without a retry: a fresh attempt would spend as much. 0: no limit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000000
	// +optional
	MaxInputTokens int64 `json:"maxInputTokens,omitempty"`

	// MaxRunInputTokens bounds the input tokens of all the run's attempts
	// together: each attempt gets what is left. Reaching it ends the
	// attempt STUCK (budget_exhausted) and the run Failed. 0: no limit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000000
	// +optional
	MaxRunInputTokens int64 `json:"maxRunInputTokens,omitempty"`

	// StallSeconds is the stall watchdog: an attempt whose loop has reported
	// no progress (a turn, a tool result) for this long is stopped and
	// recorded STUCK (Stalled), then retried like any STUCK. 0: no watchdog.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	StallSeconds *int32 `json:"stallSeconds,omitempty"`
}

// The defaults of the limits whose zero means something (no free retries, no
// queue timeout, no follow-ups); they are pointers so that an explicit 0 sent
// by any client survives defaulting, and these apply where the field is unset.
const (
	DefaultMaxInfraRetries     int32 = 5
	DefaultQueueTimeoutSeconds int32 = 86400
	DefaultMaxChain            int32 = 10
	// MaxFollowUpChain is the most followUp.maxChain may be (ours; the
	// schema's Maximum on the field says the same).
	MaxFollowUpChain    int32 = 100
	DefaultStallSeconds int32 = 600
	DefaultMaxErrors    int32 = 8
)

// StallTimeout is StallSeconds as a duration, or its default when unset (0: no watchdog).
func (l RunLimits) StallTimeout() time.Duration {
	return time.Duration(orDefault(l.StallSeconds, DefaultStallSeconds)) * time.Second
}

// ErrorLimit is MaxErrors, or its default when unset.
func (l RunLimits) ErrorLimit() int32 {
	if l.MaxErrors <= 0 {
		return DefaultMaxErrors
	}
	return l.MaxErrors
}

// InfraRetryLimit is MaxInfraRetries, or its default when unset.
func (l RunLimits) InfraRetryLimit() int32 {
	return orDefault(l.MaxInfraRetries, DefaultMaxInfraRetries)
}

// QueueTimeout is QueueTimeoutSeconds, or its default when unset (0: no timeout).
func (l RunLimits) QueueTimeout() int32 {
	return orDefault(l.QueueTimeoutSeconds, DefaultQueueTimeoutSeconds)
}

// ChainLimit is MaxChain, or its default when unset (0: no follow-ups).
func (f FollowUpPolicy) ChainLimit() int32 { return orDefault(f.MaxChain, DefaultMaxChain) }

// DefaultFollowUpDelayMinutes is the WAIT follow-up's delay when neither the
// agent nor the run chose one (docs/engine.md, "Engine tools and the state
// directory"). The schema's default for defaultDelayMinutes says the same.
const DefaultFollowUpDelayMinutes int32 = 15

// Delay is DefaultDelayMinutes as a duration, or its default when unset.
func (f FollowUpPolicy) Delay() time.Duration {
	m := f.DefaultDelayMinutes
	if m <= 0 {
		m = DefaultFollowUpDelayMinutes
	}
	return time.Duration(m) * time.Minute
}

func orDefault(p *int32, d int32) int32 {
	if p == nil {
		return d
	}
	return *p
}

// FollowUpPolicy governs WAIT follow-ups.
type FollowUpPolicy struct {
	// MaxChain is how many follow-up runs one chain may have, 0 to 100; 0
	// disables follow-ups. A run that ends WAIT with its chain exhausted
	// succeeds with reason FollowUpChainExhausted and no follow-up.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxChain *int32 `json:"maxChain,omitempty"`

	// DefaultDelayMinutes is the delay when the agent did not ask for one.
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10080
	DefaultDelayMinutes int32 `json:"defaultDelayMinutes,omitempty"`
}

// BootstrapSource is a ConfigMap of context files for the system prompt:
// each key is a file, in key order, at most 16 KiB each and 64 KiB for all
// the files of a run together.
type BootstrapSource struct {
	// ConfigMapName names a ConfigMap in the run's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ConfigMapName string `json:"configMapName"`
}

// SkillSource is a ConfigMap of skills (folders with SKILL.md) mounted into the loop pod.
type SkillSource struct {
	// ConfigMapName names a ConfigMap in the run's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ConfigMapName string `json:"configMapName"`
}

// PodOverrides customise the loop pod.
type PodOverrides struct {
	// Image of the loop. Default: the manager's --loop-image.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Resources of the loop container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Tolerations added to the loop pod (the rig taint is always tolerated).
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// ServiceAccountName of the loop pod. Default: the manager's --loop-service-account.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// AgentRunSpec is one task on one rig. It is frozen once the run has started,
// except cancel.
// +kubebuilder:validation:XValidation:rule="has(self.rigRef) != has(self.rigSelector)",message="set exactly one of rigRef (a rig by name) or rigSelector (any matching rig)"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",message="cancel cannot be undone"
type AgentRunSpec struct {
	// RigRef runs the task on this rig.
	// +optional
	RigRef *RigReference `json:"rigRef,omitempty"`

	// RigSelector runs the task on any Ready, free rig whose labels match.
	// +optional
	RigSelector *RigSelector `json:"rigSelector,omitempty"`

	// Trigger is the opening message: what woke the agent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="trigger may not contain a NUL character: it reaches the loop pod as an environment variable, which cannot hold one"
	Trigger string `json:"trigger"`

	// QueueMode is how the run meets other runs for the same rig: queue
	// (default) waits its turn and gets a session of its own; collect joins
	// the session a rig is handed to when that session's run is a collect
	// run waiting for the same rig with the same model, one opening message
	// numbering every trigger; steer is delivered into the rig's running
	// session (same namespace) as a new user message at its next turn, and
	// queues like queue when none is running. Either way the run ends with
	// the session's outcome.
	// +kubebuilder:default=queue
	// +optional
	QueueMode QueueMode `json:"queueMode,omitempty"`

	// Model drives the agent.
	Model ModelSpec `json:"model"`

	// Limits bound the run.
	// +kubebuilder:default={}
	// +optional
	Limits RunLimits `json:"limits,omitempty"`

	// Skills are extra skill ConfigMaps for this run.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Skills []SkillSource `json:"skills,omitempty"`

	// Bootstrap are ConfigMaps of context files for this run's system prompt
	// ("how our phones are set up"), after the rig's.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Bootstrap []BootstrapSource `json:"bootstrap,omitempty"`

	// SystemPromptAppend is appended to the system prompt, last.
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:XValidation:rule=`!self.contains('\u0000')`,message="systemPromptAppend may not contain a NUL character: it reaches the loop pod as an environment variable, which cannot hold one"
	// +optional
	SystemPromptAppend string `json:"systemPromptAppend,omitempty"`

	// DenyTools are tools the loop's policy blocks for this run.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	DenyTools []string `json:"denyTools,omitempty"`

	// FollowUp governs WAIT follow-ups.
	// +kubebuilder:default={}
	// +optional
	FollowUp FollowUpPolicy `json:"followUp,omitempty"`

	// Cancel stops the run: the loop pod is stopped gracefully, the rig released,
	// the phase becomes Cancelled. It cannot be undone.
	// +optional
	Cancel bool `json:"cancel,omitempty"`

	// TTLSecondsAfterFinished deletes the run this long after it finished.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// Pod customises the loop pod.
	// +optional
	Pod *PodOverrides `json:"pod,omitempty"`
}

// QueueMode is how a run meets other runs for the same rig.
// +kubebuilder:validation:Enum=queue;collect;steer
type QueueMode string

// The queue modes.
const (
	QueueModeQueue   QueueMode = "queue"
	QueueModeCollect QueueMode = "collect"
	QueueModeSteer   QueueMode = "steer"
)

// Mode is QueueMode, or queue when unset.
func (s AgentRunSpec) Mode() QueueMode {
	if s.QueueMode == "" {
		return QueueModeQueue
	}
	return s.QueueMode
}

// RunPhase is where a run is in its life.
// +kubebuilder:validation:Enum=Pending;Queued;Running;Retrying;Waiting;Succeeded;Failed;Cancelled
type RunPhase string

// The phases of a run.
const (
	RunPending   RunPhase = "Pending"
	RunQueued    RunPhase = "Queued"
	RunRunning   RunPhase = "Running"
	RunRetrying  RunPhase = "Retrying"
	RunWaiting   RunPhase = "Waiting"
	RunSucceeded RunPhase = "Succeeded"
	RunFailed    RunPhase = "Failed"
	RunCancelled RunPhase = "Cancelled"
)

// Finished reports whether the phase is final.
func (p RunPhase) Finished() bool {
	return p == RunSucceeded || p == RunFailed || p == RunCancelled
}

// WaitsForRig reports whether the run is in a rig's queue: not finished,
// holding no rig, not cancelled, not being deleted. The operator's queue and
// `kubectl claw rigs` both count by it.
func (r *AgentRun) WaitsForRig() bool {
	if r.DeletionTimestamp != nil || r.Spec.Cancel {
		return false
	}
	switch r.Status.Phase {
	case "", RunPending, RunQueued:
		return true
	}
	return false
}

// TokenUsage counts tokens.
type TokenUsage struct {
	// PromptTokens are all input tokens, cached ones included.
	PromptTokens int64 `json:"promptTokens,omitempty"`
	// CompletionTokens are the output tokens (thinking included).
	CompletionTokens int64 `json:"completionTokens,omitempty"`
	// CachedTokens are the input tokens read from the prompt cache.
	CachedTokens int64 `json:"cachedTokens,omitempty"`
	// CacheWriteTokens are the input tokens written to the prompt cache (Anthropic).
	// +optional
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	// Cost is what the tokens cost in USD, a decimal string, when the run's
	// model has a price (spec.model.pricing or the manager's price list).
	// +optional
	Cost string `json:"cost,omitempty"`
}

// AttemptRecord is the recorded outcome of one attempt pod.
type AttemptRecord struct {
	// Attempt is the counted attempt number, from 1.
	Attempt int32 `json:"attempt"`
	// Retry is the infrastructure retry within the attempt, from 0.
	Retry int32 `json:"retry,omitempty"`
	// Pod is the attempt pod's name.
	Pod string `json:"pod"`
	// Node the pod ran on.
	// +optional
	Node string `json:"node,omitempty"`
	// StartTime of the pod.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// FinishTime, when the outcome was recorded.
	// +optional
	FinishTime *metav1.Time `json:"finishTime,omitempty"`
	// Sentinel the loop reported (or the harness set).
	// +optional
	Sentinel string `json:"sentinel,omitempty"`
	// ExitCode of the loop container.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// ExitReason the loop reported.
	// +optional
	ExitReason string `json:"exitReason,omitempty"`
	// Outcome is the class the controller acted on (Done, Fail, Wait, Idle, Stuck,
	// BudgetExhausted, InvalidConfig, Infrastructure, Cancelled).
	Outcome string `json:"outcome"`
	// Counted is true when the attempt used one of maxAttempts.
	Counted bool `json:"counted"`
	// Message explains the outcome in a sentence.
	// +optional
	Message string `json:"message,omitempty"`
	// Usage is the attempt's token usage.
	// +optional
	Usage *TokenUsage `json:"usage,omitempty"`
	// SystemPromptSHA256 is the hash of the system prompt the attempt's model
	// saw; the prompt itself is in the attempt's trace.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	SystemPromptSHA256 string `json:"systemPromptSHA256,omitempty"`
}

// RunProgress is the live progress the loop patches while it runs.
type RunProgress struct {
	Attempt int32 `json:"attempt,omitempty"`
	Turn    int32 `json:"turn,omitempty"`
	// +kubebuilder:validation:MaxLength=512
	// +optional
	LastNote string `json:"lastNote,omitempty"`
	Tokens   int64  `json:"tokens,omitempty"`
	// LastTool is the last tool whose result came back.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	LastTool string `json:"lastTool,omitempty"`
	// UpdatedAt is an RFC 3339 time: the loop's heartbeat, renewed on every
	// turn and every tool result (the stall watchdog reads it).
	// +optional
	UpdatedAt string `json:"updatedAt,omitempty"`
	// Steered is how many of status.joined's steer messages the loop has
	// delivered to the model, in order.
	// +optional
	Steered int32 `json:"steered,omitempty"`
	// Approval is the tool call the loop holds for a person's answer.
	// +optional
	Approval *ApprovalRequest `json:"approval,omitempty"`
}

// ApprovalRequest is a tool call a ToolPolicy sent for approval: the loop
// holds the phone and its turn, its session clock stopped, until the run's
// approval annotations answer it or approvalTimeoutSeconds pass (a deny).
type ApprovalRequest struct {
	// ID names this request; an answer names it too.
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`
	// Tool is the call's tool.
	// +kubebuilder:validation:MaxLength=64
	Tool string `json:"tool"`
	// Args are the call's arguments as JSON, cut to 2 KiB.
	// +kubebuilder:validation:MaxLength=2100
	// +optional
	Args string `json:"args,omitempty"`
	// Policy and Rule that asked for approval.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Policy string `json:"policy,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Rule string `json:"rule,omitempty"`
	// Message is the rule's (or webhook's) message.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Turn of the call.
	// +optional
	Turn int32 `json:"turn,omitempty"`
	// RequestedAt and DeadlineAt are RFC 3339 times.
	// +optional
	RequestedAt string `json:"requestedAt,omitempty"`
	// +optional
	DeadlineAt string `json:"deadlineAt,omitempty"`
}

// JoinedRun is a run whose trigger joined this run's session: collected
// into its opening message, or steered into it while it ran.
type JoinedRun struct {
	// Name of the joined run.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Mode it joined by: collect or steer.
	Mode QueueMode `json:"mode"`
	// Trigger is the joined run's trigger.
	// +kubebuilder:validation:MaxLength=16384
	Trigger string `json:"trigger"`
	// Attempt is the session's attempt it joined.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
}

// FollowUpStatus tracks the WAIT follow-up.
type FollowUpStatus struct {
	// CronJob that fires the follow-up.
	// +optional
	CronJob string `json:"cronJob,omitempty"`
	// FireTime is when it fires.
	// +optional
	FireTime *metav1.Time `json:"fireTime,omitempty"`
	// Run is the follow-up AgentRun, once it exists.
	// +optional
	Run string `json:"run,omitempty"`
	// Chain is the follow-up's position in its chain, from 1.
	// +optional
	Chain int32 `json:"chain,omitempty"`
	// Context is what the agent asked the follow-up to check.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Context string `json:"context,omitempty"`
}

// AgentJobStatus is an agent-created job materialised as a CronJob.
type AgentJobStatus struct {
	ID      string `json:"id"`
	CronJob string `json:"cronJob,omitempty"`
	// Op is the last operation: create or finish.
	Op string `json:"op"`
	// +optional
	Schedule string `json:"schedule,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// AgentRunStatus is what the operator observed of the run.
type AgentRunStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase of the run. A run the operator has not written yet reads
	// Pending (a schema default): in a burst, the first status of the runs
	// that wait is written after the runs that can start now.
	// +kubebuilder:default=Pending
	// +optional
	Phase RunPhase `json:"phase,omitempty"`
	// Rig the run holds or last held.
	// +optional
	Rig string `json:"rig,omitempty"`
	// Attempt is the current counted attempt, from 1.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// InfraRetries used so far (free retries).
	// +optional
	InfraRetries int32 `json:"infraRetries,omitempty"`
	// NextAttemptTime is when the next counted attempt may start: after an
	// attempt ends STUCK the run backs off (10 s, 20 s, 40 s … at most 5 min
	// by default) before its fresh attempt.
	// +optional
	NextAttemptTime *metav1.Time `json:"nextAttemptTime,omitempty"`
	// Sentinel of the last attempt.
	// +optional
	Sentinel string `json:"sentinel,omitempty"`
	// Recap of the last attempt, in the agent's words.
	// +optional
	Recap string `json:"recap,omitempty"`
	// ExitReason of the last attempt.
	// +optional
	ExitReason string `json:"exitReason,omitempty"`
	// Attempts is the bounded history of attempt pods, oldest first.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Attempts []AttemptRecord `json:"attempts,omitempty"`
	// Progress is live while an attempt runs.
	// +optional
	Progress *RunProgress `json:"progress,omitempty"`
	// FollowUp tracks the WAIT follow-up.
	// +optional
	FollowUp *FollowUpStatus `json:"followUp,omitempty"`
	// Jobs are the agent-created jobs this run reported.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Jobs []AgentJobStatus `json:"jobs,omitempty"`
	// Usage is the token usage over all attempts.
	// +optional
	Usage *TokenUsage `json:"usage,omitempty"`
	// Joined are the runs whose triggers joined this run's session, in the
	// order they joined (collect first, then steer).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Joined []JoinedRun `json:"joined,omitempty"`
	// CollectedInto is the run whose session this collect run joined; it
	// ends with that session's outcome.
	// +optional
	CollectedInto string `json:"collectedInto,omitempty"`
	// SteeredInto is the run whose running session this steer run was
	// delivered to; it ends with that session's outcome.
	// +optional
	SteeredInto string `json:"steeredInto,omitempty"`
	// QueuedAt is when the run started waiting for a rig.
	// +optional
	QueuedAt *metav1.Time `json:"queuedAt,omitempty"`
	// StartTime is when the first attempt pod was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the run finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Conditions: RigLeased, Succeeded, FollowUpScheduled, Finished,
	// AwaitingApproval, ModelKey, Joined, and kstatus's Reconciling and Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MaxNameLength is the longest AgentRun name, as the CEL rule on AgentRun
// says. Every name derived from a run fits with it: attempt pods
// <name>-a<N>-r<M>, the follow-up CronJob <name>-fu (CronJob names are at
// most 52) and its Jobs (at most 63); follow-up runs are shortened to it.
const MaxNameLength = 48

// AgentRun is one task on one phone rig: the operator leases a rig, runs the
// loop pod on its node, and records the sentinel the agent ends with.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ar,categories=clawfarm
// +kubebuilder:printcolumn:name="Rig",type=string,JSONPath=`.status.rig`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Sentinel",type=string,JSONPath=`.status.sentinel`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.status.attempt`
// +kubebuilder:printcolumn:name="Turn",type=integer,JSONPath=`.status.progress.turn`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].reason`,priority=1
// +kubebuilder:printcolumn:name="Tokens",type=integer,JSONPath=`.status.usage.promptTokens`,priority=1
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.usage.cost`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 48",message="metadata.name must be at most 48 characters: attempt pods (<name>-a<N>-r<M>), the follow-up CronJob (<name>-fu) and its Jobs add suffixes to it; choose a shorter name (follow-up runs <name>-f<N> are shortened with a hash to fit)"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec || (self.spec.trigger == oldSelf.spec.trigger && has(self.spec.queueMode) == has(oldSelf.spec.queueMode) && (!has(self.spec.queueMode) || self.spec.queueMode == oldSelf.spec.queueMode) && self.spec.model == oldSelf.spec.model && self.spec.limits == oldSelf.spec.limits && self.spec.followUp == oldSelf.spec.followUp && has(self.spec.rigRef) == has(oldSelf.spec.rigRef) && (!has(self.spec.rigRef) || self.spec.rigRef == oldSelf.spec.rigRef) && has(self.spec.rigSelector) == has(oldSelf.spec.rigSelector) && (!has(self.spec.rigSelector) || self.spec.rigSelector == oldSelf.spec.rigSelector) && has(self.spec.skills) == has(oldSelf.spec.skills) && (!has(self.spec.skills) || self.spec.skills == oldSelf.spec.skills) && has(self.spec.denyTools) == has(oldSelf.spec.denyTools) && (!has(self.spec.denyTools) || self.spec.denyTools == oldSelf.spec.denyTools) && has(self.spec.bootstrap) == has(oldSelf.spec.bootstrap) && (!has(self.spec.bootstrap) || self.spec.bootstrap == oldSelf.spec.bootstrap) && has(self.spec.systemPromptAppend) == has(oldSelf.spec.systemPromptAppend) && (!has(self.spec.systemPromptAppend) || self.spec.systemPromptAppend == oldSelf.spec.systemPromptAppend) && has(self.spec.pod) == has(oldSelf.spec.pod) && (!has(self.spec.pod) || self.spec.pod == oldSelf.spec.pod) && has(self.spec.ttlSecondsAfterFinished) == has(oldSelf.spec.ttlSecondsAfterFinished) && (!has(self.spec.ttlSecondsAfterFinished) || self.spec.ttlSecondsAfterFinished == oldSelf.spec.ttlSecondsAfterFinished))",message="spec is frozen once the run has started; only spec.cancel may change"
type AgentRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AgentRunSpec `json:"spec,omitempty"`
	// +kubebuilder:default={}
	Status AgentRunStatus `json:"status,omitempty"`
}

// AgentRunList is a list of AgentRuns.
// +kubebuilder:object:root=true
type AgentRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRun `json:"items"`
}
