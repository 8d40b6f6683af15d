// Package toolpolicy is a farm's say over an agent's tool calls: the
// ToolPolicies that select a run, as the operator hands them to its loop
// (the setting CLAWFARM_TOOL_POLICIES), compiled and applied before every
// call. Rules are CEL expressions over the call and the latest screen,
// evaluated in the loop with no network call; webhooks are HTTPS endpoints
// for anything else. Within one policy the first matching rule decides;
// across policies the strongest decision wins (Block, then Approve, then
// Allow): a block is final. docs/tool-policies.md tells the whole of it.
//
// The package imports nothing of the operator's API: the manager converts
// its ToolPolicy objects into a Set, and the loop reads the Set back.
package toolpolicy

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Action is a rule's or a webhook's decision.
type Action string

// The actions, strongest first.
const (
	Block   Action = "Block"
	Approve Action = "Approve"
	Allow   Action = "Allow"
)

// strength orders actions: across policies the strongest wins.
func (a Action) strength() int {
	switch a {
	case Block:
		return 3
	case Approve:
		return 2
	case Allow:
		return 1
	}
	return 0
}

// The webhook events and failure policies, as the API names them.
const (
	EventBeforeToolCall = "BeforeToolCall"
	EventAfterToolCall  = "AfterToolCall"
	EventSessionEnd     = "SessionEnd"

	FailurePolicyFail   = "Fail"
	FailurePolicyIgnore = "Ignore"
)

// DefaultApprovalTimeoutSeconds is a policy's approval timeout when unset.
const DefaultApprovalTimeoutSeconds = 600

// ApprovalWaitsPerAttempt is how many full approval timeouts one attempt may
// spend waiting: the operator adds that much to the pod's hard deadline, and
// the loop denies a request once the attempt's waits have used it up.
const ApprovalWaitsPerAttempt = 4

// MaxSetBytes bounds the Set's JSON: it travels in one environment variable.
const MaxSetBytes = 128 << 10

// Set is every policy that selects a run, by name.
type Set struct {
	Policies []Policy `json:"policies"`
}

// Policy is one ToolPolicy.
type Policy struct {
	Name                   string    `json:"name"`
	Rules                  []Rule    `json:"rules,omitempty"`
	Webhooks               []Webhook `json:"webhooks,omitempty"`
	ApprovalTimeoutSeconds int       `json:"approvalTimeoutSeconds,omitempty"`
}

// Rule is one CEL rule.
type Rule struct {
	Name       string   `json:"name"`
	Tools      []string `json:"tools,omitempty"`
	Expression string   `json:"expression"`
	Action     Action   `json:"action"`
	Message    string   `json:"message,omitempty"`
}

// Webhook is one HTTPS endpoint; URL is resolved (a Service reference
// becomes https://<name>.<namespace>.svc:<port><path>).
type Webhook struct {
	Name           string   `json:"name"`
	URL            string   `json:"url"`
	CABundle       []byte   `json:"caBundle,omitempty"`
	Events         []string `json:"events,omitempty"`
	Tools          []string `json:"tools,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
	FailurePolicy  string   `json:"failurePolicy,omitempty"`
}

// ApprovalTimeout is the policy's approval timeout in seconds.
func (p Policy) ApprovalTimeout() int {
	if p.ApprovalTimeoutSeconds <= 0 {
		return DefaultApprovalTimeoutSeconds
	}
	return p.ApprovalTimeoutSeconds
}

// MayAskApproval reports whether a call may be held for approval under the
// set: a rule that approves, or a webhook asked before calls (its answer may).
func (s Set) MayAskApproval() bool {
	for _, p := range s.Policies {
		for _, r := range p.Rules {
			if r.Action == Approve {
				return true
			}
		}
		for _, w := range p.Webhooks {
			if w.on(EventBeforeToolCall) {
				return true
			}
		}
	}
	return false
}

// LongestApprovalTimeout is the longest approval timeout of the policies
// that may ask for approval, in seconds; 0 when none may.
func (s Set) LongestApprovalTimeout() int {
	if !s.MayAskApproval() {
		return 0
	}
	longest := 0
	for _, p := range s.Policies {
		longest = max(longest, p.ApprovalTimeout())
	}
	return longest
}

// Encode renders the set for the setting; it refuses a set too big for it.
func (s Set) Encode() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	if len(b) > MaxSetBytes {
		return "", fmt.Errorf("the tool policies that select the run take %d bytes, more than the %d a loop pod's setting holds: split them or select fewer", len(b), MaxSetBytes)
	}
	return string(b), nil
}

// Decode reads a set from the setting; empty is no policy.
func Decode(s string) (Set, error) {
	var set Set
	if s == "" {
		return set, nil
	}
	if err := json.Unmarshal([]byte(s), &set); err != nil {
		return Set{}, fmt.Errorf("tool policies: %w", err)
	}
	return set, nil
}

func (w Webhook) on(event string) bool {
	if len(w.Events) == 0 {
		return event == EventBeforeToolCall
	}
	return slices.Contains(w.Events, event)
}

func forTool(tools []string, tool string) bool {
	return len(tools) == 0 || slices.Contains(tools, tool)
}
