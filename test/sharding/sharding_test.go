// Package sharding_test runs a farm past one manager on a real API server
// (envtest): two managers in one process, shard a (pool a) and shard b
// (pools b and c), each started as cmd/manager starts one with --shard, and
// a fake kubelet ending every attempt pod. It proves that each manager
// reconciles its own shard's runs and rigs and never the other's, that no
// rig's Lease is ever held by a run of another shard, and that a rigRef run
// naming another pool's rig fails (docs/sharding.md).
package sharding_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/controllers/devicerig"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
	// shards are the two managers, by shard name; each serves the pools
	// its selector names. Every object of the tests is named after its
	// pool ("<pool>-…"), so a reconcile's request says whose it is.
	shards = map[string]*shard{
		"a": {pools: []string{"a"}},
		"b": {pools: []string{"b", "c"}},
	}
)

// shard is one manager and what it reconciled.
type shard struct {
	pools      []string
	reconciles *reconciles
}

// serves says whether the shard serves the object named name ("<pool>-…").
func (s *shard) serves(name string) bool {
	pool, _, _ := strings.Cut(name, "-")
	for _, p := range s.pools {
		if p == pool {
			return true
		}
	}
	return false
}

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	ctx, cancel := context.WithCancel(context.Background())
	kubelet := &fakekubelet.Kubelet{Client: k8s, Script: func(*corev1.Pod) fakekubelet.Ending { return done(100 * time.Millisecond) }}
	go kubelet.Run(ctx)
	var stopped []chan struct{}
	for name, s := range shards {
		s.reconciles = &reconciles{by: map[string]map[string]int{}}
		stop, err := startManager(ctx, name, s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		stopped = append(stopped, stop)
	}
	code := m.Run()
	cancel()
	for _, s := range stopped {
		<-s
	}
	if v := kubelet.Violations(); len(v) > 0 {
		fmt.Fprintf(os.Stderr, "two sessions on one rig at once:\n  %s\n", strings.Join(v, "\n  "))
		code = 1
	}
	env.Stop()
	os.Exit(code)
}

// startManager runs one shard's manager as cmd/manager wires it with
// --shard and --shard-name: the sharded cache, its own leader election, the
// shard in the AgentRun controller's settings. Its logger counts the
// reconciles controller-runtime runs.
func startManager(ctx context.Context, name string, s *shard) (chan struct{}, error) {
	sel, err := agentrun.ParseShard(farmv1.LabelPool + " in (" + strings.Join(s.pools, ",") + ")")
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                  env.Scheme,
		Logger:                  logr.New(s.reconciles.sink()),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Controller:              config.Controller{SkipNameValidation: ptr(true)},
		Cache:                   agentrun.CacheOptions(nil, sel),
		LeaderElection:          true,
		LeaderElectionID:        "clawfarm-manager-" + name + ".farm.clawfarm.dev",
		LeaderElectionNamespace: "default",
	})
	if err != nil {
		return nil, err
	}
	loop := attempt.Defaults{Image: "loop:test", ServiceAccountName: "clawfarm-loop"}
	if err := (&agentrun.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("agentrun-controller"),
		Config: agentrun.Config{Loop: loop, FollowUp: followup.JobDefaults{Image: "manager:test", ServiceAccountName: "clawfarm-followup"},
			StartupTimeout: 30 * time.Second, NodeLostGrace: time.Minute, MaxConcurrentReconciles: 8, Shard: sel},
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&devicerig.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("devicerig-controller"),
		Config: devicerig.Config{ProbeInterval: 500 * time.Millisecond, ProbeTimeout: time.Second, MaxConcurrentReconciles: 4},
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager", name+":", err)
		}
	}()
	return stopped, nil
}

func ptr[T any](v T) *T { return &v }

// reconciles counts the reconciles controller-runtime runs, by controller
// kind and request name. Its sink is the manager's logger: before each
// reconcile the controller's worker logs "Reconciling" at V(5) with the
// controller's kind and the request's name. Everything else is dropped.
type reconciles struct {
	mu sync.Mutex
	by map[string]map[string]int
}

// count is how many reconciles of kind the shard ran, of its own objects
// and of the other shard's.
func (r *reconciles) count(kind string, s *shard) (own, others int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, n := range r.by[kind] {
		if s.serves(name) {
			own += n
		} else {
			others += n
		}
	}
	return own, others
}

// foreign names the other shard's objects the shard reconciled.
func (r *reconciles) foreign(kind string, s *shard) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, n := range r.by[kind] {
		if !s.serves(name) {
			out = append(out, fmt.Sprintf("%s (%d)", name, n))
		}
	}
	return out
}

