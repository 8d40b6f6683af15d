package agentrun

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// +kubebuilder:rbac:groups=farm.clawfarm.dev,resources=toolpolicies,verbs=get;list;watch

// toolPolicies are the namespace's ToolPolicies that select the run, as its
// next attempt pod carries them; why says why the run cannot start with
// them (a rule that does not compile, a set too big for the pod): a farm's
// policy the loop could not apply must not be skipped.
func (r *Reconciler) toolPolicies(ctx context.Context, run *farmv1.AgentRun) (set toolpolicy.Set, why string, err error) {
	var list farmv1.ToolPolicyList
	if err := r.List(ctx, &list, client.InNamespace(run.Namespace)); err != nil {
		return set, "", fmt.Errorf("list tool policies: %w", err)
	}
	set, err = attempt.ToolPolicySet(run, list.Items)
	if err != nil {
		return set, "the ToolPolicies that select this run cannot be applied: " + err.Error(), nil
	}
	return set, "", nil
}

// noteApproval mirrors the call the loop holds for a person
// (status.progress.approval) in the AwaitingApproval condition, with an
// Event when a request is new; the condition turns False once the loop
// holds nothing, or the run has no live attempt.
func (r *Reconciler) noteApproval(ctx context.Context, run *farmv1.AgentRun, live []*corev1.Pod) {
	st := &run.Status
	gen := run.Generation
	var a *farmv1.ApprovalRequest
	if st.Progress != nil && len(live) > 0 && !st.Phase.Finished() && st.Phase != farmv1.RunWaiting {
		a = st.Progress.Approval
	}
	c := conditions.Get(st.Conditions, farmv1.ConditionAwaitingApproval)
	if a == nil {
		if c != nil && c.Status == metav1.ConditionTrue {
			conditions.False(&st.Conditions, gen, farmv1.ConditionAwaitingApproval, farmv1.ReasonApprovalAnswered,
				"no tool call is waiting for approval")
		}
		return
	}
	var policies farmv1.ToolPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(run.Namespace)); err != nil {
		log.FromContext(ctx).Error(err, "list tool policies to check a held call; it is shown as unverified")
	}
	msg := approvalMessage(run, a, vouch(run, policies.Items, a), r.Config.Loop.TraceURL)
	isNew := c == nil || c.Status != metav1.ConditionTrue || !strings.HasPrefix(c.Message, approvalPrefix(a))
	conditions.True(&st.Conditions, gen, farmv1.ConditionAwaitingApproval, farmv1.ReasonApprovalRequested, msg)
	if isNew {
		r.ev().approvalRequested(run, msg)
	}
}

func approvalPrefix(a *farmv1.ApprovalRequest) string { return "request " + a.ID + ": " }

// voucher is what the manager can say of a held call the loop reports.
type voucher struct {
	known   bool   // a ToolPolicy selecting the run has the rule or webhook named
	message string // the rule's own message, or the webhook's as the loop reports it
	webhook bool
}

// vouch checks a held call against the ToolPolicies that select the run:
// the loop reports it, and a loop that is not the farm's could name any
// policy, rule and message, which a person would read as the farm's. A
// rule's message is taken from the rule; only a webhook's answer, which
// the manager cannot see, is the loop's word.
func vouch(run *farmv1.AgentRun, policies []farmv1.ToolPolicy, a *farmv1.ApprovalRequest) voucher {
	for i := range policies {
		p := &policies[i]
		if p.Name != a.Policy {
			continue
		}
		if ok, err := attempt.PolicySelects(p, run); err != nil || !ok {
			return voucher{}
		}
		if hook, ok := strings.CutPrefix(a.Rule, "webhook:"); ok {
			for _, w := range p.Spec.Webhooks {
				if w.Name == hook {
					return voucher{known: true, message: a.Message, webhook: true}
				}
			}
			return voucher{}
		}
		for _, rule := range p.Spec.Rules {
			if rule.Name == a.Rule && rule.Action == farmv1.ToolApprove {
				return voucher{known: true, message: rule.Message}
			}
		}
	}
	return voucher{}
}

// approvalMessage tells a person what waits, where to see the screen, and
// how to answer.
func approvalMessage(run *farmv1.AgentRun, a *farmv1.ApprovalRequest, v voucher, traceURL string) string {
	var b strings.Builder
	b.WriteString(approvalPrefix(a))
	if !v.known {
		fmt.Fprintf(&b, "the loop holds %s %s on turn %d for approval, naming ToolPolicy %q, rule %q, which no ToolPolicy selecting this run has: "+
			"the request is not the farm's; deny it unless you know why. ", a.Tool, a.Args, a.Turn, a.Policy, a.Rule)
	} else {
		fmt.Fprintf(&b, "%s %s on turn %d needs approval (ToolPolicy %s, rule %s", a.Tool, a.Args, a.Turn, a.Policy, a.Rule)
		switch {
		case v.webhook && v.message != "":
			fmt.Fprintf(&b, ", the webhook says: %q", v.message)
		case v.message != "":
			b.WriteString(": " + v.message)
		}
		b.WriteString("). ")
	}
	if traceURL != "" {
		fmt.Fprintf(&b, "The screen: %s/runs/%s/%s#attempt-%d, or kubectl claw trace %s -n %s. ",
			strings.TrimSuffix(traceURL, "/"), run.Namespace, run.Name, run.Status.Attempt, run.Name, run.Namespace)
	}
	fmt.Fprintf(&b, "Answer with kubectl claw approve %s -n %s, or kubectl claw deny %s -n %s --reason '…'", run.Name, run.Namespace, run.Name, run.Namespace)
	if a.DeadlineAt != "" {
		fmt.Fprintf(&b, ", by %s (then it is denied)", a.DeadlineAt)
	}
	return b.String()
}

func (r recorder) approvalRequested(run *farmv1.AgentRun, msg string) {
	r.warning(run, nil, farmv1.ReasonApprovalRequested, "AwaitApproval", "%s", msg)
}
