package agentrun_test

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// makeAccount creates a model-key Secret capped at sessions (0: no cap).
func makeAccount(t *testing.T, ns, name string, sessions int) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{admission.LabelModelKey: "true"}},
		StringData: map[string]string{"key": "s3cret"}}
	if sessions > 0 {
		s.Annotations = map[string]string{farmv1.AnnotationMaxSessions: fmt.Sprint(sessions)}
	}
	create(t, s)
}

func withKey(run *farmv1.AgentRun, secret string) *farmv1.AgentRun {
	run.Spec.Model.APIKeySecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "key"}
	return run
}

// gate holds each run's pods until the test lets that run's session end.
type gate struct {
	mu  sync.Mutex
	end map[string]bool
}

func (g *gate) script(run string) func(*corev1.Pod) fakekubelet.Ending {
	return func(*corev1.Pod) fakekubelet.Ending {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.end[run] {
			return ends(contract.Done, true, "done", 0)
		}
		return fakekubelet.Ending{Hang: true}
	}
}

func (g *gate) open(run string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.end[run] = true
}

// waitSession waits until the run is Running and its attempt's process
// has started (the pod is Running): the ledger then holds its session.
func waitSession(t *testing.T, ns, run string) {
	t.Helper()
	waitPhase(t, ns, run, farmv1.RunRunning)
	eventually(t, run+"'s pod Running", func() bool {
		return slices.ContainsFunc(podsOf(t, ns, run), func(p corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	})
}

// mostAtOnce is the most processes the ledger shows live at one moment on
// the namespace's rigs, of the runs not in except: a process's end comes
// before a start at the same instant (a slot goes back only once its pod
// has ended).
func mostAtOnce(ns string, except ...string) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for rig, ivs := range kubelet.Ledger() {
		if !strings.HasPrefix(rig, ns+"/") {
			continue
		}
		for _, iv := range ivs {
			if slices.ContainsFunc(except, func(run string) bool { return strings.HasPrefix(iv.Pod, ns+"/"+run+"-a") }) {
				continue
			}
			edges = append(edges, edge{iv.Start, 1})
			if !iv.End.IsZero() {
				edges = append(edges, edge{iv.End, -1})
			}
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	live, most := 0, 0
	for _, e := range edges {
		live += e.delta
		most = max(most, live)
	}
	return most
}

// slotHolders are the runs holding the namespace's model-account slots, sorted.
func slotHolders(t *testing.T, ns string) []string {
	t.Helper()
	var slots coordinationv1.LeaseList
	if err := k8s.List(t.Context(), &slots, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelKind: farmv1.KindModelAccountSlot}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range slots.Items {
		out = append(out, l.Labels[farmv1.LabelRun])
	}
	sort.Strings(out)
	return out
}

// A model account capped at 2 sessions, 6 runs on 6 free rigs with its
// key: 2 run, 4 wait Queued with ModelAccountBusy and their place, holding
// no rig, so a run of another account takes one of their rigs meanwhile;
// each session that ends lets in exactly the oldest waiting run. The ground
// truth is the fake kubelet's ledger: never more than 2 live processes.
func TestModelAccountCapsSessionsFIFO(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeAccount(t, ns, "acct-key", 2)
	g := &gate{end: map[string]bool{}}
	const n = 6
	name := func(i int) string { return fmt.Sprintf("r%d", i) }
	for i := 0; i < n; i++ {
		makeRig(t, ns, fmt.Sprintf("rig-%d", i), nil)
	}
	for i := 0; i < n; i++ {
		scripts.set(ns, name(i), g.script(name(i)))
		create(t, withKey(newRun(ns, name(i), fmt.Sprintf("rig-%d", i)), "acct-key"))
	}
	waitSession(t, ns, "r0")
	waitSession(t, ns, "r1")
	// The place is the one the run's reconcile read: r0 and r1 may not show
	// their slots yet, and then count among the runs ahead.
	busy := regexp.MustCompile(`^waiting for model account acct-key: [0-2] of 2 sessions in use, place [1-6] in queue$`)
	for i := 2; i < n; i++ {
		run := waitRun(t, ns, name(i), func(r *farmv1.AgentRun) bool {
			c := condition(r, farmv1.ConditionRigLeased)
			return c != nil && c.Reason == farmv1.ReasonModelAccountBusy
		})
		c := condition(run, farmv1.ConditionRigLeased)
		if run.Status.Phase != farmv1.RunQueued || !busy.MatchString(c.Message) {
			t.Errorf("%s: phase %s, RigLeased %q; want Queued, %q", run.Name, run.Status.Phase, c.Message, busy)
		}
		if h := leaseHolder(t, ns, fmt.Sprintf("rig-%d", i)); h != "" {
			t.Errorf("rig-%d is held by %s while its run waits for the model account", i, h)
		}
	}
	eventually(t, "an Event says r5 waits for the model account", func() bool {
		for _, e := range runEventsOf(t, ns, "r5") {
			if e.Reason == farmv1.ReasonModelAccountBusy && strings.Contains(e.Note, "waiting for model account acct-key") {
				return true
			}
		}
		return false
	})

	// The metric: the account's sessions and its queue.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(agentrun.NewRunPhaseCollector(client.NewNamespacedClient(k8s, ns)))
	eventually(t, "clawfarm_model_account_sessions 2, clawfarm_model_account_queued 4", func() bool {
		return testenv.MetricValue(t, reg, "clawfarm_model_account_sessions", "namespace", ns, "secret", "acct-key") == 2 &&
			testenv.MetricValue(t, reg, "clawfarm_model_account_queued", "namespace", ns, "secret", "acct-key") == 4
	})

	// A run of no capped account takes a rig a waiting run would have had:
	// the waiting run is handed no rig.
	scripts.set(ns, "other", byPod(nil, ends(contract.Done, true, "ok", 50*time.Millisecond)))
	create(t, newRun(ns, "other", "rig-5"))
	waitPhase(t, ns, "other", farmv1.RunSucceeded)
	if p := getRun(t, ns, "r5").Status.Phase; p != farmv1.RunQueued {
		t.Fatalf("r5 is %s while its account is full, want Queued", p)
	}

	// Each session that ends lets in the oldest waiting run, and only it.
	for i := 0; i < n; i++ {
		g.open(name(i))
		waitPhase(t, ns, name(i), farmv1.RunSucceeded)
		if next := i + 2; next < n {
			waitSession(t, ns, name(next))
			for j := next + 1; j < n; j++ {
				if pods := podsOf(t, ns, name(j)); len(pods) != 0 {
					t.Fatalf("%s has a pod once %s ended, before the older %s's turn", name(j), name(i), name(next+1))
				}
			}
		}
		if most := mostAtOnce(ns, "other"); most > 2 {
			t.Fatalf("%d sessions at once on a model account capped at 2", most)
		}
	}
	if most := mostAtOnce(ns, "other"); most != 2 {
		t.Errorf("at most %d sessions at once, want the cap, 2", most)
	}
	eventually(t, "every slot given back", func() bool { return len(slotHolders(t, ns)) == 0 })
}

// The cap under races: two managers (no leader election), 16 selector
// runs of one account capped at 3 competing for 8 rigs. From the fake
// kubelet's ledger: never more than 3 sessions at once, and every run ends.
func TestModelAccountCapUnderRaces(t *testing.T) {
	ns := namespace(t)
	makeAccount(t, ns, "shared-key", 3)
	for i := 0; i < 8; i++ {
		makeRig(t, ns, fmt.Sprintf("rig-%d", i), map[string]string{"pool": "race"})
	}
	stopSecond, secondDone := startManager()
	defer func() { stopSecond(); <-secondDone }()
	const runs = 16
	for i := 0; i < runs; i++ {
		name := fmt.Sprintf("r%02d", i)
		scripts.set(ns, name, byPod(nil, ends(contract.Done, true, "ok", 150*time.Millisecond)))
		run := withKey(newRun(ns, name, ""), "shared-key")
		run.Spec.RigRef, run.Spec.RigSelector = nil, &farmv1.RigSelector{MatchLabels: map[string]string{"pool": "race"}}
		create(t, run)
	}
	for i := 0; i < runs; i++ {
		run := waitRun(t, ns, fmt.Sprintf("r%02d", i), func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
		if run.Status.Phase != farmv1.RunSucceeded || len(run.Status.Attempts) != 1 {
			t.Fatalf("run %s: phase %s, attempts %+v", run.Name, run.Status.Phase, run.Status.Attempts)
		}
	}
	most := mostAtOnce(ns)
	if most > 3 {
		t.Fatalf("%d sessions at once on a model account capped at 3", most)
	}
	t.Logf("at most %d sessions at once of %d runs on %d rigs, cap 3", most, runs, 8)
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("two live pods on one rig: %v", v)
	}
}

// Collected runs do not count twice: a session that takes collect runs
// into it holds one slot of the account, and the collected runs wait for
// no slot of their own once they are in it.
func TestModelAccountCountsACollectedSessionOnce(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeAccount(t, ns, "one-key", 1)
	makeRig(t, ns, "rig-a", nil)
	makeRig(t, ns, "rig-b", nil)
	first := gated(ns, "first", ends(contract.Done, true, "first done", 0))
	create(t, withKey(newRun(ns, "first", "rig-b"), "one-key"))
	waitSession(t, ns, "first")
	// Created in name order: c0 is the oldest (creation times have whole
	// seconds, and a tie goes by name), the account's next run.
	for _, name := range []string{"c0", "c1", "c2"} {
		create(t, withKey(modeRun(ns, name, "rig-a", farmv1.QueueModeCollect), "one-key"))
	}
	for _, name := range []string{"c0", "c1", "c2"} {
		waitRun(t, ns, name, func(r *farmv1.AgentRun) bool {
			c := condition(r, farmv1.ConditionRigLeased)
			return c != nil && c.Reason == farmv1.ReasonModelAccountBusy
		})
	}
	first.Store(true)
	s := waitPhase(t, ns, "c0", farmv1.RunSucceeded)
	if len(s.Status.Joined) != 2 {
		t.Fatalf("c0 joined %+v, want c1 and c2", s.Status.Joined)
	}
	for _, name := range []string{"c1", "c2"} {
		run := waitPhase(t, ns, name, farmv1.RunSucceeded)
		if run.Status.CollectedInto != "c0" || len(podsOf(t, ns, name)) != 0 {
			t.Errorf("%s: collectedInto %q, %d pods; want c0, none", name, run.Status.CollectedInto, len(podsOf(t, ns, name)))
		}
	}
	if most := mostAtOnce(ns); most != 1 {
		t.Errorf("at most %d sessions at once, want 1", most)
	}
}

// The cap holds across a manager restart: the new manager counts the
// slots from the API server, so the waiting run stays waiting until the
// session that holds the slot ends.
func TestModelAccountCapHoldsAcrossRestart(t *testing.T) {
	ns := namespace(t)
	makeAccount(t, ns, "restart-key", 1)
	makeRig(t, ns, "rig-a", nil)
	makeRig(t, ns, "rig-b", nil)
	holder := gated(ns, "r1-holder", ends(contract.Done, true, "done", 0))
	create(t, withKey(newRun(ns, "r1-holder", "rig-a"), "restart-key"))
	waitSession(t, ns, "r1-holder")
	create(t, withKey(newRun(ns, "r2-waiter", "rig-b"), "restart-key"))
	waitRun(t, ns, "r2-waiter", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionRigLeased)
		return c != nil && c.Reason == farmv1.ReasonModelAccountBusy
	})
	stopMgr()
	<-mgrDone
	stopMgr, mgrDone = startManager()
	// A run created now is reconciled by the new manager at once; it too
	// must find the account full.
	create(t, withKey(newRun(ns, "r3-newcomer", "rig-b"), "restart-key"))
	newcomer := waitRun(t, ns, "r3-newcomer", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionRigLeased)
		return c != nil && c.Reason == farmv1.ReasonModelAccountBusy
	})
	if c := condition(newcomer, farmv1.ConditionRigLeased); !strings.Contains(c.Message, "1 of 1 sessions in use, place 2 in queue") {
		t.Errorf("r3-newcomer: %q, want 1 of 1 sessions in use, place 2 (behind r2-waiter)", c.Message)
	}
	if n := len(podsOf(t, ns, "r2-waiter")); n != 0 {
		t.Fatalf("r2-waiter has %d pods after the restart while r1-holder runs", n)
	}
	holder.Store(true)
	waitPhase(t, ns, "r2-waiter", farmv1.RunSucceeded)
	waitPhase(t, ns, "r3-newcomer", farmv1.RunSucceeded)
	if most := mostAtOnce(ns); most != 1 {
		t.Errorf("at most %d sessions at once, want 1", most)
	}
}

