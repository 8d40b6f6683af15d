package claw

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/rignode"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// These tests run kubectl claw's commands, flags and all, against a real API
// server and etcd (envtest) with clawfarm's CRDs. No operator runs there:
// the tests play it, writing each run's status as the controller would
// (internal/attempt/lifecycle.go:Apply, controllers/agentrun/record.go,
// followup.go, stop.go), and play the kubelet's log with a LogSource.

var (
	env        *testenv.Env
	kubeconfig string
)

func TestMain(m *testing.M) {
	// The test binary is also rignode's shim and the program of the pod
	// that stands in for the trace server (server_test.go).
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(rignode.RunShim(os.Args[2:]))
	}
	if target := os.Getenv(proxyPodTarget); target != "" {
		os.Exit(proxyPod(target, os.Getenv(proxyPodListen)))
	}
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		dir, err := os.MkdirTemp("", "claw-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		kc, err := env.Kubeconfig("claw-user")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	env.Stop()
	os.Exit(code)
}

// fakeLogs serves pod logs from memory and records which pods were asked for.
type fakeLogs struct {
	mu    sync.Mutex
	logs  map[string][]byte
	asked []string
}

func (f *fakeLogs) Stream(_ context.Context, ns, pod string, _ bool) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, ns+"/"+pod)
	b, ok := f.logs[pod]
	if !ok {
		return nil, fmt.Errorf("container loop in pod %s is waiting to start", pod)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// cli is one invocation of kubectl claw.
type cli struct {
	out, errOut *testenv.SyncBuffer
	code        int
	took        time.Duration
}

func claw(t *testing.T, ns string, stdin io.Reader, logs LogSource, args ...string) *cli {
	t.Helper()
	c := &cli{out: &testenv.SyncBuffer{}, errOut: &testenv.SyncBuffer{}}
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	tty := false
	o := &Options{Logs: logs, TTY: &tty}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = stdin, c.out, c.errOut
	full := append([]string{"--kubeconfig", kubeconfig, "-n", ns, "--poll-interval", "50ms"}, args...)
	start := time.Now()
	c.code = o.Execute(context.Background(), full)
	c.took = time.Since(start)
	return c
}

// clawAsync starts kubectl claw and returns at once; wait for it with done.
func clawAsync(t *testing.T, ns string, logs LogSource, args ...string) (*cli, <-chan struct{}) {
	t.Helper()
	c := &cli{out: &testenv.SyncBuffer{}, errOut: &testenv.SyncBuffer{}}
	done := make(chan struct{})
	tty := false
	o := &Options{Logs: logs, TTY: &tty}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = strings.NewReader(""), c.out, c.errOut
	full := append([]string{"--kubeconfig", kubeconfig, "-n", ns, "--poll-interval", "50ms"}, args...)
	go func() {
		defer close(done)
		c.code = o.Execute(context.Background(), full)
	}()
	return c, done
}

func wait(t *testing.T, done <-chan struct{}, c *cli) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl claw did not end; stdout:\n%s\nstderr:\n%s", c.out, c.errOut)
	}
}

func getRun(t *testing.T, ns, name string) *farmv1.AgentRun {
	t.Helper()
	var run farmv1.AgentRun
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
		t.Fatal(err)
	}
	return &run
}

// eventually polls until the run exists and ok holds.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func newRun(t *testing.T, ns, name string) *farmv1.AgentRun {
	t.Helper()
	run := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: farmv1.AgentRunSpec{
			RigRef:  &farmv1.RigReference{Name: "iphone-01"},
			Trigger: "Set a 5 minute timer in Clock and start it.",
			Model:   farmv1.ModelSpec{Name: "sim/timer"},
		},
	}
	if err := env.Client.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

// operator writes the run's status as the AgentRun controller would.
func operator(t *testing.T, ns, name string, mutate func(st *farmv1.AgentRunStatus, gen int64)) {
	t.Helper()
	run := getRun(t, ns, name)
	mutate(&run.Status, run.Generation)
	if err := env.Client.Status().Update(context.Background(), run); err != nil {
		t.Fatal(err)
	}
}

func succeeded(st *farmv1.AgentRunStatus, gen int64, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: farmv1.ConditionSucceeded, Status: status,
		Reason: reason, Message: msg, ObservedGeneration: gen})
}

func running(rig string, attempt int32) func(*farmv1.AgentRunStatus, int64) {
	return func(st *farmv1.AgentRunStatus, gen int64) {
		now := metav1.Now()
		st.Phase, st.Rig, st.Attempt = farmv1.RunRunning, rig, attempt
		if st.StartTime == nil {
			st.StartTime = &now
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: farmv1.ConditionRigLeased, Status: metav1.ConditionTrue,
			Reason: farmv1.ReasonLeased, Message: "holds rig " + rig, ObservedGeneration: gen})
		succeeded(st, gen, metav1.ConditionUnknown, farmv1.ReasonRunning, fmt.Sprintf("attempt %d runs", attempt))
	}
}

