package claw

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

func (o *Options) newApproveCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "approve RUN",
		Short: "Approve the tool call a run's loop holds for a person (AwaitingApproval)",
		Long: `approve answers the run's open approval request (status.progress.approval,
shown by the AwaitingApproval condition): the loop runs the held call and
the session goes on. The answer names you, as the API server knows you: an
admission policy refuses an answer in anyone else's name, and the trace
records who answered.`,
		Example: `  kubectl claw approve buy-coffee
  kubectl claw approve buy-coffee --reason "the order is expected"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.answerApproval(cmd.Context(), args[0], contract.Approve, reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the trace")
	return cmd
}

func (o *Options) newDenyCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "deny RUN [--reason TEXT]",
		Short: "Deny the tool call a run's loop holds for a person (AwaitingApproval)",
		Long: `deny answers the run's open approval request with no: the call does not
run, and the model reads "denied by <you>: <reason>" as its result, then
does what it will (another way, or FAIL). A denied call counts toward the
run's maxErrors.`,
		Example: `  kubectl claw deny buy-coffee --reason "wrong card"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.answerApproval(cmd.Context(), args[0], contract.Deny, reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; the model reads it")
	return cmd
}

// answerApproval writes the answer annotations (contract.AnnotationApproval
// and the two beside it) on the run, as
//
//	kubectl annotate ar RUN farm.clawfarm.dev/approval=Approve/<id> \
//	  farm.clawfarm.dev/approved-by=<you> farm.clawfarm.dev/approval-reason=… --overwrite
//
// does, with the open request's id and the caller's name from a
// SelfSubjectReview.
func (o *Options) answerApproval(ctx context.Context, name string, decision contract.Decision, reason string) error {
	ns, _, err := o.Namespace()
	if err != nil {
		return err
	}
	c, run, err := o.getRun(ctx, ns, name)
	if err != nil {
		return err
	}
	var req *farmv1.ApprovalRequest
	if p := run.Status.Progress; p != nil && !run.Status.Phase.Finished() {
		req = p.Approval
	}
	if req == nil {
		return &exitError{code: ExitError, msg: fmt.Sprintf("agentrun %s/%s has no tool call waiting for approval", ns, name)}
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return fmt.Errorf("who are you? the API server's SelfSubjectReview: %w", err)
	}
	user := review.Status.UserInfo.Username
	ann := map[string]any{
		contract.AnnotationApproval:       contract.ApprovalAnswer(decision, req.ID),
		contract.AnnotationApprovedBy:     user,
		contract.AnnotationApprovalReason: nil,
	}
	if reason != "" {
		ann[contract.AnnotationApprovalReason] = reason
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, body)); err != nil {
		return err
	}
	verb := map[contract.Decision]string{contract.Approve: "approved", contract.Deny: "denied"}[decision]
	fmt.Fprintf(o.Streams.Out, "agentrun.farm.clawfarm.dev/%s: %s %s on turn %d (request %s) as %s\n", name, verb, req.Tool, req.Turn, req.ID, user)
	return nil
}