// The cap holds when a session ends and its rig's next run is of the same
// full account: that run gets the slot with the rig (passSlot, which
// TestPassSlotHandsTheSlotWithTheRig pins), or, when it already waits for
// the account, the rig and the slot go back and whoever's turn it is takes
// the slot. Either way no more than 2 sessions ever run, and all end.
func TestModelAccountCapHoldsWhenARigPassesOn(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeAccount(t, ns, "pair-key", 2)
	for _, rig := range []string{"rig-a", "rig-b", "rig-c"} {
		makeRig(t, ns, rig, nil)
	}
	a := gated(ns, "a", ends(contract.Done, true, "a done", 0))
	create(t, withKey(newRun(ns, "a", "rig-a"), "pair-key"))
	waitSession(t, ns, "a")
	// b has its account's turn (a slot is free) but not its rig: it waits
	// for rig-a, holding no slot.
	b := gated(ns, "b", ends(contract.Done, true, "b done", 0))
	create(t, withKey(newRun(ns, "b", "rig-a"), "pair-key"))
	waitRun(t, ns, "b", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionRigLeased)
		return c != nil && c.Reason == farmv1.ReasonRigBusy
	})
	c := gated(ns, "c", ends(contract.Done, true, "c done", 0))
	create(t, withKey(newRun(ns, "c", "rig-b"), "pair-key"))
	waitSession(t, ns, "c")
	create(t, withKey(newRun(ns, "d", "rig-c"), "pair-key"))
	waitRun(t, ns, "d", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionRigLeased)
		return c != nil && c.Reason == farmv1.ReasonModelAccountBusy
	})
	a.Store(true) // rig-a's next run is b; the account stays full with b and c
	waitPhase(t, ns, "a", farmv1.RunSucceeded)
	waitSession(t, ns, "b")
	// Counted while b and c run, whose processes are open in the ledger:
	// the account is at its cap, and a ended before b started.
	if most := mostAtOnce(ns); most != 2 {
		t.Fatalf("at most %d sessions at once with b and c running, want 2", most)
	}
	b.Store(true)
	c.Store(true)
	waitPhase(t, ns, "d", farmv1.RunSucceeded)
	if most := mostAtOnce(ns); most > 2 {
		t.Errorf("%d sessions at once on a model account capped at 2", most)
	}
}

