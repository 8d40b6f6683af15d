package agentrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/controllers/devicerig"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

var (
	env     *testenv.Env
	restCfg *rest.Config
	k8s     client.Client
	scheme  *runtime.Scheme
	health  *testenv.Health
	clk     = &testenv.OffsetClock{}
	scripts = &scriptBook{m: map[string]func(*corev1.Pod) fakekubelet.Ending{}}
	kubelet *fakekubelet.Kubelet
	stopMgr context.CancelFunc
	mgrDone chan struct{}
	// finished checks the Finished condition on every stored version of
	// every run (finished_test.go).
	finished *finishedWatch
	// decisions keeps the manager's log lines up to V(1) (decisions_test.go).
	decisions = &decisionLog{}
)

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	restCfg, k8s, scheme, health = env.Config, env.Client, env.Scheme, env.Health
	ctx, cancel := context.WithCancel(context.Background())
	kubelet = &fakekubelet.Kubelet{Client: k8s, Script: scripts.run}
	go kubelet.Run(ctx)
	finished = watchFinished()
	if err := makePriceList(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stopMgr, mgrDone = startManager()
	code := m.Run()
	stopMgr()
	<-mgrDone
	if broken := finished.stop(); len(broken) > 0 {
		fmt.Fprintf(os.Stderr, "the Finished condition disagrees with the phase in %d stored versions of AgentRuns:\n  %s\n",
			len(broken), strings.Join(broken, "\n  "))
		code = 1
	}
	cancel()
	env.Stop()
	os.Exit(code)
}

// followUpDefaults are the follow-up Jobs' settings, as the chart's defaults
// make them (charts/clawfarm/values.yaml runs.followUpPod): the API server
// must accept CronJobs carrying them.
var followUpDefaults = followup.JobDefaults{Image: "manager:test", ServiceAccountName: "clawfarm-followup", ImagePullPolicy: corev1.PullNever,
	Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
	SecurityContext: attempt.RestrictedSecurityContext(), PodSecurityContext: attempt.RestrictedPodSecurityContext(),
}

// loopDefaults are the loop pods' settings, with the chart's default
// security contexts (charts/clawfarm/values.yaml runs.loopPod).
var loopDefaults = attempt.Defaults{Image: "loop:test", ServiceAccountName: "clawfarm-loop",
	SecurityContext: attempt.RestrictedSecurityContext(), PodSecurityContext: attempt.RestrictedPodSecurityContext()}

// startManager runs a manager with both controllers, the way cmd/manager wires them.
func startManager() (context.CancelFunc, chan struct{}) {
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      agentrun.CacheOptions(nil, nil), // the manager's: only the objects the operator labels
		Logger:     decisions.logger(),
	})
	if err != nil {
		panic(err)
	}
	if err := (&agentrun.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("agentrun-controller"), Clock: clk,
		Config: agentrun.Config{
			Loop:           loopDefaults,
			FollowUp:       followUpDefaults,
			StartupTimeout: 3 * time.Second, NodeLostGrace: time.Second, AttemptBackoff: 2 * time.Second, RigNotReadyGrace: 3 * time.Second, ConfigErrorGrace: 2 * time.Second, MaxConcurrentReconciles: 4,
			PricingConfigMap: priceList,
		},
	}).SetupWithManager(mgr); err != nil {
		panic(err)
	}
	if err := (&devicerig.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("devicerig-controller"), Clock: clk,
		Config: devicerig.Config{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: time.Second, MaxConcurrentReconciles: 4},
	}).SetupWithManager(mgr); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return cancel, done
}

// scriptBook says how the fake kubelet ends each run's pods (default: DONE after 100 ms).
type scriptBook struct {
	mu sync.Mutex
	m  map[string]func(*corev1.Pod) fakekubelet.Ending
}

func (s *scriptBook) set(ns, run string, f func(*corev1.Pod) fakekubelet.Ending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[ns+"/"+run] = f
}

