package attempt

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// ToolPolicySet is what the loop gets of the namespace's ToolPolicies: those
// whose runSelector selects the run (none: every run), by name, compiled to
// be sure the loop can use them. The error says which policy and rule is
// wrong; the run cannot start with a farm's policy it cannot apply.
func ToolPolicySet(run *farmv1.AgentRun, all []farmv1.ToolPolicy) (toolpolicy.Set, error) {
	var set toolpolicy.Set
	sorted := append([]farmv1.ToolPolicy(nil), all...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i := range sorted {
		p := &sorted[i]
		ok, err := PolicySelects(p, run)
		if err != nil {
			return toolpolicy.Set{}, err
		}
		if !ok {
			continue
		}
		set.Policies = append(set.Policies, convertToolPolicy(p))
	}
	if _, err := toolpolicy.Compile(set); err != nil {
		return toolpolicy.Set{}, err
	}
	if _, err := set.Encode(); err != nil {
		return toolpolicy.Set{}, err
	}
	return set, nil
}

// PolicySelects reports whether the ToolPolicy applies to the run: same
// namespace, not being deleted, and its runSelector (none: every run)
// matches the run's labels.
func PolicySelects(p *farmv1.ToolPolicy, run *farmv1.AgentRun) (bool, error) {
	if p.Namespace != run.Namespace || p.DeletionTimestamp != nil {
		return false, nil
	}
	if sel := p.Spec.RunSelector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false, fmt.Errorf("ToolPolicy %s: runSelector: %w", p.Name, err)
		}
		return s.Matches(labels.Set(run.Labels)), nil
	}
	return true, nil
}

func convertToolPolicy(p *farmv1.ToolPolicy) toolpolicy.Policy {
	out := toolpolicy.Policy{Name: p.Name, ApprovalTimeoutSeconds: int(p.Spec.ApprovalTimeout())}
	for _, r := range p.Spec.Rules {
		out.Rules = append(out.Rules, toolpolicy.Rule{Name: r.Name, Tools: r.Tools, Expression: r.Expression,
			Action: toolpolicy.Action(r.Action), Message: r.Message})
	}
	for _, w := range p.Spec.Webhooks {
		hook := toolpolicy.Webhook{Name: w.Name, URL: w.ClientConfig.URL, CABundle: w.ClientConfig.CABundle, Tools: w.Tools,
			TimeoutSeconds: int(w.TimeoutSeconds), FailurePolicy: string(w.FailurePolicy)}
		if svc := w.ClientConfig.Service; svc != nil {
			port := svc.Port
			if port == 0 {
				port = 443
			}
			hook.URL = fmt.Sprintf("https://%s.%s.svc:%d%s", svc.Name, svc.Namespace, port, svc.Path)
		}
		for _, e := range w.Events {
			hook.Events = append(hook.Events, string(e))
		}
		out.Webhooks = append(out.Webhooks, hook)
	}
	return out
}

// CheckToolPolicy checks one ToolPolicy as an attempt would take it: its
// runSelector, every rule's CEL and every webhook compiled, and the policy
// small enough for a pod. The error names each thing that is wrong.
func CheckToolPolicy(p *farmv1.ToolPolicy) error {
	if sel := p.Spec.RunSelector; sel != nil {
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return fmt.Errorf("ToolPolicy %s: runSelector: %w", p.Name, err)
		}
	}
	set := toolpolicy.Set{Policies: []toolpolicy.Policy{convertToolPolicy(p)}}
	if _, err := toolpolicy.Compile(set); err != nil {
		return err
	}
	_, err := set.Encode()
	return err
}