// ended records an attempt the way attempt.Apply and finishWith do.
func ended(run string, attempt int32, sentinel, exitReason, outcome, recap string, phase farmv1.RunPhase, reason, msg string) func(*farmv1.AgentRunStatus, int64) {
	return func(st *farmv1.AgentRunStatus, gen int64) {
		now := metav1.Now()
		st.Attempts = append(st.Attempts, farmv1.AttemptRecord{Attempt: attempt, Pod: fmt.Sprintf("%s-a%d", run, attempt),
			Sentinel: sentinel, ExitReason: exitReason, Outcome: outcome, Counted: true, FinishTime: &now,
			Usage: &farmv1.TokenUsage{PromptTokens: 24701, CompletionTokens: 112}})
		st.Attempt = attempt
		st.Sentinel, st.ExitReason, st.Recap = sentinel, exitReason, recap
		st.Usage = &farmv1.TokenUsage{PromptTokens: 24701, CompletionTokens: 112}
		st.Phase = phase
		switch phase {
		case farmv1.RunSucceeded:
			succeeded(st, gen, metav1.ConditionTrue, reason, msg)
		case farmv1.RunWaiting:
			succeeded(st, gen, metav1.ConditionTrue, reason, msg)
			fire := metav1.NewTime(now.Add(15 * time.Minute).Truncate(time.Minute))
			st.FollowUp = &farmv1.FollowUpStatus{CronJob: run + "-fu", FireTime: &fire, Chain: 1, Context: recap}
		default:
			succeeded(st, gen, metav1.ConditionFalse, reason, msg)
		}
		if phase.Finished() {
			st.CompletionTime = &now
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: farmv1.ConditionRigLeased, Status: metav1.ConditionFalse,
			Reason: farmv1.ReasonReleased, Message: "released", ObservedGeneration: gen})
	}
}

func TestRunCreatesWhatTheFlagsSay(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	c := claw(t, ns, nil, nil, "run", "set-a-timer",
		"--rig", "iphone-01", "--trigger", "Set a 5 minute timer in Clock and start it.", "--queue-mode", "steer",
		"--model-provider", "openai-compatible", "--model", "qwen2.5-vl", "--base-url", "http://vllm.models.svc:8000/v1",
		"--api-key-secret", "model-key/api-key", "--context-window", "64000",
		"--max-turns", "40", "--max-attempts", "2", "--max-infra-retries", "0",
		"--queue-timeout", "0", "--attempt-timeout", "30m", "--run-timeout", "2h",
		"--skill", "clock-skills", "--skill", "shop-skills", "--deny-tool", "force_quit,send_to_clipboard",
		"--max-chain", "3", "--follow-up-delay", "20m", "--ttl", "1h",
		"--image", "registry.example.com/clawfarm/loop:v1", "--service-account", "loop-sa", "-l", "team=qa")
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	if got := c.out.String(); got != "agentrun.farm.clawfarm.dev/set-a-timer created\n" {
		t.Errorf("stdout: %q", got)
	}
	run := getRun(t, ns, "set-a-timer")
	sp := run.Spec
	checks := []struct {
		what      string
		got, want any
	}{
		{"rigRef", sp.RigRef, &farmv1.RigReference{Name: "iphone-01"}},
		{"rigSelector", sp.RigSelector == nil, true},
		{"trigger", sp.Trigger, "Set a 5 minute timer in Clock and start it."},
		{"queueMode", sp.QueueMode, farmv1.QueueModeSteer},
		{"provider", sp.Model.Provider, farmv1.ModelProvider("openai-compatible")},
		{"model", sp.Model.Name, "qwen2.5-vl"},
		{"baseURL", sp.Model.BaseURL, "http://vllm.models.svc:8000/v1"},
		{"apiKeySecretRef", fmt.Sprint(sp.Model.APIKeySecretRef.Name, "/", sp.Model.APIKeySecretRef.Key), "model-key/api-key"},
		{"contextWindow", sp.Model.ContextWindow, int32(64000)},
		{"maxTurns", sp.Limits.MaxTurns, int32(40)},
		{"maxAttempts", sp.Limits.MaxAttempts, int32(2)},
		{"maxInfraRetries (an explicit 0)", sp.Limits.MaxInfraRetries, ptr(int32(0))},
		{"queueTimeoutSeconds (an explicit 0)", sp.Limits.QueueTimeoutSeconds, ptr(int32(0))},
		{"attemptTimeoutSeconds", sp.Limits.AttemptTimeoutSeconds, int32(1800)},
		{"runTimeoutSeconds", sp.Limits.RunTimeoutSeconds, int32(7200)},
		{"skills", fmt.Sprint(sp.Skills), "[{clock-skills} {shop-skills}]"},
		{"denyTools", fmt.Sprint(sp.DenyTools), "[force_quit send_to_clipboard]"},
		{"maxChain", sp.FollowUp.MaxChain, ptr(int32(3))},
		{"defaultDelayMinutes", sp.FollowUp.DefaultDelayMinutes, int32(20)},
		{"ttlSecondsAfterFinished", sp.TTLSecondsAfterFinished, ptr(int32(3600))},
		{"pod", sp.Pod, &farmv1.PodOverrides{Image: "registry.example.com/clawfarm/loop:v1", ServiceAccountName: "loop-sa"}},
		{"label", run.Labels["team"], "qa"},
		{"cancel", sp.Cancel, false},
	}
	for _, ch := range checks {
		if fmt.Sprintf("%#v", deref(ch.got)) != fmt.Sprintf("%#v", deref(ch.want)) {
			t.Errorf("%s: got %#v, want %#v", ch.what, deref(ch.got), deref(ch.want))
		}
	}

	// What the flags leave out, the API server defaults.
	c = claw(t, ns, nil, nil, "run", "any-ios", "--selector", "platform=ios,arm=v2", "--trigger", "Turn Wi-Fi off.", "--model", "gpt-4.1")
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	run = getRun(t, ns, "any-ios")
	if run.Spec.RigRef != nil || fmt.Sprint(run.Spec.RigSelector.MatchLabels) != "map[arm:v2 platform:ios]" {
		t.Errorf("selector run: rigRef %v, rigSelector %v", run.Spec.RigRef, run.Spec.RigSelector)
	}
	if l := run.Spec.Limits; run.Spec.Model.Provider != "openai" || l.MaxTurns != 300 || l.MaxAttempts != 3 ||
		l.InfraRetryLimit() != 5 || l.AttemptTimeoutSeconds != 3600 || run.Spec.Model.ContextWindow != 128000 || run.Spec.Model.APIKeySecretRef != nil {
		t.Errorf("server defaults not applied: model %+v, limits %+v", run.Spec.Model, l)
	}

	// Mistakes are refused before anything is created, naming the flag.
	for _, bad := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "x1", "--rig", "a", "--selector", "b=c", "--trigger", "t", "--model", "m"}, "not both"},
		{[]string{"run", "x2", "--rig", "a", "--trigger", "t"}, "--model NAME"},
		{[]string{"run", "x3", "--trigger", "t", "--model", "m"}, "--rig RIG or --selector"},
		{[]string{"run", "x4", "--rig", "a", "--trigger", "t", "--model", "m", "--api-key-secret", "model-key"}, "NAME/KEY"},
		{[]string{"run", "x5", "--rig", "a", "--trigger", "t", "--model", "m", "--follow-up-delay", "90s"}, "whole minutes"},
		{[]string{"run", "x6", "--rig", "a", "--trigger", "t", "--model", "m", "--queue-mode", "fifo"}, "want queue, collect or steer"},
		{[]string{"run", "x6", "--rig", "a", "--trigger", "t", "--model", "m", "--max-turns", "many"}, "invalid argument"},
	} {
		c := claw(t, ns, nil, nil, bad.args...)
		if c.code != ExitError || !strings.Contains(c.errOut.String(), bad.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", bad.args, c.code, c.errOut, ExitError, bad.msg)
		}
	}
	// The API server's own checks come back as they are (openai-compatible needs a base URL).
	c = claw(t, ns, nil, nil, "run", "x7", "--rig", "a", "--trigger", "t", "--model", "m", "--model-provider", "openai-compatible")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "baseURL is required") {
		t.Errorf("openai-compatible without --base-url: exit %d, stderr %q", c.code, c.errOut)
	}
	var list farmv1.AgentRunList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 2 {
		t.Errorf("want only the two good runs created, got %d (%v)", len(list.Items), err)
	}
}

