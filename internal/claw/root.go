// Package claw is `kubectl claw`, the kubectl plugin for clawfarm
// (cmd/kubectl-claw, docs/kubectl-claw.md): run an AgentRun from flags or a
// file and follow it turn by turn, wait for a run's outcome as an exit code,
// read an attempt's event stream as lines a person reads, cancel a run, and
// list the rigs with their queues. It speaks to the API server, as the
// operator's users do: it reads what the operator and the loop write in a
// run's status and the loop pod's log, and writes only AgentRuns. trace and
// ui read the trace server too, as the user, through the API server
// (server.go, token.go).
package claw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/term"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
)

// Options is what every command shares: the streams, the kubeconfig flags
// and, for tests, stand-ins for what a cluster's kubelets serve.
type Options struct {
	Streams genericiooptions.IOStreams
	Config  *genericclioptions.ConfigFlags

	// Logs serves pod logs; nil: the API server's pods/log.
	Logs LogSource
	// Poll is how often a followed run's status is read; 0: a second.
	Poll time.Duration
	// TTY says whether Out is a terminal; nil: ask the terminal.
	TTY *bool
	// Browser opens a file or URL; nil: the desktop's (xdg-open, open).
	Browser func(target string) error

	client client.Client
}

// LogSource opens the log of an attempt pod's loop container.
type LogSource interface {
	Stream(ctx context.Context, namespace, pod string, follow bool) (io.ReadCloser, error)
}

// exitError ends a command with an exit code. A message, when set, goes to
// stderr; outcome codes carry none (the outcome was printed already).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// Main runs kubectl claw with args and returns the process's exit code.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	o := &Options{Streams: streams}
	return o.Execute(ctx, args)
}

// Execute runs the command line args and returns the exit code.
func (o *Options) Execute(ctx context.Context, args []string) int {
	cmd := o.NewCommand()
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(o.Streams.ErrOut, "error: "+ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(o.Streams.ErrOut, "error: "+err.Error())
	return ExitError
}

// NewCommand is the root command, `kubectl claw`.
func (o *Options) NewCommand() *cobra.Command {
	if o.Config == nil {
		o.Config = genericclioptions.NewConfigFlags(true)
	}
	root := &cobra.Command{
		Use:   "kubectl-claw",
		Short: "Run and follow clawfarm AgentRuns on phone rigs",
		Long: `kubectl claw runs an AgentRun and follows it turn by turn, waits for a
run's outcome as an exit code, shows an attempt's log as readable lines,
cancels a run and lists the rigs with their queues. trace and ui show a
run's stored trace — screens and all — from the trace server.

Exit codes of run --wait, wait and cancel --wait:
  0 DONE or IDLE    1 FAIL       2 STUCK, no attempt left
  3 WAIT            4 Cancelled  5 other failure (InvalidConfig, timeouts…)
  6 --timeout       7 kubectl claw itself failed (flags, API, no such run)`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl claw",
		},
	}
	root.SetIn(o.Streams.In)
	root.SetOut(o.Streams.Out)
	root.SetErr(o.Streams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitError, msg: err.Error()}
	})
	o.Config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().DurationVar(&o.Poll, "poll-interval", time.Second, "how often a followed run's status is read")
	_ = root.PersistentFlags().MarkHidden("poll-interval")
	byRun := []*cobra.Command{o.newWaitCommand(), o.newLogsCommand(), o.newCancelCommand(), o.newApproveCommand(), o.newDenyCommand(), o.newTraceCommand()}
	for _, c := range byRun {
		c.ValidArgsFunction = o.completeRuns
	}
	root.AddCommand(o.newRunCommand(), o.newRigsCommand(), o.newUICommand(), o.newVersionCommand())
	root.AddCommand(byRun...)
	return root
}

// Scheme knows AgentRuns, DeviceRigs and the core kinds (pods).
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = farmv1.AddToScheme(s)
	return s
}

// Client is a client of the cluster the kubeconfig flags name.
func (o *Options) Client() (client.Client, error) {
	if o.client != nil {
		return o.client, nil
	}
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	o.client = c
	return c, nil
}

// Namespace is -n, else the kubeconfig context's namespace, else default.
// explicit reports whether -n was given.
func (o *Options) Namespace() (ns string, explicit bool, err error) {
	if o.Config.Namespace != nil && *o.Config.Namespace != "" {
		return *o.Config.Namespace, true, nil
	}
	ns, _, err = o.Config.ToRawKubeConfigLoader().Namespace()
	return ns, false, err
}

// logSource is the configured LogSource, else the API server's pods/log.
func (o *Options) logSource() (LogSource, error) {
	if o.Logs != nil {
		return o.Logs, nil
	}
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return apiLogs{cs}, nil
}

// apiLogs reads pod logs through the API server (the kubelet behind it).
// The core/v1 client alone: the whole clientset would double the binary.
type apiLogs struct{ cs corev1client.CoreV1Interface }

func (a apiLogs) Stream(ctx context.Context, namespace, pod string, follow bool) (io.ReadCloser, error) {
	return a.cs.Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: attempt.ContainerName, Follow: follow,
	}).Stream(ctx)
}

// isTTY reports whether Out is a terminal, where a progress bar may be drawn.
func (o *Options) isTTY() bool {
	if o.TTY != nil {
		return *o.TTY
	}
	f, ok := o.Streams.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// usageError is a mistake in the command line: exit code 7 with its message.
func usageError(format string, a ...any) error {
	return &exitError{code: ExitError, msg: fmt.Sprintf(format, a...)}
}