func (s *scriptBook) run(pod *corev1.Pod) fakekubelet.Ending {
	s.mu.Lock()
	f := s.m[pod.Namespace+"/"+pod.Labels[farmv1.LabelRun]]
	s.mu.Unlock()
	if f == nil {
		return ends(contract.Done, true, "did it", 100*time.Millisecond)
	}
	return f(pod)
}

// ends is a pod ending with a termination message for sentinel.
func ends(s contract.Sentinel, retryable bool, recap string, after time.Duration) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: s, Retryable: retryable, Recap: recap, ExitReason: contract.ReasonEndTurn, Turns: 7,
		Usage: contract.Usage{PromptTokens: 1000, CompletionTokens: 100, CachedTokens: 10}}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: after, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// endsFor ends a pod with a sentinel not retryable and an exit reason (exit 13 for STUCK).
func endsFor(s contract.Sentinel, reason contract.ExitReason, recap string) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: s, Retryable: false, Recap: recap, ExitReason: reason, Turns: 3}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// stuckFor ends a pod STUCK, retryable, with an exit reason (exit 12).
func stuckFor(reason contract.ExitReason, recap string) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: contract.Stuck, Retryable: true, Recap: recap, ExitReason: reason, Turns: 4,
		Usage: contract.Usage{PromptTokens: 800, CompletionTokens: 80}}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// byAttempt scripts a run's pods by attempt pod name.
func byPod(endings map[string]fakekubelet.Ending, otherwise fakekubelet.Ending) func(*corev1.Pod) fakekubelet.Ending {
	return func(p *corev1.Pod) fakekubelet.Ending {
		if e, ok := endings[p.Name]; ok {
			return e
		}
		return otherwise
	}
}

func namespace(t *testing.T) string { t.Helper(); return env.Namespace(t) }

func makeRig(t *testing.T, ns, name string, labels map[string]string) *farmv1.DeviceRig {
	t.Helper()
	return env.MakeRig(t, ns, name, labels)
}

func setNodeReady(t *testing.T, name string, ready bool) {
	t.Helper()
	env.SetNodeReady(t, name, ready)
}

func newRun(ns, name, rig string) *farmv1.AgentRun {
	return &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: farmv1.AgentRunSpec{
			RigRef:  &farmv1.RigReference{Name: rig},
			Trigger: "Set a 5 minute timer in Clock.",
			Model:   farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/timer", BaseURL: "http://127.0.0.1:1/v1"},
		},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func getRun(t *testing.T, ns, name string) *farmv1.AgentRun {
	t.Helper()
	var run farmv1.AgentRun
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
		t.Fatal(err)
	}
	return &run
}

func waitRun(t *testing.T, ns, name string, ok func(*farmv1.AgentRun) bool) *farmv1.AgentRun {
	t.Helper()
	var run farmv1.AgentRun
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &run); err == nil && ok(&run) {
			return &run
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(run.Status, "", "  ")
	t.Fatalf("run %s/%s did not reach the expected state; status:\n%s", ns, name, b)
	return nil
}

func waitPhase(t *testing.T, ns, name string, phase farmv1.RunPhase) *farmv1.AgentRun {
	t.Helper()
	return waitRun(t, ns, name, func(r *farmv1.AgentRun) bool { return r.Status.Phase == phase })
}

func waitRig(t *testing.T, ns, name string, ok func(*farmv1.DeviceRig) bool) *farmv1.DeviceRig {
	t.Helper()
	return env.WaitRig(t, ns, name, ok)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}

func leaseHolder(t *testing.T, ns, rig string) string {
	t.Helper()
	var ls []string
	var list coordinationv1.LeaseList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Items {
		if l.Name == rig {
			ls = append(ls, l.Labels[farmv1.LabelRun])
		}
	}
	return strings.Join(ls, ",")
}

func condition(run *farmv1.AgentRun, typ string) *metav1.Condition {
	return conditions.Get(run.Status.Conditions, typ)
}

func podsOf(t *testing.T, ns, run string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelRun: run}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func envOf(pod *corev1.Pod, name string) string {
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