func deref(v any) any {
	switch p := v.(type) {
	case *int32:
		if p == nil {
			return "nil"
		}
		return *p
	case *farmv1.RigReference:
		if p == nil {
			return "nil"
		}
		return *p
	case *farmv1.PodOverrides:
		if p == nil {
			return "nil"
		}
		return *p
	}
	return v
}

const runYAML = `apiVersion: farm.clawfarm.dev/v1alpha1
kind: AgentRun
metadata:
  name: from-file
  labels: {source: file}
spec:
  rigSelector:
    matchLabels: {platform: ios}
  trigger: Check for new messages.
  model:
    provider: anthropic
    name: claude-sonnet
    apiKeySecretRef: {name: model-key, key: api-key}
  limits:
    maxTurns: 25
  denyTools: [force_quit]
`

func TestRunFromFile(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte(runYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	c := claw(t, ns, nil, nil, "run", "-f", path)
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	run := getRun(t, ns, "from-file")
	if run.Spec.RigSelector == nil || run.Spec.RigSelector.MatchLabels["platform"] != "ios" || run.Spec.Trigger != "Check for new messages." ||
		run.Spec.Model.Provider != "anthropic" || run.Spec.Model.Name != "claude-sonnet" || run.Spec.Model.APIKeySecretRef.Key != "api-key" ||
		run.Spec.Limits.MaxTurns != 25 || fmt.Sprint(run.Spec.DenyTools) != "[force_quit]" || run.Labels["source"] != "file" {
		t.Errorf("run from file: %+v, labels %v", run.Spec, run.Labels)
	}

	// stdin, another NAME, and flags on top of the file.
	c = claw(t, ns, strings.NewReader(runYAML), nil, "run", "from-stdin", "-f", "-", "--rig", "iphone-02", "--max-turns", "10")
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	run = getRun(t, ns, "from-stdin")
	if run.Spec.RigRef == nil || run.Spec.RigRef.Name != "iphone-02" || run.Spec.RigSelector != nil ||
		run.Spec.Limits.MaxTurns != 10 || run.Spec.Model.Name != "claude-sonnet" {
		t.Errorf("run from stdin with flags: %+v", run.Spec)
	}

	// JSON is YAML too.
	c = claw(t, ns, strings.NewReader(`{"metadata":{"name":"from-json"},"spec":{"rigRef":{"name":"iphone-03"},"trigger":"Go home.","model":{"name":"gpt-4.1"}}}`), nil, "run", "-f", "-")
	if c.code != 0 {
		t.Fatalf("json: exit %d: %s", c.code, c.errOut)
	}
	if run = getRun(t, ns, "from-json"); run.Spec.RigRef.Name != "iphone-03" {
		t.Errorf("run from JSON: %+v", run.Spec)
	}

	// A typo in the file is refused, not dropped.
	c = claw(t, ns, strings.NewReader(strings.Replace(runYAML, "maxTurns", "maxTurn", 1)), nil, "run", "typo", "-f", "-")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "maxTurn") {
		t.Errorf("typo: exit %d, stderr %q", c.code, c.errOut)
	}
	// --dry-run prints the object and creates nothing.
	c = claw(t, ns, strings.NewReader(runYAML), nil, "run", "dry", "-f", "-", "--dry-run")
	if c.code != 0 || !strings.Contains(c.out.String(), "name: dry") || !strings.Contains(c.out.String(), "kind: AgentRun") {
		t.Errorf("dry-run: exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "dry"}, &farmv1.AgentRun{}); err == nil {
		t.Error("--dry-run created the run")
	}
	// --dry-run=server sends it: the API server's defaults come back (the
	// CRD's default queueMode), its validation refuses, and nothing is stored.
	c = claw(t, ns, strings.NewReader(runYAML), nil, "run", "dry-server", "-f", "-", "--dry-run=server")
	if c.code != 0 || !strings.Contains(c.out.String(), "name: dry-server") || !strings.Contains(c.out.String(), "queueMode: queue") ||
		!strings.Contains(c.out.String(), "uid: ") || !strings.Contains(c.out.String(), "kind: AgentRun") {
		t.Errorf("--dry-run=server: exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "dry-server"}, &farmv1.AgentRun{}); err == nil {
		t.Error("--dry-run=server created the run")
	}
	c = claw(t, ns, strings.NewReader(strings.Replace(runYAML, "maxTurns: 25", "maxTurns: 20000", 1)), nil, "run", "dry-bad", "-f", "-", "--dry-run=server")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "maxTurns") {
		t.Errorf("--dry-run=server of an invalid run: exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
	for _, args := range [][]string{{"--dry-run=sever"}, {"--dry-run=client", "--wait"}} {
		c = claw(t, ns, strings.NewReader(runYAML), nil, append([]string{"run", "dry-flags", "-f", "-"}, args...)...)
		if c.code != ExitError {
			t.Errorf("%v: exit %d, stderr %q", args, c.code, c.errOut)
		}
	}
}

// outcomes are the final statuses the operator writes, by sentinel table.
var outcomes = []struct {
	name   string
	status func(run string) func(*farmv1.AgentRunStatus, int64)
	code   int
	lines  []string
}{
	{"done", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "DONE", "end_turn", farmv1.OutcomeDone, "Started a 5-minute timer in Clock.", farmv1.RunSucceeded, farmv1.ReasonDone, "the agent ended the session with DONE")
	}, ExitSucceeded, []string{"DONE  Started a 5-minute timer in Clock.", ": Succeeded (Done)"}},
	{"idle", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "IDLE", "end_turn", farmv1.OutcomeIdle, "No new messages; nothing to do.", farmv1.RunSucceeded, farmv1.ReasonIdle, "the agent found nothing to do (IDLE)")
	}, ExitSucceeded, []string{"IDLE  No new messages; nothing to do.", ": Succeeded (Idle)"}},
	{"fail", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "FAIL", "end_turn", farmv1.OutcomeFail, "Headphones are sold out.", farmv1.RunFailed, farmv1.ReasonTaskFailed, "the agent ended the session with FAIL")
	}, ExitFail, []string{"FAIL  Headphones are sold out.", ": Failed (TaskFailed)"}},
	{"stuck-exhausted", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 3, "STUCK", "end_turn", farmv1.OutcomeStuck, "the phone stays locked", farmv1.RunFailed, farmv1.ReasonAttemptsExhausted, "attempt 3 of 3 ended STUCK: the agent gave up")
	}, ExitStuck, []string{"STUCK  the phone stays locked", ": Failed (AttemptsExhausted)", "attempt 3 of 3 ended STUCK"}},
	{"stuck-budget", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "STUCK", "budget_exhausted", farmv1.OutcomeBudget, "out of tokens", farmv1.RunFailed, farmv1.ReasonBudgetExhausted, "the attempt spent an input token budget: budget_exhausted")
	}, ExitStuck, []string{"STUCK  out of tokens", ": Failed (BudgetExhausted)"}},
	{"stuck-not-retryable", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "STUCK", "fatal_error", farmv1.OutcomeNotRetryable, "the provider refused the key", farmv1.RunFailed, farmv1.ReasonNotRetryable, "the provider refused the key (auth)")
	}, ExitStuck, []string{": Failed (NotRetryable)"}},
	{"wait", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "WAIT", "end_turn", farmv1.OutcomeWait, "Asked Ana what time dinner is.", farmv1.RunWaiting, farmv1.ReasonWaiting, "the agent is waiting for something (WAIT); a follow-up is scheduled")
	}, ExitWait, []string{"WAIT  Asked Ana what time dinner is.", ": Waiting", "follow-up at ", "--follow-ups follows it"}},
	{"wait-followed-up", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return func(st *farmv1.AgentRunStatus, gen int64) {
			ended(r, 1, "WAIT", "end_turn", farmv1.OutcomeWait, "Asked Ana.", farmv1.RunSucceeded, farmv1.ReasonFollowedUp, "the agent ended with WAIT; follow-up run "+r+"-f1 carries on")(st, gen)
			st.FollowUp = &farmv1.FollowUpStatus{Run: r + "-f1", Chain: 1}
		}
	}, ExitWait, []string{"WAIT  Asked Ana.", ": Succeeded (FollowedUp)"}},
	{"cancelled", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return func(st *farmv1.AgentRunStatus, gen int64) {
			now := metav1.Now()
			st.Phase, st.CompletionTime = farmv1.RunCancelled, &now
			succeeded(st, gen, metav1.ConditionFalse, farmv1.ReasonCancelled, "the run was cancelled (spec.cancel)")
		}
	}, ExitCancelled, []string{": Cancelled", "the run was cancelled (spec.cancel)"}},
	{"invalid-config", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return func(st *farmv1.AgentRunStatus, gen int64) {
			now := metav1.Now()
			st.Phase, st.CompletionTime = farmv1.RunFailed, &now
			st.Attempts = []farmv1.AttemptRecord{{Attempt: 1, Pod: r + "-a1", Outcome: farmv1.OutcomeInvalidConfig, Counted: true, Message: `secret "model-key" not found`}}
			succeeded(st, gen, metav1.ConditionFalse, farmv1.ReasonInvalidConfig, `the run's configuration is wrong: secret "model-key" not found`)
		}
	}, ExitOtherFailure, []string{": Failed (InvalidConfig)", `secret "model-key" not found`}},
	{"queue-timeout", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return func(st *farmv1.AgentRunStatus, gen int64) {
			now := metav1.Now()
			st.Phase, st.CompletionTime = farmv1.RunFailed, &now
			succeeded(st, gen, metav1.ConditionFalse, farmv1.ReasonQueueTimeout, "waited 24h0m0s for a rig")
		}
	}, ExitOtherFailure, []string{": Failed (QueueTimeout)"}},
	{"wait-chain-exhausted", func(r string) func(*farmv1.AgentRunStatus, int64) {
		return ended(r, 1, "WAIT", "end_turn", farmv1.OutcomeWait, "Asked Ana again.", farmv1.RunSucceeded, farmv1.ReasonFollowUpChainExhausted,
			"the agent ended with WAIT, but chain "+r+" is exhausted: 11 runs, the first and 10 follow-ups (spec.followUp.maxChain 10), so no follow-up is made")
	}, ExitWait, []string{"WAIT  Asked Ana again.", ": Succeeded (FollowUpChainExhausted)", "10 follow-ups"}},
}

