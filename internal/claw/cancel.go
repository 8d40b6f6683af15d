package claw

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func (o *Options) newCancelCommand() *cobra.Command {
	w := &waitFlags{}
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run (spec.cancel): its pod is stopped gracefully, its rig released",
		Long: `cancel sets spec.cancel on the run, the one field of a started run's spec
that may change, and cannot be undone. The operator stops a live attempt
pod gracefully (the loop ends at its next safe point), releases the rig,
deletes a Waiting run's follow-up CronJob, and moves the run to Cancelled.
A run that has already ended is left as it is. --wait follows the run until
the operator has done so, and exits with its code (4 when Cancelled).`,
		Example: `  kubectl claw cancel set-a-timer
  kubectl claw cancel ask-ana --wait --timeout 2m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, _, err := o.Namespace()
			if err != nil {
				return err
			}
			if err := o.cancel(cmd.Context(), ns, args[0]); err != nil {
				return err
			}
			if !w.wait {
				return nil
			}
			return o.follow(cmd.Context(), ns, args[0], *w)
		},
	}
	w.addFlags(cmd, true)
	return cmd
}

// cancel sets spec.cancel with a JSON merge patch, as
// `kubectl patch ar RUN --type merge -p '{"spec":{"cancel":true}}'` does
// (api/v1alpha1/agentrun_types.go: AgentRunSpec.Cancel; the controller reads
// it in controllers/agentrun/stop.go).
func (o *Options) cancel(ctx context.Context, ns, name string) error {
	c, run, err := o.getRun(ctx, ns, name)
	if err != nil {
		return err
	}
	switch {
	case run.Status.Phase.Finished():
		fmt.Fprintf(o.Streams.Out, "agentrun.farm.clawfarm.dev/%s already ended (%s); nothing to cancel\n", name, OutcomeOf(run).describe())
		return nil
	case run.Spec.Cancel:
		fmt.Fprintf(o.Streams.Out, "agentrun.farm.clawfarm.dev/%s is already being cancelled\n", name)
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	if err := c.Patch(ctx, run, patch); err != nil {
		return err
	}
	fmt.Fprintf(o.Streams.Out, "agentrun.farm.clawfarm.dev/%s cancel requested\n", name)
	return nil
}

// getRun reads a run; a run that does not exist is an error that says so
// (exit 1).
func (o *Options) getRun(ctx context.Context, ns, name string) (client.Client, *farmv1.AgentRun, error) {
	c, err := o.Client()
	if err != nil {
		return nil, nil, err
	}
	var run farmv1.AgentRun
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &exitError{code: ExitError, msg: fmt.Sprintf("agentrun %s/%s not found", ns, name)}
		}
		return nil, nil, err
	}
	return c, &run, nil
}
