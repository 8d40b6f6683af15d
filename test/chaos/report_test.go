package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// report prints the figures and fails unless every safety figure is 0.
func (h *harness) report(wall time.Duration, runs []farmv1.AgentRun) {
	t := h.t
	byName := map[string]*farmv1.AgentRun{}
	for i := range runs {
		byName[runs[i].Name] = &runs[i]
	}
	var lost, countedTwice, beyondMax, orphanFollowUps, lostFollowUps, joinedAlone, joinedLost []string
	joins := map[string]int{}
	var ledgerPods []string // every pod the kubelet ran a process for
	for _, ivs := range h.kubelet.Ledger() {
		for _, iv := range ivs {
			ledgerPods = append(ledgerPods, iv.Pod)
		}
	}
	for i := range runs {
		r := &runs[i]
		// A run that joined a session never runs alone too, and its session
		// lists it: its trigger reached that session.
		if into := r.Status.CollectedInto + r.Status.SteeredInto; into != "" {
			joins[string(r.Spec.QueueMode)]++
			if len(r.Status.Attempts) > 0 || slices.ContainsFunc(ledgerPods, func(p string) bool { return strings.Contains(p, r.Name+"-a") }) {
				joinedAlone = append(joinedAlone, r.Name)
			}
			if s := byName[into]; s == nil || !slices.ContainsFunc(s.Status.Joined, func(j farmv1.JoinedRun) bool { return j.Name == r.Name }) {
				joinedLost = append(joinedLost, r.Name+" → "+into)
			}
		}
		if !r.Status.Phase.Finished() {
			lost = append(lost, fmt.Sprintf("%s (%s)", r.Name, r.Status.Phase))
		}
		seen := map[string]bool{}
		counted := 0
		for _, a := range r.Status.Attempts {
			if seen[a.Pod] {
				countedTwice = append(countedTwice, r.Name+"/"+a.Pod)
			}
			seen[a.Pod] = true
			if a.Counted {
				counted++
			}
		}
		if counted > int(r.Spec.Limits.MaxAttempts) || r.Status.Attempt > r.Spec.Limits.MaxAttempts {
			beyondMax = append(beyondMax, fmt.Sprintf("%s (%d counted, attempt %d)", r.Name, counted, r.Status.Attempt))
		}
		if p := r.Labels[farmv1.LabelParent]; p != "" {
			parent := byName[p]
			if (parent == nil || parent.Status.Phase == farmv1.RunCancelled) && r.Status.Phase != farmv1.RunCancelled {
				orphanFollowUps = append(orphanFollowUps, r.Name)
			}
		}
		if r.Status.Sentinel == string(contract.Wait) && r.Status.Phase != farmv1.RunCancelled && r.Labels[farmv1.LabelParent] == "" {
			if fu := r.Status.FollowUp; fu == nil || fu.Run == "" || byName[fu.Run] == nil {
				lostFollowUps = append(lostFollowUps, r.Name)
			}
		}
	}
	var leases coordinationv1.LeaseList
	if err := h.c.List(context.Background(), &leases, client.InNamespace(ns), client.HasLabels{farmv1.LabelRunUID}); err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, l := range leases.Items {
		held = append(held, l.Name)
	}
	var slots coordinationv1.LeaseList
	if err := h.c.List(context.Background(), &slots, client.InNamespace(ns), client.MatchingLabels{farmv1.LabelKind: farmv1.KindModelAccountSlot}); err != nil {
		t.Fatal(err)
	}
	for _, l := range slots.Items {
		held = append(held, l.Name)
	}
	keyed := map[string]bool{}
	for i := range runs {
		if ref := runs[i].Spec.Model.APIKeySecretRef; ref != nil && ref.Name == accountKey {
			keyed[runs[i].Name] = true
		}
	}
	overCap, mostKeyed := overTheCap(h.kubelet.Ledger(), keyed, h.sc.accountCap)
	double := h.kubelet.Violations()
	created := map[string]time.Time{}
	for i := range runs {
		created[runs[i].Name] = runs[i].CreationTimestamp.Time
	}
	gaps := rigFreeToNextPod(h.kubelet.Ledger(), created)
	h.mu.Lock()
	cancels, kills, partitions := len(h.cancelled), h.userKills, h.partitions
	h.mu.Unlock()

	h.agent.mu.Lock()
	agentKills, agentPauses := h.agent.kills, h.agent.pauses
	h.agent.mu.Unlock()
	h.node.mu.Lock()
	kubeletKills, containerdKills, kubeletPauses := h.node.kubeletKills, h.node.containerdKills, h.node.pauses
	h.node.mu.Unlock()
	fmt.Printf("\nclawfarm chaos: %d rigs (+%d on a real rignode, +%d on a real kubelet), %d runs (+%d follow-ups), %d cancelled, %d pods deleted by a user,\n"+
		"  %d manager SIGKILLs (every %s), %d node partitions (every %s, %s–%s each),\n"+
		"  %d rignode SIGKILLs (every %s, down 5 s), %d rignode pauses (%s),\n"+
		"  %d kubelet and %d containerd SIGKILLs (one every %s, down 5 s), %d kubelet pauses (%s)\n",
		h.sc.rigs, h.sc.rignodeRigs, h.sc.kubeletRigs, h.sc.runs, len(runs)-h.sc.runs, cancels, kills, h.managerKills, h.sc.killEvery,
		partitions, h.sc.partitionEvery, h.sc.partitionMin, h.sc.partitionMax,
		agentKills, h.sc.rignodeKillEvery, agentPauses, h.sc.pauseFor,
		kubeletKills, containerdKills, h.sc.kubeletKillEvery, kubeletPauses, h.sc.pauseFor)
	figure := func(name string, bad []string) {
		fmt.Printf("  %-44s %d", name, len(bad))
		if len(bad) > 0 {
			fmt.Printf("   %s", strings.Join(bad[:min(len(bad), 5)], ", "))
			t.Errorf("%s: %d (%s)", name, len(bad), strings.Join(bad, ", "))
		}
		fmt.Println()
	}
	figure("double sessions (the kubelet's process ledger)", double)
	figure("double sessions (rignode rigs' locks)", lockLines(h.agent.rigsDir, overlapsFile))
	figure("double sessions (kubelet rigs' locks)", lockLines(h.node.rigsDir, overlapsFile))
	figure("lost runs (never finished)", lost)
	figure("attempts recorded twice", countedTwice)
	figure("attempts beyond maxAttempts", beyondMax)
	figure("follow-ups of cancelled or deleted parents", orphanFollowUps)
	figure("follow-ups lost (a WAIT with no child)", lostFollowUps)
	figure("Leases held at the end (rigs' and slots')", held)
	figure("sessions over the model account's cap", overCap)
	figure("joined runs that also ran alone", joinedAlone)
	figure("joined runs their session does not list", joinedLost)
	h.gate.mu.Lock()
	admitted, intruders, strangers, strangeIn := h.gate.admitted, h.gate.intruders, h.gate.strangers, h.gate.strangeIn
	h.gate.mu.Unlock()
	figure("rig calls from runs without the rig's Lease", intruders)
	var strangersIn []string
	if strangeIn > 0 {
		strangersIn = []string{fmt.Sprintf("%d of %d calls without a token answered", strangeIn, strangers)}
	}
	figure("strangers' rig calls the gateway let through", strangersIn)
	fmt.Printf("  %-44s %d collected, %d steered\n", "runs that joined a session", joins[string(farmv1.QueueModeCollect)], joins[string(farmv1.QueueModeSteer)])
	fmt.Printf("  %-44s %d at most, cap %d, %d of its runs\n", "capped model account's sessions at once", mostKeyed, h.sc.accountCap, len(keyed))
	rignodeSessions, kubeletSessions := len(lockLines(h.agent.rigsDir, sessionsFile)), len(lockLines(h.node.rigsDir, sessionsFile))
	runtimes := h.node.runtimes()
	fmt.Printf("  %-44s %d on rignode, %d on the kubelet host (its pods' runtimes: %v)\n", "sessions played by real processes", rignodeSessions, kubeletSessions, runtimes)
	calls := callOutcomes(h.agent.rigsDir, h.node.rigsDir)
	fmt.Printf("  %-44s %d reached the rig, sessions saw %v; %d strangers' calls refused\n", "rig calls through the gateway", admitted, calls, strangers-strangeIn)
	// The gateway lets the Lease holders' sessions in: most sessions'
	// calls reach the rig (a session whose run was cancelled, or whose pod
	// the manager gave up on, is refused, rightly), and strangers did call.
	if sessions := rignodeSessions + kubeletSessions; admitted == 0 || calls["admitted"] < sessions/2 || strangers == 0 {
		t.Errorf("rig calls: %d reached the rig, the %d sessions saw %v, %d strangers' calls: the gateway measured nothing", admitted, sessions, calls, strangers)
	}
	// The locks count nothing unless sessions ran there, and the kubelet
	// host's ran as containerd's containers.
	if rignodeSessions == 0 || kubeletSessions == 0 {
		t.Errorf("sessions on rignode %d, on the kubelet host %d: the locks measured nothing", rignodeSessions, kubeletSessions)
	}
	if n := runtimes["containerd"]; n == 0 || len(runtimes) != 1 {
		t.Errorf("the kubelet host's loop pods ran under %v; want containerd alone", runtimes)
	}
	fmt.Printf("  %-44s %.1f s\n", "wall time", wall.Seconds())
	fmt.Printf("  %-44s %.1f\n", "runs per minute", float64(len(runs))/wall.Minutes())
	if len(gaps) > 0 {
		fmt.Printf("  %-44s p50 %.2f s   p99 %.2f s   (%d hand-overs)\n", "rig free → next pod", pct(gaps, 50).Seconds(), pct(gaps, 99).Seconds(), len(gaps))
	}
}