// wait on a run that has already ended returns its outcome at once.
func TestWaitOnEndedRunReturnsAtOnce(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	for _, oc := range outcomes {
		t.Run(oc.name, func(t *testing.T) {
			newRun(t, ns, oc.name)
			operator(t, ns, oc.name, oc.status(oc.name))
			c := claw(t, ns, nil, nil, "wait", oc.name, "--poll-interval", "5s")
			if c.code != oc.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", c.code, oc.code, c.out, c.errOut)
			}
			if c.took > 3*time.Second {
				t.Errorf("wait on an ended run took %s; it must not poll", c.took)
			}
			for _, l := range oc.lines {
				if !strings.Contains(c.out.String(), l) {
					t.Errorf("stdout lacks %q:\n%s", l, c.out)
				}
			}
		})
	}
	c := claw(t, ns, nil, nil, "wait", "no-such-run")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "not found") {
		t.Errorf("missing run: exit %d, stderr %q", c.code, c.errOut)
	}
}

// run --wait follows the run it created: the phases, a line per turn from
// status.progress (no pod log here), then the outcome's lines and code.
func TestRunWaitFollowsToEachOutcome(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	for _, oc := range outcomes {
		t.Run(oc.name, func(t *testing.T) {
			name := "w-" + oc.name
			c, done := clawAsync(t, ns, &fakeLogs{}, "run", name, "--rig", "iphone-01", "--trigger", "go", "--model", "sim/timer", "--max-turns", "50", "--wait", "--timeout", "1m")
			eventually(t, "the run to exist", func() bool {
				return env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &farmv1.AgentRun{}) == nil
			})
			operator(t, ns, name, func(st *farmv1.AgentRunStatus, gen int64) {
				now := metav1.Now()
				st.Phase, st.QueuedAt = farmv1.RunQueued, &now
				meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: farmv1.ConditionRigLeased, Status: metav1.ConditionFalse,
					Reason: farmv1.ReasonRigBusy, Message: "rig iphone-01 is in use or promised to an earlier run", ObservedGeneration: gen})
			})
			eventually(t, "the Queued line", func() bool { return strings.Contains(c.out.String(), "· Queued: rig iphone-01 is in use") })
			operator(t, ns, name, running("iphone-01", 1))
			for turn, note := range []string{"looking at the phone", "tapping Clock", "tapping Timers"} {
				operator(t, ns, name, func(st *farmv1.AgentRunStatus, _ int64) {
					st.Progress = &farmv1.RunProgress{Attempt: 1, Turn: int32(turn + 1), LastNote: note, Tokens: 4000}
				})
				line := fmt.Sprintf("t%-3d note: %s", turn+1, note)
				eventually(t, "the line "+line, func() bool { return strings.Contains(c.out.String(), line) })
			}
			operator(t, ns, name, oc.status(name))
			wait(t, done, c)
			if c.code != oc.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", c.code, oc.code, c.out, c.errOut)
			}
			out := c.out.String()
			for _, l := range append([]string{"agentrun.farm.clawfarm.dev/" + name + " created", "· Running on iphone-01, attempt 1 of 3"}, oc.lines...) {
				if !strings.Contains(out, l) {
					t.Errorf("stdout lacks %q:\n%s", l, out)
				}
			}
		})
	}
}

