package claw

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// waitFlags are the flags of everything that waits for an outcome.
type waitFlags struct {
	wait      bool
	timeout   time.Duration
	followUps bool
	quiet     bool
}

func (w *waitFlags) addFlags(cmd *cobra.Command, withWait bool) {
	fl := cmd.Flags()
	if withWait {
		fl.BoolVar(&w.wait, "wait", false, "follow the run to its outcome and exit with its code")
	}
	fl.DurationVar(&w.timeout, "timeout", 0, "give up waiting after this long (exit 6); 0 waits as long as the run takes")
	fl.BoolVar(&w.followUps, "follow-ups", false, "after a WAIT, follow the follow-up run (and its own), and exit with the chain's last outcome")
	fl.BoolVarP(&w.quiet, "quiet", "q", false, "print no live lines, only the outcome")
}

func (o *Options) newWaitCommand() *cobra.Command {
	w := &waitFlags{}
	cmd := &cobra.Command{
		Use:   "wait RUN",
		Short: "Follow a run to its outcome and exit with its code",
		Long: `wait follows a run to its outcome: one line per turn (from the loop pod's
log, or from status.progress when the log cannot be read), a progress bar on
a terminal, then the sentinel, the recap and an exit code (see kubectl claw
--help). A run that has already ended returns at once.`,
		Example: `  kubectl claw wait set-a-timer --timeout 15m && echo done
  kubectl claw wait ask-ana --follow-ups -q; echo "exit $?"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, _, err := o.Namespace()
			if err != nil {
				return err
			}
			return o.follow(cmd.Context(), ns, args[0], *w)
		},
	}
	w.addFlags(cmd, false)
	return cmd
}

// follow waits for the run (and with --follow-ups its chain) and ends with
// the outcome's exit code.
func (o *Options) follow(ctx context.Context, ns, name string, w waitFlags) error {
	c, err := o.Client()
	if err != nil {
		return err
	}
	parent := ctx
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	f := &follower{
		c:      c,
		p:      &printer{w: o.Streams.Out, tty: o.isTTY() && !w.quiet},
		poll:   o.Poll,
		quiet:  w.quiet,
		chain:  w.followUps,
		errOut: o.Streams.ErrOut,
	}
	if f.poll <= 0 {
		f.poll = time.Second
	}
	if !w.quiet {
		f.logs, _ = o.logSource() // without one, the lines come from status.progress
	}
	for {
		out, err := f.one(ctx, ns, name)
		switch {
		case err == nil:
		case parent.Err() != nil:
			return &exitError{code: 130, msg: fmt.Sprintf("interrupted; run %s goes on (kubectl claw wait %s)", name, name)}
		case ctx.Err() != nil:
			return &exitError{code: ExitTimeout, msg: fmt.Sprintf("timed out after %s waiting for run %s (%s)", w.timeout, name, f.lastPhase)}
		default:
			return err
		}
		if w.followUps && out.Code == ExitWait && out.FollowUp != "" {
			f.p.Line(fmt.Sprintf("→ follow-up run %s", out.FollowUp))
			name = out.FollowUp
			continue
		}
		if out.Code == ExitSucceeded {
			return nil
		}
		return &exitError{code: out.Code}
	}
}

// follower follows one run at a time.
type follower struct {
	c      client.Client
	logs   LogSource
	p      *printer
	poll   time.Duration
	quiet  bool
	chain  bool // follow WAIT follow-ups: a Waiting run is not the end
	errOut io.Writer

	lastPhase farmv1.RunPhase
}

// one follows run ns/name until its outcome (or, following the chain, until
// its follow-up exists), printing its turns, and returns the outcome.
func (f *follower) one(ctx context.Context, ns, name string) (Outcome, error) {
	var (
		streams   = &logStreams{p: f.p, started: map[string]int{}}
		lastKey   string
		lastTurn  int32
		firstSeen = true
		run       farmv1.AgentRun
	)
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	for {
		if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
			if apierrors.IsNotFound(err) {
				if firstSeen {
					return Outcome{}, &exitError{code: ExitError, msg: fmt.Sprintf("agentrun %s/%s not found", ns, name)}
				}
				return Outcome{}, &exitError{code: ExitError, msg: fmt.Sprintf("agentrun %s/%s was deleted while it was followed", ns, name)}
			}
			if ctx.Err() != nil {
				return Outcome{}, ctx.Err()
			}
			return Outcome{}, err
		}
		f.lastPhase = run.Status.Phase
		out := OutcomeOf(&run)
		end := out.Final && !(f.chain && out.Code == ExitWait && out.Phase == farmv1.RunWaiting)
		if end {
			if !firstSeen {
				streams.drain(5 * time.Second) // the pod has ended: its log ends too
			}
			stopStreams()
			f.p.ClearBar()
			f.finalLines(&run, out)
			return out, nil
		}
		firstSeen = false

		if key := phaseKey(&run); key != lastKey && !f.quiet {
			lastKey = key
			f.p.Line(phaseLine(&run))
		}
		if f.logs != nil {
			streams.startNew(streamCtx, f.c, f.logs, &run)
		}
		if pr := run.Status.Progress; pr != nil && pr.Turn != lastTurn && !f.quiet {
			if pr.Turn > lastTurn && !streams.active() && pr.LastNote != "" {
				f.p.Line(fmt.Sprintf("t%-3d note: %s", pr.Turn, oneLine(pr.LastNote, 160)))
			}
			lastTurn = pr.Turn
		}
		f.p.Bar(barLine(&run))

		select {
		case <-ctx.Done():
			stopStreams()
			f.p.ClearBar()
			return Outcome{}, ctx.Err()
		case <-time.After(f.poll):
		}
	}
}

// finalLines are the sentinel with the recap, and the run's outcome.
func (f *follower) finalLines(run *farmv1.AgentRun, out Outcome) {
	st := &run.Status
	if st.Sentinel != "" {
		line := st.Sentinel
		if st.Recap != "" {
			line += "  " + oneLine(st.Recap, 600)
		}
		f.p.Line(line)
	}
	line := run.Name + ": " + out.describe()
	var facts []string
	if n := len(st.Attempts); n > 0 {
		facts = append(facts, fmt.Sprintf("%d attempt pod%s", n, plural(n)))
	}
	if u := st.Usage; u != nil && u.PromptTokens+u.CompletionTokens > 0 {
		facts = append(facts, usage(u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.Cost))
	}
	if st.StartTime != nil && st.CompletionTime != nil {
		if d := st.CompletionTime.Sub(st.StartTime.Time).Round(time.Second); d > 0 {
			facts = append(facts, d.String())
		}
	}
	for i, s := range facts {
		if i == 0 {
			line += "  ·  "
		} else {
			line += ", "
		}
		line += s
	}
	f.p.Line(line)
	if out.Message != "" {
		f.p.Line("  " + oneLine(out.Message, 600))
	}
	if out.Phase == farmv1.RunWaiting {
		if fu := st.FollowUp; fu != nil && fu.FireTime != nil {
			f.p.Line(fmt.Sprintf("  follow-up at %s (CronJob %s); --follow-ups follows it", fu.FireTime.UTC().Format(time.RFC3339), fu.CronJob))
		}
	}
}

// phaseKey changes when a line about the run's phase is due.
func phaseKey(run *farmv1.AgentRun) string {
	st := &run.Status
	return fmt.Sprintf("%s/%d/%d/%s", st.Phase, st.Attempt, st.InfraRetries, st.Rig)
}

// phaseLine says where the run is, in the operator's words.
func phaseLine(run *farmv1.AgentRun) string {
	st := &run.Status
	phase := st.Phase
	if phase == "" {
		phase = farmv1.RunPending
	}
	s := "· " + string(phase)
	cond := func(t string) string {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil && c.Message != "" {
			return ": " + oneLine(c.Message, 200)
		}
		return ""
	}
	switch phase {
	case farmv1.RunQueued:
		s += cond(farmv1.ConditionRigLeased)
	case farmv1.RunRunning:
		if st.Rig != "" {
			s += " on " + st.Rig
		}
		if st.Attempt > 0 {
			s += fmt.Sprintf(", attempt %d of %d", st.Attempt, run.Spec.Limits.MaxAttempts)
		}
		if st.InfraRetries > 0 {
			s += fmt.Sprintf(" (%d infrastructure retr%s)", st.InfraRetries, map[bool]string{true: "y", false: "ies"}[st.InfraRetries == 1])
		}
	case farmv1.RunRetrying:
		s += cond(farmv1.ConditionSucceeded)
		if t := st.NextAttemptTime; t != nil {
			s += "; next attempt at " + t.UTC().Format("15:04:05")
		}
	case farmv1.RunWaiting:
		if fu := st.FollowUp; fu != nil && fu.FireTime != nil {
			s += ": follow-up at " + fu.FireTime.UTC().Format(time.RFC3339)
		}
	}
	return s
}

// barLine is the progress bar: turn of maxTurns, phase, rig, attempt.
func barLine(run *farmv1.AgentRun) string {
	st := &run.Status
	var turn int32
	if pr := st.Progress; pr != nil && (pr.Attempt == 0 || pr.Attempt == st.Attempt) {
		turn = pr.Turn
	}
	s := progressBar(turn, run.Spec.Limits.MaxTurns) + "  " + string(st.Phase)
	if st.Rig != "" {
		s += " on " + st.Rig
	}
	if st.Attempt > 0 {
		s += fmt.Sprintf("  attempt %d", st.Attempt)
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// logStreams reads the log of each attempt pod of a followed run as it
// starts, rendering it through one Renderer per pod.
type logStreams struct {
	p       *printer
	mu      sync.Mutex
	started map[string]int // pod → tries (maxLogTries: given up, status.progress speaks)
	live    int
	wg      sync.WaitGroup
}

const maxLogTries = 3

func (s *logStreams) active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live > 0
}

// startNew opens the log of every attempt pod of the run that has started
// and is not read yet, oldest first.
func (s *logStreams) startNew(ctx context.Context, c client.Client, logs LogSource, run *farmv1.AgentRun) {
	pods, err := attemptPods(ctx, c, run, "")
	if err != nil {
		return
	}
	for i := range pods {
		pod := &pods[i]
		if !containerStarted(pod) {
			continue
		}
		s.mu.Lock()
		tries, seen := s.started[pod.Name]
		if seen && (tries < 0 || tries >= maxLogTries) {
			s.mu.Unlock()
			continue
		}
		s.started[pod.Name] = -1 // being read
		s.live++
		s.mu.Unlock()
		s.wg.Add(1)
		go s.read(ctx, logs, pod.Namespace, pod.Name, tries)
	}
}

func (s *logStreams) read(ctx context.Context, logs LogSource, ns, pod string, tries int) {
	defer s.wg.Done()
	rc, err := logs.Stream(ctx, ns, pod, true)
	if err != nil {
		s.mu.Lock()
		s.started[pod] = tries + 1 // try again at the next poll
		s.live--
		s.mu.Unlock()
		return
	}
	defer rc.Close()
	r := &Renderer{Emit: s.p.Line}
	_ = scanLines(rc, r.Line)
	r.Flush()
	s.mu.Lock()
	s.live--
	s.mu.Unlock()
}

// drain waits up to d for the open logs to end.
func (s *logStreams) drain(d time.Duration) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// scanLines calls line for every line of r, however long: a tool result
// carries up to 2000 characters of text, JSON-escaped, and a log line of
// another program may be longer still.
func scanLines(r io.Reader, line func([]byte)) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			line(b)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// attemptPods lists the run's attempt pods (labels farm.clawfarm.dev/run
// and kind=attempt, owned by this run: not an earlier run of the same name),
// oldest first; attemptLabel, when set, keeps one attempt's pods.
func attemptPods(ctx context.Context, c client.Client, run *farmv1.AgentRun, attemptLabel string) ([]corev1.Pod, error) {
	sel := client.MatchingLabels{farmv1.LabelRun: run.Name, farmv1.LabelKind: "attempt"}
	if attemptLabel != "" {
		sel[farmv1.LabelAttempt] = attemptLabel
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(run.Namespace), sel); err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if owned(&p, run.UID) {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return pods[i].Name < pods[j].Name
	})
	return pods, nil
}

func owned(p *corev1.Pod, uid types.UID) bool {
	if len(p.OwnerReferences) == 0 {
		return true // a pod the test or a person made by hand: take its labels' word
	}
	for _, r := range p.OwnerReferences {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// containerStarted reports whether the pod's log can be read: its loop
// container has run or runs.
func containerStarted(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true
		}
	}
	return false
}
