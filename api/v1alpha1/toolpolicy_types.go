package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ToolAction is what a rule or a webhook decides for a tool call.
// +kubebuilder:validation:Enum=Block;Approve;Allow
type ToolAction string

// The actions, weakest last: across policies the strongest decision wins
// (a block is final); within one policy the first matching rule decides.
const (
	// ToolBlock refuses the call; the model reads the message as its result.
	ToolBlock ToolAction = "Block"
	// ToolApprove pauses the session until a person answers (kubectl claw
	// approve / deny); no answer within approvalTimeoutSeconds is a deny.
	ToolApprove ToolAction = "Approve"
	// ToolAllow lets the call run and ends the policy's rule list (an exception
	// to a broader rule below it).
	ToolAllow ToolAction = "Allow"
)

// ToolRule is one rule, evaluated in the loop with no network call.
type ToolRule struct {
	// Name identifies the rule in the model's message, the run's status and
	// the trace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Tools limits the rule to these tools; empty: every tool.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	Tools []string `json:"tools,omitempty"`

	// Expression is a CEL expression that is true when the rule applies.
	// Variables: tool (string), args (map, the call's arguments), screen
	// (list of the latest listing's elements: id, kind, label, bbox
	// [left,top,right,bottom], conf), targets (the elements of screen under
	// the point the gesture acts at: its bbox centre; every step's for a
	// sequence), text (the text a send_to_clipboard call or step carries).
	// Example: targets.exists(e, e.label.matches('(?i)pay|buy|send')).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Expression string `json:"expression"`

	// Action when the expression is true.
	Action ToolAction `json:"action"`

	// Message is what the model reads when the call is blocked or denied,
	// and what the approver reads.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// ToolHookEvent is a point in the session a webhook is called at.
// +kubebuilder:validation:Enum=BeforeToolCall;AfterToolCall;SessionEnd
type ToolHookEvent string

// The webhook events: only BeforeToolCall's answer is read; the others observe.
const (
	HookBeforeToolCall ToolHookEvent = "BeforeToolCall"
	HookAfterToolCall  ToolHookEvent = "AfterToolCall"
	HookSessionEnd     ToolHookEvent = "SessionEnd"
)

// WebhookFailurePolicy is what a webhook that cannot be called or answers
// nonsense means, as Kubernetes admission webhooks define it.
// +kubebuilder:validation:Enum=Fail;Ignore
type WebhookFailurePolicy string

// The failure policies.
const (
	// WebhookFail blocks the call (BeforeToolCall) when the webhook fails.
	WebhookFail WebhookFailurePolicy = "Fail"
	// WebhookIgnore lets the call run when the webhook fails.
	WebhookIgnore WebhookFailurePolicy = "Ignore"
)

// ToolWebhookService is an in-cluster Service the loop calls over HTTPS at
// https://<name>.<namespace>.svc:<port><path>.
type ToolWebhookService struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	Path string `json:"path,omitempty"`
	// +kubebuilder:default=443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// ToolWebhookClientConfig says how the loop reaches a webhook: exactly one
// of url and service, always HTTPS.
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.service)",message="set exactly one of clientConfig.url and clientConfig.service"
type ToolWebhookClientConfig struct {
	// URL of the webhook, https only.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https://[^/\s]+(/\S*)?$`
	// +optional
	URL string `json:"url,omitempty"`
	// Service is an in-cluster Service.
	// +optional
	Service *ToolWebhookService `json:"service,omitempty"`
	// CABundle is the PEM bundle the webhook's serving certificate is checked
	// against; empty: the loop's system roots.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
}

// ToolWebhook is an HTTPS endpoint called around tool calls.
type ToolWebhook struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	ClientConfig ToolWebhookClientConfig `json:"clientConfig"`

	// Events the webhook is called at.
	// +kubebuilder:default={BeforeToolCall}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +optional
	Events []ToolHookEvent `json:"events,omitempty"`

	// Tools limits the webhook to these tools; empty: every tool.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	Tools []string `json:"tools,omitempty"`

	// TimeoutSeconds bounds one call.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=30
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// FailurePolicy: Fail blocks the tool call when the webhook cannot be
	// called, times out or answers nonsense; Ignore lets it run.
	// +kubebuilder:default=Fail
	// +optional
	FailurePolicy WebhookFailurePolicy `json:"failurePolicy,omitempty"`
}

// ToolPolicySpec is a farm's say over the tool calls of the runs it selects.
type ToolPolicySpec struct {
	// RunSelector selects the AgentRuns of the namespace the policy applies
	// to, by label; empty or unset: every run of the namespace.
	// +optional
	RunSelector *metav1.LabelSelector `json:"runSelector,omitempty"`

	// Rules, in order: the first whose tools and expression match decides.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Rules []ToolRule `json:"rules,omitempty"`

	// Webhooks, called in order after the rules, unless a rule blocked.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	// +optional
	Webhooks []ToolWebhook `json:"webhooks,omitempty"`

	// ApprovalTimeoutSeconds is how long a call that needs approval waits for
	// an answer; none in time is a deny.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ApprovalTimeoutSeconds int32 `json:"approvalTimeoutSeconds,omitempty"`
}

// DefaultApprovalTimeoutSeconds is ApprovalTimeoutSeconds when unset.
const DefaultApprovalTimeoutSeconds int32 = 600

// ApprovalTimeout is ApprovalTimeoutSeconds, or its default when unset.
func (s ToolPolicySpec) ApprovalTimeout() int32 {
	if s.ApprovalTimeoutSeconds <= 0 {
		return DefaultApprovalTimeoutSeconds
	}
	return s.ApprovalTimeoutSeconds
}

// ToolPolicyStatus says whether the policy can be applied, as the loop
// would compile it.
type ToolPolicyStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is True (reason Compiled) when every rule's CEL,
	// every webhook and the runSelector are valid, False (reason
	// InvalidPolicy, the message naming each error) when not — a run the
	// policy selects then fails InvalidConfig instead of starting. Stalled,
	// which kstatus reads, is True with Ready False.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Rules and Webhooks count what the policy holds.
	// +optional
	Rules int32 `json:"rules,omitempty"`
	// +optional
	Webhooks int32 `json:"webhooks,omitempty"`
}

// ToolPolicy blocks, allows or sends for approval the tool calls of the
// AgentRuns it selects: CEL rules the loop evaluates, and webhooks it calls.
// An attempt takes the policies that select its run when its pod is made.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp,categories=clawfarm
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Rules",type=integer,JSONPath=`.status.rules`
// +kubebuilder:printcolumn:name="Webhooks",type=integer,JSONPath=`.status.webhooks`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ToolPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ToolPolicySpec `json:"spec,omitempty"`
	// +optional
	Status ToolPolicyStatus `json:"status,omitempty"`
}

// ToolPolicyList is a list of ToolPolicies.
// +kubebuilder:object:root=true
type ToolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolPolicy `json:"items"`
}