// A STUCK attempt is retried: the wait goes on through Retrying to the next
// attempt, and ends only with the run.
func TestWaitFollowsRetries(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	newRun(t, ns, "retry")
	operator(t, ns, "retry", running("iphone-01", 1))
	c, done := clawAsync(t, ns, nil, "wait", "retry")
	eventually(t, "the Running line", func() bool { return strings.Contains(c.out.String(), "· Running on iphone-01, attempt 1") })
	operator(t, ns, "retry", func(st *farmv1.AgentRunStatus, gen int64) {
		ended("retry", 1, "STUCK", "end_turn", farmv1.OutcomeStuck, "gave up", farmv1.RunRetrying, farmv1.ReasonRetrying, "")(st, gen)
		next := metav1.NewTime(time.Now().Add(10 * time.Second))
		st.NextAttemptTime = &next
		succeeded(st, gen, metav1.ConditionUnknown, farmv1.ReasonRetrying, "attempt 1 of 3 ended STUCK (gave up); starting a fresh attempt")
	})
	eventually(t, "the Retrying line", func() bool { return strings.Contains(c.out.String(), "· Retrying: attempt 1 of 3 ended STUCK") })
	operator(t, ns, "retry", running("iphone-01", 2))
	eventually(t, "attempt 2", func() bool { return strings.Contains(c.out.String(), "attempt 2 of 3") })
	operator(t, ns, "retry", ended("retry", 2, "DONE", "end_turn", farmv1.OutcomeDone, "done at last", farmv1.RunSucceeded, farmv1.ReasonDone, "the agent ended the session with DONE"))
	wait(t, done, c)
	if c.code != ExitSucceeded || !strings.Contains(c.out.String(), "DONE  done at last") {
		t.Errorf("exit %d; stdout:\n%s", c.code, c.out)
	}
}