func (r *reconciles) sink() logr.LogSink { return &sink{r: r} }

type sink struct {
	r      *reconciles
	values []any
}

func (s *sink) Init(logr.RuntimeInfo)        {}
func (s *sink) Enabled(level int) bool       { return level == 5 }
func (s *sink) Error(error, string, ...any)  {}
func (s *sink) WithName(string) logr.LogSink { return s }

func (s *sink) WithValues(kv ...any) logr.LogSink {
	return &sink{r: s.r, values: append(append([]any{}, s.values...), kv...)}
}

func (s *sink) Info(_ int, msg string, kv ...any) {
	if msg != "Reconciling" {
		return
	}
	var kind, name string
	all := append(append([]any{}, s.values...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		switch all[i] {
		case "controllerKind":
			kind, _ = all[i+1].(string)
		case "name":
			name, _ = all[i+1].(string)
		}
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.by[kind] == nil {
		s.r.by[kind] = map[string]int{}
	}
	s.r.by[kind][name]++
}

// done ends a pod DONE after d.
func done(d time.Duration) fakekubelet.Ending {
	m := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "did it", ExitReason: contract.ReasonEndTurn, Turns: 3}
	b, _ := m.Encode()
	return fakekubelet.Ending{After: d, ExitCode: int32(m.ExitCode()), Message: string(b)}
}

// poolOf is the pool an object of these tests is in: its name's prefix.
func poolOf(name string) string {
	pool, _, _ := strings.Cut(name, "-")
	return pool
}

func shardOf(pool string) string {
	for name, s := range shards {
		if s.serves(pool + "-") {
			return name
		}
	}
	return ""
}

// newRun is a run of pool: by rigRef when rig is set, else by a rigSelector
// pinned to its pool, as the shard policy asks.
func newRun(ns, name, pool, rig string) *farmv1.AgentRun {
	run := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{farmv1.LabelPool: pool}},
		Spec: farmv1.AgentRunSpec{
			Trigger: "Set a 5 minute timer in Clock.",
			Model:   farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/timer", BaseURL: "http://127.0.0.1:1/v1"},
		},
	}
	if rig != "" {
		run.Spec.RigRef = &farmv1.RigReference{Name: rig}
	} else {
		run.Spec.RigSelector = &farmv1.RigSelector{MatchLabels: map[string]string{farmv1.LabelPool: pool}}
	}
	return run
}