// Runs that took their rigs before their key Secret existed hold no
// slot: when the Secret appears capped at 1, only one of them gets a pod;
// the other gives its rig back and waits for the account, and starts once
// the first session ended.
func TestModelAccountKeyThatAppearsCapped(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig-a", nil)
	makeRig(t, ns, "rig-b", nil)
	gates := map[string]*atomic.Bool{}
	for _, name := range []string{"a", "b"} {
		gates[name] = gated(ns, name, ends(contract.Done, true, name+" done", 0))
		create(t, withKey(newRun(ns, name, "rig-"+name), "late-key"))
	}
	for _, name := range []string{"a", "b"} {
		waitRun(t, ns, name, func(r *farmv1.AgentRun) bool {
			c := condition(r, farmv1.ConditionModelKey)
			return c != nil && c.Reason == farmv1.ReasonModelKeyMissing && leaseHolder(t, ns, "rig-"+name) == name
		})
	}
	makeAccount(t, ns, "late-key", 1)
	var running, waiting string
	eventually(t, "one run Running, the other waiting for the account", func() bool {
		a, b := getRun(t, ns, "a"), getRun(t, ns, "b")
		for _, p := range [][2]*farmv1.AgentRun{{a, b}, {b, a}} {
			c := condition(p[1], farmv1.ConditionRigLeased)
			if p[0].Status.Phase == farmv1.RunRunning && c != nil && c.Reason == farmv1.ReasonModelAccountBusy {
				running, waiting = p[0].Name, p[1].Name
				return true
			}
		}
		return false
	})
	if n := len(podsOf(t, ns, waiting)); n != 0 {
		t.Fatalf("%s has %d pods while %s holds the account's one slot", waiting, n, running)
	}
	eventually(t, "the waiting run's rig given back", func() bool { return leaseHolder(t, ns, "rig-"+waiting) == "" })
	waitSession(t, ns, running)
	if most := mostAtOnce(ns); most != 1 {
		t.Fatalf("at most %d sessions at once while %s runs, want 1", most, running)
	}
	gates[running].Store(true)
	waitPhase(t, ns, running, farmv1.RunSucceeded)
	waitSession(t, ns, waiting)
	// Counted while the second session runs: the first ended before it began.
	if most := mostAtOnce(ns); most != 1 {
		t.Fatalf("at most %d sessions at once once %s runs, want 1", most, waiting)
	}
	gates[waiting].Store(true)
	waitPhase(t, ns, waiting, farmv1.RunSucceeded)
	if most := mostAtOnce(ns); most > 1 {
		t.Errorf("%d sessions at once on a model account capped at 1", most)
	}
}