// --follow-ups follows a WAIT to its follow-up run, and ends with the chain.
func TestWaitFollowUps(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	newRun(t, ns, "ask-ana")
	operator(t, ns, "ask-ana", running("iphone-01", 1))
	c, done := clawAsync(t, ns, nil, "wait", "ask-ana", "--follow-ups")
	operator(t, ns, "ask-ana", ended("ask-ana", 1, "WAIT", "end_turn", farmv1.OutcomeWait, "Asked Ana.", farmv1.RunWaiting, farmv1.ReasonWaiting, "waiting"))
	eventually(t, "the Waiting line", func() bool { return strings.Contains(c.out.String(), "· Waiting: follow-up at ") })
	newRun(t, ns, "ask-ana-f1")
	operator(t, ns, "ask-ana", func(st *farmv1.AgentRunStatus, gen int64) {
		st.Phase = farmv1.RunSucceeded
		st.FollowUp.Run = "ask-ana-f1"
		succeeded(st, gen, metav1.ConditionTrue, farmv1.ReasonFollowedUp, "the agent ended with WAIT; follow-up run ask-ana-f1 carries on")
	})
	eventually(t, "the follow-up line", func() bool { return strings.Contains(c.out.String(), "→ follow-up run ask-ana-f1") })
	operator(t, ns, "ask-ana-f1", running("iphone-01", 1))
	operator(t, ns, "ask-ana-f1", ended("ask-ana-f1", 1, "FAIL", "end_turn", farmv1.OutcomeFail, "Ana never answered.", farmv1.RunFailed, farmv1.ReasonTaskFailed, "FAIL"))
	wait(t, done, c)
	if c.code != ExitFail {
		t.Errorf("exit %d, want the chain's last outcome %d; stdout:\n%s", c.code, ExitFail, c.out)
	}
	for _, l := range []string{"WAIT  Asked Ana.", "ask-ana: Succeeded (FollowedUp)", "FAIL  Ana never answered.", "ask-ana-f1: Failed (TaskFailed)"} {
		if !strings.Contains(c.out.String(), l) {
			t.Errorf("stdout lacks %q:\n%s", l, c.out)
		}
	}
}

func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	newRun(t, ns, "slow")
	operator(t, ns, "slow", running("iphone-01", 1))
	operator(t, ns, "slow", func(st *farmv1.AgentRunStatus, _ int64) {
		st.Progress = &farmv1.RunProgress{Attempt: 1, Turn: 150, LastNote: "scrolling"}
	})
	c := claw(t, ns, nil, nil, "wait", "slow", "--timeout", "400ms")
	if c.code != ExitTimeout || !strings.Contains(c.errOut.String(), "timed out after 400ms") {
		t.Errorf("exit %d, stderr %q", c.code, c.errOut)
	}
	if strings.Contains(c.out.String(), "█") || strings.Contains(c.out.String(), "\r") {
		t.Errorf("off a terminal there is no bar:\n%q", c.out)
	}

	// On a terminal the bar shows turn of maxTurns (300 by default).
	var out, errOut testenv.SyncBuffer
	tty := true
	o := &Options{TTY: &tty}
	o.Streams.In, o.Streams.Out, o.Streams.ErrOut = strings.NewReader(""), &out, &errOut
	code := o.Execute(context.Background(), []string{"--kubeconfig", kubeconfig, "-n", ns, "--poll-interval", "50ms", "wait", "slow", "--timeout", "400ms"})
	if code != ExitTimeout || !strings.Contains(out.String(), "\r\033[K[████████████░░░░░░░░░░░░]  150/300  Running on iphone-01  attempt 1") {
		t.Errorf("terminal: exit %d, stdout %q", code, out.String())
	}
}

