package claw

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// runFlags are `kubectl claw run`'s flags. A flag that is not given leaves
// its field to the file (-f) or to the API server's default, so a run made
// here is defaulted exactly as one applied with kubectl.
type runFlags struct {
	file     string
	rig      string
	selector string
	trigger  string

	provider      string
	model         string
	baseURL       string
	apiKeySecret  string
	contextWindow int32

	maxTurns        int32
	maxAttempts     int32
	maxInfraRetries int32
	queueTimeout    time.Duration
	attemptTimeout  time.Duration
	runTimeout      time.Duration

	skills        []string
	denyTools     []string
	queueMode     string
	maxChain      int32
	followUpDelay time.Duration
	ttl           time.Duration
	image         string
	sa            string
	labels        []string

	dryRun string
	wait   waitFlags
	out    *outputFlags
}

func (o *Options) newRunCommand() *cobra.Command {
	f := &runFlags{out: newOutputFlags(false)}
	cmd := &cobra.Command{
		Use:   "run NAME (--rig RIG | --selector k=v,...) --trigger TEXT --model NAME [flags] | run [NAME] -f FILE",
		Short: "Create an AgentRun, and with --wait follow it to its outcome",
		Example: `  # set a timer on iphone-01 and follow the run turn by turn
  kubectl claw run set-a-timer --rig iphone-01 --model gpt-4.1 \
    --api-key-secret model-key/api-key --trigger "Set a 5 minute timer in Clock and start it." --wait

  # any iOS rig, a local vLLM, at most 40 turns
  kubectl claw run wifi-off --selector platform=ios --model-provider openai-compatible \
    --base-url http://vllm.models.svc:8000/v1 --model qwen2.5-vl --max-turns 40 --trigger "Turn Wi-Fi off."

  # from a file (or - for stdin); flags given beside it override it
  kubectl claw run -f config/samples/farm_v1alpha1_agentrun.yaml --wait --timeout 10m

  # the name the API server generated, for a script
  run=$(kubectl claw run -f run.yaml -o name)`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "filename", "f", "", "an AgentRun as YAML or JSON; - reads stdin")
	fl.StringVar(&f.rig, "rig", "", "run on this DeviceRig (spec.rigRef)")
	fl.StringVar(&f.selector, "selector", "", "run on any Ready rig with these labels, k=v,... (spec.rigSelector)")
	fl.StringVar(&f.trigger, "trigger", "", "the opening message: what the agent is asked to do")
	fl.StringVar(&f.queueMode, "queue-mode", "", "queue (wait for a session of its own), collect (join the next session on the rig with other collect runs) or steer (join the rig's running session) (server default: queue)")
	fl.StringVar(&f.provider, "model-provider", "", "provider preset: openai, anthropic, qwen, moonshot, deepseek, google, openai-compatible (server default: openai)")
	fl.StringVar(&f.model, "model", "", "model name, as the provider spells it")
	fl.StringVar(&f.baseURL, "base-url", "", "the provider's base URL (required for openai-compatible)")
	fl.StringVar(&f.apiKeySecret, "api-key-secret", "", "the Secret key holding the API key, NAME/KEY")
	fl.Int32Var(&f.contextWindow, "context-window", 0, "input budget in tokens (server default: 128000)")
	fl.Int32Var(&f.maxTurns, "max-turns", 0, "turn limit of one attempt (server default: 300)")
	fl.Int32Var(&f.maxAttempts, "max-attempts", 0, "counted attempts (STUCK, crashes) the run may use (server default: 3)")
	fl.Int32Var(&f.maxInfraRetries, "max-infra-retries", 0, "free retries after infrastructure failures (server default: 5)")
	fl.DurationVar(&f.queueTimeout, "queue-timeout", 0, "fail the run after waiting this long for a rig; 0 waits forever (server default: 24h)")
	fl.DurationVar(&f.attemptTimeout, "attempt-timeout", 0, "session budget of one attempt (server default: 1h)")
	fl.DurationVar(&f.runTimeout, "run-timeout", 0, "fail the whole run after this long, queue included; 0: no limit")
	fl.StringSliceVar(&f.skills, "skill", nil, "a skill ConfigMap for this run (repeatable)")
	fl.StringSliceVar(&f.denyTools, "deny-tool", nil, "a tool the loop's policy blocks (repeatable, or comma-separated)")
	fl.Int32Var(&f.maxChain, "max-chain", 0, "WAIT follow-up runs one chain may have; 0 disables follow-ups (server default: 10)")
	fl.DurationVar(&f.followUpDelay, "follow-up-delay", 0, "a WAIT's follow-up delay when the agent chose none, whole minutes (server default: 15m)")
	fl.DurationVar(&f.ttl, "ttl", 0, "delete the run this long after it finished (spec.ttlSecondsAfterFinished)")
	fl.StringVar(&f.image, "image", "", "the loop image (default: the manager's --loop-image)")
	fl.StringVar(&f.sa, "service-account", "", "the loop pod's service account (default: the manager's)")
	fl.StringSliceVarP(&f.labels, "label", "l", nil, "a label k=v on the run (repeatable)")
	fl.StringVar(&f.dryRun, "dry-run", "none", `none, client or server, as kubectl's: client prints the AgentRun as YAML and sends nothing; server sends it for validation, defaulting and admission and prints what the API server would store; --dry-run alone is client`)
	fl.Lookup("dry-run").NoOptDefVal = "client"
	f.wait.addFlags(cmd, true)
	f.out.addFlags(cmd)
	_ = cmd.RegisterFlagCompletionFunc("rig", o.completeRigs)
	return cmd
}