// watchLeases records, from a watch of the API server (not a manager's
// cache), every rig Lease held by a run of another pool than its rig's, or
// not carrying its holder's pool.
func watchLeases(t *testing.T, ns string) func() []string {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &coordinationv1.LeaseList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var bad []string
	seen := 0
	go func() {
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			run := l.Labels[farmv1.LabelRun]
			if run == "" {
				continue
			}
			mu.Lock()
			seen++
			if rigPool, runPool := poolOf(l.Name), poolOf(run); rigPool != runPool || l.Labels[farmv1.LabelPool] != runPool {
				bad = append(bad, fmt.Sprintf("Lease %s (rig of pool %s, shard %s) held by run %s (pool %s, shard %s), labelled pool %q",
					l.Name, rigPool, shardOf(rigPool), run, runPool, shardOf(runPool), l.Labels[farmv1.LabelPool]))
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		w.Stop()
		mu.Lock()
		defer mu.Unlock()
		if seen == 0 {
			bad = append(bad, "the watch saw no Lease held at all")
		}
		return bad
	}
}

// Two shards side by side, 100 runs each: every run succeeds, no rig's
// Lease is ever held by a run of another pool, and each manager reconciles
// its own runs and rigs and never one of the other shard's.
func TestShardsRunSideBySide(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	leases := watchLeases(t, ns)
	rigs := map[string][]string{}
	for pool, n := range map[string]int{"a": 8, "b": 4, "c": 4} {
		for i := range n {
			name := fmt.Sprintf("%s-rig-%02d", pool, i)
			env.MakeRig(t, ns, name, map[string]string{farmv1.LabelPool: pool})
			rigs[pool] = append(rigs[pool], name)
		}
	}
	var runs []string
	for shard, pools := range map[string][]string{"a": {"a"}, "b": {"b", "c"}} {
		for i := range 100 {
			pool := pools[i%len(pools)]
			name := fmt.Sprintf("%s-run-%03d", pool, i)
			rig := ""
			if i%4 == 3 { // a quarter by name, the rest by selector
				rig = rigs[pool][i%len(rigs[pool])]
			}
			if err := k8s.Create(ctx, newRun(ns, name, pool, rig)); err != nil {
				t.Fatalf("shard %s: %v", shard, err)
			}
			runs = append(runs, name)
		}
	}

	deadline := time.Now().Add(3 * time.Minute)
	for {
		var l farmv1.AgentRunList
		if err := k8s.List(ctx, &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		succeeded, failed := 0, []string{}
		for _, r := range l.Items {
			switch r.Status.Phase {
			case farmv1.RunSucceeded:
				succeeded++
			case farmv1.RunFailed, farmv1.RunCancelled:
				failed = append(failed, r.Name+": "+string(r.Status.Phase))
			}
		}
		if len(failed) > 0 {
			t.Fatalf("runs ended otherwise than Succeeded: %v", failed)
		}
		if succeeded == len(runs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs succeeded within 3 minutes", succeeded, len(runs))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d runs succeeded", len(runs))

	if bad := leases(); len(bad) > 0 {
		t.Errorf("rig Leases held across pools:\n  %s", strings.Join(bad, "\n  "))
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelKind: "attempt"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if run := p.Labels[farmv1.LabelRun]; p.Labels[farmv1.LabelPool] != poolOf(run) || poolOf(p.Labels[farmv1.LabelRig]) != poolOf(run) {
			t.Errorf("pod %s of run %s on rig %s carries pool %q", p.Name, run, p.Labels[farmv1.LabelRig], p.Labels[farmv1.LabelPool])
		}
	}
	if len(pods.Items) < len(runs) {
		t.Errorf("%d attempt pods for %d runs", len(pods.Items), len(runs))
	}

	for name, s := range shards {
		for _, kind := range []string{"AgentRun", "DeviceRig"} {
			own, others := s.reconciles.count(kind, s)
			t.Logf("shard %s: %d %s reconciles of its own, %d of the other shard's", name, own, kind, others)
			if own == 0 {
				t.Errorf("shard %s reconciled none of its own %ss: the count does not see reconciles", name, kind)
			}
			if others != 0 {
				t.Errorf("shard %s reconciled the other shard's %ss: %v", name, kind, s.reconciles.foreign(kind, s))
			}
		}
	}
}

// A rigRef run naming a rig of another pool fails InvalidConfig, naming both
// pools: whether the rig is another shard's (only the API server shows it
// to the run's manager) or in another pool of its own shard. It takes no
// Lease. A run naming its own pool's rig succeeds.
func TestRigRefInAnotherPool(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, rig := range []string{"a-rig", "b-rig", "c-rig"} {
		env.MakeRig(t, ns, rig, map[string]string{farmv1.LabelPool: poolOf(rig)})
	}
	for _, r := range []*farmv1.AgentRun{
		newRun(ns, "a-cross", "a", "b-rig"), // b-rig is shard b's
		newRun(ns, "b-cross", "b", "c-rig"), // c-rig is shard b's too, in pool c
		newRun(ns, "a-own", "a", "a-rig"),
	} {
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for run, want := range map[string]string{
		"a-cross": "rig b-rig is in pool b but run a-cross is in pool a (label farm.clawfarm.dev/pool): name a rig of pool a in spec.rigRef, or create the run with farm.clawfarm.dev/pool=b",
		"b-cross": "rig c-rig is in pool c but run b-cross is in pool b (label farm.clawfarm.dev/pool): name a rig of pool b in spec.rigRef, or create the run with farm.clawfarm.dev/pool=c",
	} {
		r := waitRun(t, ns, run, func(r *farmv1.AgentRun) bool { return r.Status.Phase == farmv1.RunFailed })
		c := condition(r, farmv1.ConditionSucceeded)
		if c == nil || c.Reason != farmv1.ReasonInvalidConfig || c.Message != want {
			t.Errorf("run %s: condition %+v, want InvalidConfig: %s", run, c, want)
		}
	}
	waitRun(t, ns, "a-own", func(r *farmv1.AgentRun) bool { return r.Status.Phase == farmv1.RunSucceeded })
	for _, rig := range []string{"b-rig", "c-rig"} {
		var l coordinationv1.Lease
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: rig}, &l); err == nil {
			t.Errorf("rig %s was leased to %s", rig, l.Labels[farmv1.LabelRun])
		}
	}
	if own, _ := shards["a"].reconciles.count("AgentRun", shards["a"]); own == 0 {
		t.Error("shard a reconciled no run")
	}
}

func condition(r *farmv1.AgentRun, typ string) *metav1.Condition {
	for i := range r.Status.Conditions {
		if r.Status.Conditions[i].Type == typ {
			return &r.Status.Conditions[i]
		}
	}
	return nil
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
	t.Fatalf("run %s/%s did not reach the expected state; phase %s, conditions %+v", ns, name, run.Status.Phase, run.Status.Conditions)
	return nil
}