// makePod creates an attempt pod as the controller names and labels it
// (internal/attempt/pod.go), started as its kubelet would report it. Pods
// are listed by creationTimestamp, which has one-second resolution, then by
// name: a test makes its pods in the order of their names.
func makePod(t *testing.T, run *farmv1.AgentRun, name string, attempt int32, age time.Duration) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: name,
			Labels: map[string]string{farmv1.LabelRun: run.Name, farmv1.LabelRig: "iphone-01",
				farmv1.LabelAttempt: fmt.Sprint(attempt), farmv1.LabelKind: "attempt"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun",
				Name: run.Name, UID: run.UID, Controller: ptr(true)}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeName: "rig-host-1",
			Containers: []corev1.Container{{Name: "loop", Image: "clawfarm/loop"}}},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "loop", Image: "clawfarm/loop",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-age))}}}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// run --wait reads the attempt pod's log when it can, one line per turn.
func TestWaitReadsTheLoopLog(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	timer, err := os.ReadFile(filepath.Join("testdata", "timer.log"))
	if err != nil {
		t.Fatal(err)
	}
	run := newRun(t, ns, "timer")
	operator(t, ns, "timer", running("iphone-01", 1))
	makePod(t, run, "timer-a1", 1, 0)
	logs := &fakeLogs{logs: map[string][]byte{"timer-a1": timer}}
	c, done := clawAsync(t, ns, logs, "wait", "timer")
	eventually(t, "the log's last turn", func() bool { return strings.Contains(c.out.String(), "■ DONE") })
	operator(t, ns, "timer", ended("timer", 1, "DONE", "end_turn", farmv1.OutcomeDone, "Started a 5-minute timer in Clock.", farmv1.RunSucceeded, farmv1.ReasonDone, "DONE"))
	wait(t, done, c)
	out := c.out.String()
	if c.code != 0 {
		t.Errorf("exit %d; stdout:\n%s", c.code, out)
	}
	for _, l := range []string{
		"t2   note: tapping Clock  →  tap [0.104,0.167,0.177,0.18]  →  screen changed",
		"t5   note: tapping Start  →  tap [0.391,0.58,0.609,0.619]  →  screen changed",
		"DONE  Started a 5-minute timer in Clock.",
		"timer: Succeeded (Done)",
	} {
		if !strings.Contains(out, l) {
			t.Errorf("stdout lacks %q:\n%s", l, out)
		}
	}
	if fmt.Sprint(logs.asked) != "["+ns+"/timer-a1]" {
		t.Errorf("logs asked for %v", logs.asked)
	}
}