func (o *Options) run(cmd *cobra.Command, f *runFlags, args []string) error {
	ns, explicitNS, err := o.Namespace()
	if err != nil {
		return err
	}
	run := &farmv1.AgentRun{}
	if f.file != "" {
		if run, err = readRun(f.file, o.Streams.In); err != nil {
			return usageError("%v", err)
		}
		switch {
		case run.Namespace == "":
			run.Namespace = ns
		case explicitNS && run.Namespace != ns:
			return usageError("the namespace in %s (%s) does not match -n %s", f.file, run.Namespace, ns)
		}
	} else {
		run.Namespace = ns
	}
	if len(args) == 1 {
		run.Name = args[0]
	}
	if run.Name == "" && run.GenerateName == "" {
		return usageError("give the run a NAME (or metadata.name in -f)")
	}
	if err := f.apply(cmd, run); err != nil {
		return usageError("%v", err)
	}
	if err := check(run); err != nil {
		return usageError("%v", err)
	}
	run.APIVersion, run.Kind = farmv1.GroupVersion.String(), "AgentRun"
	switch f.dryRun {
	case "none", "client", "server":
	default:
		return usageError("--dry-run=%s: want none, client or server", f.dryRun)
	}
	if f.dryRun != "none" && f.wait.wait {
		return usageError("--dry-run creates no run to --wait for")
	}
	if err := f.out.check(); err != nil {
		return err
	}
	if f.out.format() != "" && f.wait.wait {
		return usageError("--output prints the created run and --wait follows it: use one, then kubectl claw wait")
	}
	if f.dryRun == "client" {
		return o.printRun(run, f.out)
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	if f.dryRun == "server" {
		if err := c.Create(cmd.Context(), run, client.DryRunAll); err != nil {
			return err
		}
		return o.printRun(run, f.out)
	}
	if err := c.Create(cmd.Context(), run); err != nil {
		return err
	}
	if f.out.format() != "" {
		return f.out.printObject(o.Streams.Out, run)
	}
	fmt.Fprintf(o.Streams.Out, "agentrun.farm.clawfarm.dev/%s created\n", run.Name)
	if !f.wait.wait {
		return nil
	}
	return o.follow(cmd.Context(), run.Namespace, run.Name, f.wait)
}

// printRun prints a run that was not created: with -o, as -o says, else
// as YAML, its kind named (the client clears it on what a dry-run create
// returns).
func (o *Options) printRun(run *farmv1.AgentRun, out *outputFlags) error {
	run.APIVersion, run.Kind = farmv1.GroupVersion.String(), "AgentRun"
	if out.format() != "" {
		return out.printObject(o.Streams.Out, run)
	}
	b, err := yaml.Marshal(run)
	if err != nil {
		return err
	}
	_, err = o.Streams.Out.Write(b)
	return err
}

// readRun reads one AgentRun from a file, or stdin for "-". Unknown fields
// are refused, as kubectl's field validation would: a typo must not vanish.
func readRun(path string, stdin io.Reader) (*farmv1.AgentRun, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	var run farmv1.AgentRun
	if err := yaml.UnmarshalStrict(b, &run); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if run.Kind != "" && run.Kind != "AgentRun" {
		return nil, fmt.Errorf("%s holds a %s, not an AgentRun", path, run.Kind)
	}
	if run.APIVersion != "" && run.APIVersion != farmv1.GroupVersion.String() {
		return nil, fmt.Errorf("%s has apiVersion %s; kubectl claw speaks %s", path, run.APIVersion, farmv1.GroupVersion)
	}
	run.Status = farmv1.AgentRunStatus{}
	run.ResourceVersion, run.UID = "", ""
	return &run, nil
}

// apply sets the fields of the flags that were given.
func (f *runFlags) apply(cmd *cobra.Command, run *farmv1.AgentRun) error {
	set := cmd.Flags().Changed
	sp := &run.Spec
	if set("rig") && set("selector") {
		return fmt.Errorf("give --rig or --selector, not both")
	}
	if set("rig") {
		sp.RigRef, sp.RigSelector = &farmv1.RigReference{Name: f.rig}, nil
	}
	if set("selector") {
		m, err := labels.ConvertSelectorToLabelsMap(f.selector)
		if err != nil {
			return fmt.Errorf("--selector %q: %v (want k=v,...)", f.selector, err)
		}
		sp.RigRef, sp.RigSelector = nil, &farmv1.RigSelector{MatchLabels: m}
	}
	if set("trigger") {
		sp.Trigger = f.trigger
	}
	if set("queue-mode") {
		switch m := farmv1.QueueMode(f.queueMode); m {
		case farmv1.QueueModeQueue, farmv1.QueueModeCollect, farmv1.QueueModeSteer:
			sp.QueueMode = m
		default:
			return fmt.Errorf("--queue-mode %q: want queue, collect or steer", f.queueMode)
		}
	}
	if set("model-provider") {
		sp.Model.Provider = farmv1.ModelProvider(f.provider)
	}
	if set("model") {
		sp.Model.Name = f.model
	}
	if set("base-url") {
		sp.Model.BaseURL = f.baseURL
	}
	if set("api-key-secret") {
		name, key, ok := strings.Cut(f.apiKeySecret, "/")
		if !ok || name == "" || key == "" || strings.Contains(key, "/") {
			return fmt.Errorf("--api-key-secret %q: want NAME/KEY, e.g. model-key/api-key", f.apiKeySecret)
		}
		sp.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	if set("context-window") {
		sp.Model.ContextWindow = f.contextWindow
	}
	if set("max-turns") {
		sp.Limits.MaxTurns = f.maxTurns
	}
	if set("max-attempts") {
		sp.Limits.MaxAttempts = f.maxAttempts
	}
	if set("max-infra-retries") {
		sp.Limits.MaxInfraRetries = ptr(f.maxInfraRetries)
	}
	var err error
	seconds := func(flag string, d time.Duration) int32 {
		if err == nil && (d < 0 || d%time.Second != 0) {
			err = fmt.Errorf("--%s %s: want whole seconds, 0 or more", flag, d)
		}
		return int32(d / time.Second)
	}
	if set("queue-timeout") {
		sp.Limits.QueueTimeoutSeconds = ptr(seconds("queue-timeout", f.queueTimeout))
	}
	if set("attempt-timeout") {
		sp.Limits.AttemptTimeoutSeconds = seconds("attempt-timeout", f.attemptTimeout)
	}
	if set("run-timeout") {
		sp.Limits.RunTimeoutSeconds = seconds("run-timeout", f.runTimeout)
	}
	if set("ttl") {
		sp.TTLSecondsAfterFinished = ptr(seconds("ttl", f.ttl))
	}
	if err != nil {
		return err
	}
	if set("skill") {
		sp.Skills = nil
		for _, s := range f.skills {
			sp.Skills = append(sp.Skills, farmv1.SkillSource{ConfigMapName: s})
		}
	}
	if set("deny-tool") {
		sp.DenyTools = f.denyTools
	}
	if set("max-chain") {
		sp.FollowUp.MaxChain = ptr(f.maxChain)
	}
	if set("follow-up-delay") {
		if f.followUpDelay <= 0 || f.followUpDelay%time.Minute != 0 {
			return fmt.Errorf("--follow-up-delay %s: want whole minutes, at least 1m", f.followUpDelay)
		}
		sp.FollowUp.DefaultDelayMinutes = int32(f.followUpDelay / time.Minute)
	}
	if set("image") || set("service-account") {
		if sp.Pod == nil {
			sp.Pod = &farmv1.PodOverrides{}
		}
		if set("image") {
			sp.Pod.Image = f.image
		}
		if set("service-account") {
			sp.Pod.ServiceAccountName = f.sa
		}
	}
	if set("label") {
		m, err := labels.ConvertSelectorToLabelsMap(strings.Join(f.labels, ","))
		if err != nil {
			return fmt.Errorf("--label: %v (want k=v)", err)
		}
		if run.Labels == nil {
			run.Labels = map[string]string{}
		}
		for k, v := range m {
			run.Labels[k] = v
		}
	}
	return nil
}

// check names what the API server would refuse for lack of a flag, in the
// flags' words. Everything else (lengths, patterns, the provider's base URL)
// the API server's schema checks and says.
func check(run *farmv1.AgentRun) error {
	var missing []string
	if run.Spec.RigRef == nil && run.Spec.RigSelector == nil {
		missing = append(missing, "--rig RIG or --selector k=v")
	}
	if run.Spec.Trigger == "" {
		missing = append(missing, "--trigger TEXT")
	}
	if run.Spec.Model.Name == "" {
		missing = append(missing, "--model NAME")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the run needs %s", strings.Join(missing, ", "))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
