package claw

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

type logsFlags struct {
	follow     bool
	attempt    int32
	raw        bool
	timestamps bool
	prompt     bool
}

func (o *Options) newLogsCommand() *cobra.Command {
	lf := &logsFlags{}
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Show an attempt's loop log as one line per turn",
		Long: `logs reads the loop pod's event stream (one JSON object per line, the
loop's stdout) of the run's latest attempt, or of --attempt N, and prints it
as one line per turn — the note, the tool call and what came back — with
session start, errors, compaction and the end of the session on lines of
their own. A line that is not a loop event is printed as it is. --raw
prints the JSON lines untouched.`,
		Example: `  kubectl claw logs set-a-timer
  kubectl claw logs set-a-timer -f
  kubectl claw logs set-a-timer --attempt 1 --raw | jq -c 'select(.type=="error")'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.logs(cmd.Context(), args[0], lf)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&lf.follow, "follow", "f", false, "keep reading as the loop writes (waits for the attempt's pod to start)")
	fl.Int32Var(&lf.attempt, "attempt", 0, "the counted attempt to read, from 1 (default: the latest; its last infrastructure retry)")
	fl.BoolVar(&lf.raw, "raw", false, "print the JSON lines as the loop wrote them")
	fl.BoolVar(&lf.timestamps, "timestamps", false, "prefix each line with the event's time (UTC)")
	fl.BoolVar(&lf.prompt, "show-prompt", false, "print the system prompt's text under its line (default: its hash and size)")
	return cmd
}

func (o *Options) logs(ctx context.Context, name string, lf *logsFlags) error {
	ns, _, err := o.Namespace()
	if err != nil {
		return err
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	src, err := o.logSource()
	if err != nil {
		return err
	}
	pod, err := o.attemptPod(ctx, c, ns, name, lf)
	if err != nil {
		return err
	}
	rc, err := src.Stream(ctx, ns, pod, lf.follow)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return &exitError{code: ExitError, msg: fmt.Sprintf("pod %s is gone, and its log with it", pod)}
		}
		return fmt.Errorf("log of pod %s: %w", pod, err)
	}
	defer rc.Close()
	if lf.raw {
		if _, err := io.Copy(o.Streams.Out, rc); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	r := &Renderer{Emit: func(s string) { fmt.Fprintln(o.Streams.Out, s) }, Timestamps: lf.timestamps, ShowPrompt: lf.prompt}
	err = scanLines(rc, r.Line)
	r.Flush()
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// attemptPod names the pod whose log is wanted: the run's newest attempt pod
// (or attempt N's newest: its last infrastructure retry), from the pods the
// run owns, else from status.attempts, which keeps the names of ended
// attempts (internal/attempt/pod.go:PodName: <run>-a<N>, <run>-a<N>-r<M>).
// Following, it waits for the run's first pod, and for the pod to start.
func (o *Options) attemptPod(ctx context.Context, c client.Client, ns, name string, lf *logsFlags) (string, error) {
	label := ""
	if lf.attempt > 0 {
		label = strconv.Itoa(int(lf.attempt))
	} else if lf.attempt < 0 {
		return "", usageError("--attempt counts from 1")
	}
	announced := false
	for {
		var run farmv1.AgentRun
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
			if apierrors.IsNotFound(err) {
				return "", &exitError{code: ExitError, msg: fmt.Sprintf("agentrun %s/%s not found", ns, name)}
			}
			return "", err
		}
		pods, err := attemptPods(ctx, c, &run, label)
		if err != nil {
			return "", err
		}
		var pod *corev1.Pod
		if len(pods) > 0 {
			pod = &pods[len(pods)-1]
		}
		recorded := ""
		for _, a := range run.Status.Attempts {
			if lf.attempt == 0 || a.Attempt == lf.attempt {
				recorded = a.Pod
			}
		}
		switch {
		case pod != nil && (!lf.follow || containerStarted(pod) || pod.DeletionTimestamp != nil):
			return pod.Name, nil
		case pod == nil && recorded != "":
			return recorded, nil
		case lf.attempt > 0 && (lf.attempt < run.Status.Attempt || run.Status.Phase.Finished()):
			return "", &exitError{code: ExitError, msg: fmt.Sprintf("run %s has no attempt %d (it is at attempt %d)", name, lf.attempt, run.Status.Attempt)}
		case !lf.follow:
			phase := run.Status.Phase
			if phase == "" {
				phase = farmv1.RunPending
			}
			return "", &exitError{code: ExitError, msg: fmt.Sprintf("run %s has no attempt pod yet (%s); -f waits for it", name, phase)}
		case run.Status.Phase.Finished() && pod == nil:
			return "", &exitError{code: ExitError, msg: fmt.Sprintf("run %s ended %s without an attempt pod", name, run.Status.Phase)}
		}
		if !announced {
			fmt.Fprintf(o.Streams.ErrOut, "waiting for run %s's attempt pod to start…\n", name)
			announced = true
		}
		poll := o.Poll
		if poll <= 0 {
			poll = time.Second
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(poll):
		}
	}
}