func TestLogs(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	timer, err := os.ReadFile(filepath.Join("testdata", "timer.log"))
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := os.ReadFile(filepath.Join("testdata", "stuck.log"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &fakeLogs{logs: map[string][]byte{"timer-a1": stuck, "timer-a2": []byte("first try\n"), "timer-a2-r1": timer}}

	// Before any pod: say so (and -f would wait).
	run := newRun(t, ns, "timer")
	c := claw(t, ns, nil, logs, "logs", "timer")
	if c.code != ExitError || !strings.Contains(c.errOut.String(), "has no attempt pod yet") {
		t.Errorf("no pod: exit %d, stderr %q", c.code, c.errOut)
	}

	// Attempt 1 ended STUCK; attempt 2's first pod was evicted, its retry ran.
	operator(t, ns, "timer", running("iphone-01", 2))
	makePod(t, run, "timer-a1", 1, 3*time.Second)
	makePod(t, run, "timer-a2", 2, 2*time.Second)
	makePod(t, run, "timer-a2-r1", 2, time.Second)

	c = claw(t, ns, nil, logs, "logs", "timer")
	if c.code != 0 || !strings.Contains(c.out.String(), "t5   note: tapping Start") || !strings.Contains(c.out.String(), "■ DONE") {
		t.Errorf("latest attempt: exit %d, stdout:\n%s\nstderr: %s", c.code, c.out, c.errOut)
	}
	if !strings.HasPrefix(c.out.String(), "loop: progress will not be patched") {
		t.Errorf("the non-event line must come first, as it is:\n%s", c.out)
	}
	c = claw(t, ns, nil, logs, "logs", "timer", "--attempt", "1")
	if c.code != 0 || !strings.Contains(c.out.String(), "■ STUCK  (end_turn, retryable, 6 turns") {
		t.Errorf("--attempt 1: exit %d, stdout:\n%s", c.code, c.out)
	}
	c = claw(t, ns, nil, logs, "logs", "timer", "--raw")
	if c.code != 0 || c.out.String() != string(timer) {
		t.Errorf("--raw must print the stream byte for byte: exit %d, %d bytes of %d", c.code, len(c.out.String()), len(timer))
	}
	c = claw(t, ns, nil, logs, "logs", "timer", "--attempt", "7")
	if c.code != ExitError {
		t.Errorf("--attempt 7: exit %d, stdout %q", c.code, c.out)
	}
	want := []string{ns + "/timer-a2-r1", ns + "/timer-a1", ns + "/timer-a2-r1"}
	if fmt.Sprint(logs.asked) != fmt.Sprint(want) {
		t.Errorf("pods asked: %v, want %v", logs.asked, want)
	}

	// An ended attempt whose pod is gone is still named by status.attempts.
	newRun(t, ns, "gone")
	operator(t, ns, "gone", ended("gone", 1, "DONE", "end_turn", farmv1.OutcomeDone, "ok", farmv1.RunSucceeded, farmv1.ReasonDone, "DONE"))
	logs.logs["gone-a1"] = []byte(`{"ts":"2026-11-29T18:00:00Z","stream":"lifecycle","type":"done","sentinel":"DONE","turns":1}` + "\n")
	c = claw(t, ns, nil, logs, "logs", "gone")
	if c.code != 0 || strings.TrimSpace(c.out.String()) != "■ DONE  (1 turns)" {
		t.Errorf("recorded pod: exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	newRun(t, ns, "stop-me")
	operator(t, ns, "stop-me", running("iphone-01", 1))
	c := claw(t, ns, nil, nil, "cancel", "stop-me")
	if c.code != 0 || !strings.Contains(c.out.String(), "cancel requested") {
		t.Fatalf("exit %d, stdout %q, stderr %q", c.code, c.out, c.errOut)
	}
	if run := getRun(t, ns, "stop-me"); !run.Spec.Cancel {
		t.Fatal("spec.cancel is not set")
	}

	// --wait follows until the operator has stopped it: exit 4.
	newRun(t, ns, "stop-and-wait")
	operator(t, ns, "stop-and-wait", running("iphone-01", 1))
	c, done := clawAsync(t, ns, nil, "cancel", "stop-and-wait", "--wait")
	eventually(t, "spec.cancel", func() bool { return getRun(t, ns, "stop-and-wait").Spec.Cancel })
	operator(t, ns, "stop-and-wait", outcomes[8].status("stop-and-wait"))
	wait(t, done, c)
	if c.code != ExitCancelled {
		t.Errorf("cancel --wait: exit %d, stdout:\n%s", c.code, c.out)
	}

	// A run that has ended is left alone.
	newRun(t, ns, "over")
	operator(t, ns, "over", outcomes[0].status("over"))
	c = claw(t, ns, nil, nil, "cancel", "over")
	if c.code != 0 || !strings.Contains(c.out.String(), "already ended (Succeeded (Done))") || getRun(t, ns, "over").Spec.Cancel {
		t.Errorf("ended run: exit %d, stdout %q", c.code, c.out)
	}
	c = claw(t, ns, nil, nil, "cancel", "nobody")
	if c.code != ExitError {
		t.Errorf("missing run: exit %d", c.code)
	}
}

func TestRigsCountsTheQueue(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	ctx := context.Background()
	for _, r := range []struct {
		name, phase string
		labels      map[string]string
	}{
		{"iphone-01", "InUse", map[string]string{"platform": "ios"}},
		{"iphone-02", "Ready", map[string]string{"platform": "ios"}},
		{"pixel-01", "Maintenance", map[string]string{"platform": "android"}},
	} {
		rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.name, Labels: r.labels},
			Spec: farmv1.DeviceRigSpec{NodeName: "host-" + r.name, Endpoint: farmv1.RigEndpoint{URL: "http://" + r.name + ":8048/mcp"}}}
		if err := env.Client.Create(ctx, rig); err != nil {
			t.Fatal(err)
		}
		rig.Status.Phase = farmv1.RigPhase(r.phase)
		if err := env.Client.Status().Update(ctx, rig); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(name string, rigRef string, sel map[string]string, phase farmv1.RunPhase, cancel bool) {
		run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: farmv1.AgentRunSpec{Trigger: "t", Model: farmv1.ModelSpec{Name: "m"}, Cancel: cancel}}
		if rigRef != "" {
			run.Spec.RigRef = &farmv1.RigReference{Name: rigRef}
		} else {
			run.Spec.RigSelector = &farmv1.RigSelector{MatchLabels: sel}
		}
		if err := env.Client.Create(ctx, run); err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			operator(t, ns, name, func(st *farmv1.AgentRunStatus, _ int64) { st.Phase = phase })
		}
	}
	mk("holder", "iphone-01", nil, farmv1.RunRunning, false)
	operator(t, ns, "holder", func(st *farmv1.AgentRunStatus, gen int64) {
		running("iphone-01", 1)(st, gen)
		st.Progress = &farmv1.RunProgress{Attempt: 1, Turn: 12}
	})
	mk("new", "iphone-01", nil, "", false)                    // just created: waits
	mk("pending", "iphone-01", nil, farmv1.RunPending, false) // waits
	mk("queued", "iphone-01", nil, farmv1.RunQueued, false)   // waits
	mk("cancelled", "iphone-01", nil, farmv1.RunQueued, true) // leaves the queue
	mk("done", "iphone-01", nil, farmv1.RunSucceeded, false)  // over
	mk("waiting", "iphone-01", nil, farmv1.RunWaiting, false) // WAIT released the rig
	mk("any-ios", "", map[string]string{"platform": "ios"}, farmv1.RunQueued, false)
	mk("anything", "", nil, farmv1.RunQueued, false)
	mk("for-02", "iphone-02", nil, farmv1.RunQueued, false)

	c := claw(t, ns, nil, nil, "rigs")
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errOut)
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rigs:\n%s", c.out)
	}
	want := [][]string{
		{"NAME", "NODE", "PHASE", "RUN", "TURN", "QUEUE", "SELECTOR", "AGE"},
		{"iphone-01", "host-iphone-01", "InUse", "holder", "12/300", "3", "2"},
		{"iphone-02", "host-iphone-02", "Ready", "-", "-", "1", "2"},
		{"pixel-01", "host-pixel-01", "Maintenance", "-", "-", "0", "1"},
	}
	for i, w := range want {
		got := strings.Fields(lines[i])
		if i > 0 {
			got = got[:len(got)-1] // AGE
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("row %d: got %v, want %v\n%s", i, got, w, c.out)
		}
	}

	c = claw(t, ns, nil, nil, "rigs", "-A")
	if c.code != 0 || !strings.Contains(c.out.String(), "NAMESPACE") || !strings.Contains(c.out.String(), ns) {
		t.Errorf("-A: exit %d, stdout:\n%s", c.code, c.out)
	}
}