// rigFreeToNextPod is, for every rig, the time from one process's end to
// the next one's start, when the next one's run already existed as the rig
// came free (a follow-up created a minute later is not a slow hand-over).
func rigFreeToNextPod(ledger map[string][]fakekubelet.Interval, created map[string]time.Time) []time.Duration {
	var out []time.Duration
	for _, ivs := range ledger {
		for i := 1; i < len(ivs); i++ {
			prev, next := ivs[i-1], ivs[i]
			_, pod, _ := strings.Cut(next.Pod, "/")
			run := pod[:strings.LastIndex(pod, "-a")]
			if c, ok := created[run]; !prev.End.IsZero() && ok && !c.After(prev.End) {
				out = append(out, next.Start.Sub(prev.End))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// overTheCap reads the ledger for the sessions of the runs in keyed at
// once: every start that made them more than limit, and the most there
// were. An end comes before a start at the same instant.
func overTheCap(ledger map[string][]fakekubelet.Interval, keyed map[string]bool, limit int) ([]string, int) {
	type edge struct {
		at    time.Time
		delta int
		pod   string
	}
	var edges []edge
	for _, ivs := range ledger {
		for _, iv := range ivs {
			_, pod, _ := strings.Cut(iv.Pod, "/")
			if !keyed[pod[:strings.LastIndex(pod, "-a")]] {
				continue
			}
			edges = append(edges, edge{iv.Start, 1, pod})
			if !iv.End.IsZero() {
				edges = append(edges, edge{iv.End, -1, pod})
			}
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	var over []string
	live, most := 0, 0
	for _, e := range edges {
		live += e.delta
		most = max(most, live)
		if e.delta > 0 && live > limit {
			over = append(over, fmt.Sprintf("%s started as session %d", e.pod, live))
		}
	}
	return over, most
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}
