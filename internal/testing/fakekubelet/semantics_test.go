package fakekubelet

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hold is a finalizer the tests put on a pod to read its last status before
// it goes.
const hold = "test.clawfarm.dev/hold"

// scriptBook says how the shared kubelet ends each pod, by namespace/name;
// a pod it does not name hangs.
type scriptBook struct {
	mu sync.Mutex
	m  map[string]Ending
}

func (b *scriptBook) set(ns, pod string, e Ending) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[ns+"/"+pod] = e
}

func (b *scriptBook) script(pod *corev1.Pod) Ending {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.m[keyOf(pod)]; ok {
		return e
	}
	return Ending{Hang: true}
}

// runPod creates an attempt pod for rig whose affinity names node, scripted
// by e, with a deletion grace period of grace seconds and, with held, the
// hold finalizer.
func runPod(t *testing.T, ns, name, rig, node string, grace int64, held bool, e Ending) *corev1.Pod {
	t.Helper()
	book.set(ns, name, e)
	p := attemptPod(name, rig)
	p.Namespace = ns
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
	if held {
		p.Finalizers = []string{hold}
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// getPod reads the pod from the API server; nil when it is gone.
func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// waitPod polls the pod until ok (nil: gone), for up to 10 s.
func waitPod(t *testing.T, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := getPod(t, ns, name)
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: timed out waiting for %s; pod: %+v", ns, name, what, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func phase(want corev1.PodPhase) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == want }
}

func isGone(p *corev1.Pod) bool { return p == nil }

// graceZero: the kubelet deleted the pod with grace 0, its process dead.
func graceZero(p *corev1.Pod) bool {
	return p != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0
}

// release removes the hold finalizer, so a deleted pod can go.
func release(t *testing.T, p *corev1.Pod) {
	t.Helper()
	patch := client.MergeFrom(p.DeepCopy())
	p.Finalizers = nil
	if err := env.Client.Patch(context.Background(), p, patch); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func deletePod(t *testing.T, p *corev1.Pod, opts ...client.DeleteOption) time.Time {
	t.Helper()
	at := time.Now()
	if err := env.Client.Delete(context.Background(), p, opts...); err != nil {
		t.Fatal(err)
	}
	return at
}

// interval is the ledger's one interval of pod on rig (both by name in ns).
func interval(t *testing.T, ns, rig, pod string) (Interval, bool) {
	t.Helper()
	var found []Interval
	for _, iv := range kl.Ledger()[ns+"/"+rig] {
		if iv.Pod == ns+"/"+pod {
			found = append(found, iv)
		}
	}
	if len(found) > 1 {
		t.Fatalf("pod %s ran %d processes on %s: %+v", pod, len(found), rig, found)
	}
	if len(found) == 0 {
		return Interval{}, false
	}
	return found[0], true
}

// waitEnded waits for the process of pod to have ended, and returns its interval.
func waitEnded(t *testing.T, ns, rig, pod string) Interval {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if iv, ok := interval(t, ns, rig, pod); ok && !iv.End.IsZero() {
			return iv
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process of %s on %s never ended", pod, rig)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustLive(t *testing.T, ns, rig, pod string) Interval {
	t.Helper()
	iv, ok := interval(t, ns, rig, pod)
	if !ok || !iv.End.IsZero() {
		t.Fatalf("the process of %s on %s should be live: %+v (started: %v)", pod, rig, iv, ok)
	}
	return iv
}

// violationsIn are the kubelet's violations on the rigs of ns.
func violationsIn(ns string) []string {
	var out []string
	for _, v := range kl.Violations() {
		if strings.HasPrefix(v, "rig "+ns+"/") {
			out = append(out, v)
		}
	}
	return out
}

func terminatedOf(t *testing.T, p *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod %s has no terminated container: %+v", p.Name, p.Status)
	}
	return p.Status.ContainerStatuses[0].State.Terminated
}

func readyOf(t *testing.T, node string) corev1.NodeCondition {
	t.Helper()
	var n corev1.Node
	if err := env.Client.Get(context.Background(), types.NamespacedName{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	t.Fatalf("node %s has no Ready condition", node)
	return corev1.NodeCondition{}
}

func cutOff(t *testing.T, node string, unknownAfter time.Duration) {
	t.Helper()
	if err := kl.PartitionNode(context.Background(), node, unknownAfter); err != nil {
		t.Fatal(err)
	}
}

func heal(t *testing.T, node string) time.Time {
	t.Helper()
	at := time.Now()
	if err := kl.HealNode(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	return at
}

// A partitioned node's Ready condition turns Unknown, the kubelet writes
// nothing for its pods and starts none there, while its processes run on:
// one ends by its script while cut off, and its end (exit code, message) is
// reported only once the node is back, dated when it really happened.
func TestPartitionedNodeRunsOnAndReportsWhenBack(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-n")
	runPod(t, ns, "ends", "rig-a", node, 30, false, Ending{After: 1500 * time.Millisecond, Message: "done"})
	runPod(t, ns, "runs", "rig-b", node, 30, false, Ending{Hang: true})
	waitPod(t, ns, "ends", "Running", phase(corev1.PodRunning))
	waitPod(t, ns, "runs", "Running", phase(corev1.PodRunning))

	cutOff(t, node, 0)
	if c := readyOf(t, node); c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusUnknown" {
		t.Fatalf("Ready of a partitioned node: %+v", c)
	}
	runPod(t, ns, "late", "rig-c", node, 30, false, Ending{Hang: true})
	ended := waitEnded(t, ns, "rig-a", "ends")
	time.Sleep(300 * time.Millisecond) // room for a write that must not come
	if p := getPod(t, ns, "ends"); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("a partitioned node's kubelet wrote the pod's status: %+v", p.Status)
	}
	if p := getPod(t, ns, "late"); p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("a pod started on a partitioned node: %+v", p)
	}
	if _, started := interval(t, ns, "rig-c", "late"); started {
		t.Fatal("a process started on a partitioned node")
	}
	mustLive(t, ns, "rig-b", "runs")

	healedAt := heal(t, node)
	if c := readyOf(t, node); c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready of a healed node: %+v", c)
	}
	if !ended.End.Before(healedAt) {
		t.Fatalf("the process ended at %v, not while the node was cut off (healed at %v)", ended.End, healedAt)
	}
	p := waitPod(t, ns, "ends", "Succeeded", phase(corev1.PodSucceeded))
	if term := terminatedOf(t, p); term.ExitCode != 0 || term.Message != "done" || term.FinishedAt.After(healedAt) {
		t.Fatalf("reported ending: %+v (healed at %v)", term, healedAt)
	}
	waitPod(t, ns, "late", "Running", phase(corev1.PodRunning))
	if iv := mustLive(t, ns, "rig-c", "late"); iv.Start.Before(healedAt) {
		t.Fatalf("late started at %v, before its node came back at %v", iv.Start, healedAt)
	}
	mustLive(t, ns, "rig-b", "runs")
	if p := getPod(t, ns, "runs"); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("a pod still running after the partition: %+v", p.Status)
	}
}

// The node lifecycle controller's flip to Unknown comes after the grace the
// test chose, or never.
func TestPartitionFlipsReadyAfterItsGrace(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	later, never := env.MakeNode(t, ns+"-later"), env.MakeNode(t, ns+"-never")
	cutOff(t, later, 800*time.Millisecond)
	cutOff(t, never, -1)
	time.Sleep(300 * time.Millisecond)
	if c := readyOf(t, later); c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready flipped before its grace: %+v", c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for readyOf(t, later).Status != corev1.ConditionUnknown {
		if time.Now().After(deadline) {
			t.Fatal("Ready never turned Unknown")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := readyOf(t, never); c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready flipped though the test asked never: %+v", c)
	}
	heal(t, later)
	heal(t, never)
	if c := readyOf(t, later); c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Fatalf("Ready after heal: %+v", c)
	}
}

// A pod deleted while its node is cut off stays in the API, Terminating, past
// its grace period, its process running; back, the kubelet signals it, the
// process ends, the kubelet reports it and deletes the pod with grace 0.
func TestPodDeletedOnAPartitionedNodeStaysUntilTheNodeReturns(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-n")
	pod := runPod(t, ns, "doomed", "rig", node, 1, true, Ending{Hang: true})
	waitPod(t, ns, "doomed", "Running", phase(corev1.PodRunning))
	cutOff(t, node, 0)
	deletePod(t, pod)
	time.Sleep(3 * time.Second) // past the grace period and the kubelet's least grace
	p := getPod(t, ns, "doomed")
	if p == nil || p.DeletionTimestamp == nil || p.Status.Phase != corev1.PodRunning || *p.DeletionGracePeriodSeconds != 1 {
		t.Fatalf("a pod deleted on a cut-off node must stay Terminating and Running: %+v", p)
	}
	mustLive(t, ns, "rig", "doomed")

	healedAt := heal(t, node)
	p = waitPod(t, ns, "doomed", "Failed", phase(corev1.PodFailed))
	if term := terminatedOf(t, p); term.ExitCode != 143 {
		t.Fatalf("SIGTERM on return: %+v", term)
	}
	p = waitPod(t, ns, "doomed", "deleted with grace 0", graceZero)
	if iv := waitEnded(t, ns, "rig", "doomed"); iv.End.Before(healedAt) || iv.End.After(healedAt.Add(time.Second)) {
		t.Fatalf("the process ended at %v; the node came back at %v", iv.End, healedAt)
	}
	release(t, p)
	waitPod(t, ns, "doomed", "gone", isGone)
}

// Deletion sends SIGTERM: a process ends on it at once (exit 143), unless it
// ignores it, and then SIGKILL ends it when the grace period does (137).
func TestDeletedPodRunsUntilItsGracePeriodEnds(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-n")
	polite := runPod(t, ns, "polite", "rig-a", node, 30, true, Ending{Hang: true})
	stubborn := runPod(t, ns, "stubborn", "rig-b", node, 4, true, Ending{Hang: true, IgnoreSIGTERM: true})
	waitPod(t, ns, "polite", "Running", phase(corev1.PodRunning))
	waitPod(t, ns, "stubborn", "Running", phase(corev1.PodRunning))

	deletedAt := deletePod(t, polite)
	p := waitPod(t, ns, "polite", "Failed", phase(corev1.PodFailed))
	if term := terminatedOf(t, p); term.ExitCode != 143 {
		t.Fatalf("a process that heeds SIGTERM: %+v", term)
	}
	if iv := waitEnded(t, ns, "rig-a", "polite"); iv.End.Sub(deletedAt) > time.Second {
		t.Fatalf("SIGTERM took %v to end the process", iv.End.Sub(deletedAt))
	}
	release(t, waitPod(t, ns, "polite", "deleted with grace 0", graceZero))
	waitPod(t, ns, "polite", "gone", isGone)

	deletedAt = deletePod(t, stubborn)
	time.Sleep(2500 * time.Millisecond)
	if p := getPod(t, ns, "stubborn"); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("a process that ignores SIGTERM ended before its grace period: %+v", p.Status)
	}
	mustLive(t, ns, "rig-b", "stubborn")
	p = waitPod(t, ns, "stubborn", "Failed", phase(corev1.PodFailed))
	if term := terminatedOf(t, p); term.ExitCode != 137 {
		t.Fatalf("SIGKILL at the end of the grace period: %+v", term)
	}
	// The deletion's deadline is stored to the second: 4 s of grace end
	// between 3 and 4 s after the call.
	if iv := waitEnded(t, ns, "rig-b", "stubborn"); iv.End.Sub(deletedAt) < 2900*time.Millisecond || iv.End.Sub(deletedAt) > 4500*time.Millisecond {
		t.Fatalf("SIGKILL came %v after a deletion with 4 s of grace", iv.End.Sub(deletedAt))
	}
	release(t, p)
	waitPod(t, ns, "stubborn", "gone", isGone)
}

// A process stuck terminating keeps itself and its pod object for as long
// as the script says, past the grace period, and then dies.
func TestStuckTerminatingKeepsThePod(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-n")
	pod := runPod(t, ns, "stuck", "rig", node, 1, false, Ending{Hang: true, StuckTerminating: 3 * time.Second})
	waitPod(t, ns, "stuck", "Running", phase(corev1.PodRunning))
	deletedAt := deletePod(t, pod)
	time.Sleep(2500 * time.Millisecond) // past the grace period and the kubelet's least grace
	if p := getPod(t, ns, "stuck"); p == nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("a pod stuck terminating must stay, Running: %+v", p)
	}
	mustLive(t, ns, "rig", "stuck")
	waitPod(t, ns, "stuck", "gone", isGone)
	if iv := waitEnded(t, ns, "rig", "stuck"); iv.End.Sub(deletedAt) < 2900*time.Millisecond || iv.End.Sub(deletedAt) > 4*time.Second {
		t.Fatalf("stuck for %v, want 3 s", iv.End.Sub(deletedAt))
	}
}

// Image pull and configuration errors leave the pod Pending, bound, its
// container waiting with a kubelet's reason and message, and no process;
// such a pod deleted is reported Failed and let go.
func TestContainersThatNeverStart(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-n")
	runPod(t, ns, "pull", "rig-a", node, 30, false, ImageNotFound("loop", 500*time.Millisecond)) // the pod's image
	runPod(t, ns, "badname", "rig-b", node, 30, false, InvalidImageName("Loop:UPPER"))
	secret := runPod(t, ns, "nosecret", "rig-c", node, 30, true, MissingSecret("clawfarm-api-key"))

	waiting := func(reason, message string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			if p == nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
				return false
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w.Reason == reason && strings.Contains(w.Message, message)
		}
	}
	for _, c := range []struct{ pod, reason, message string }{
		{"pull", ReasonErrImagePull, `failed to pull and unpack image "loop"`},
		{"pull", ReasonImagePullBackOff, `Back-off pulling image "loop": ErrImagePull: rpc error: code = NotFound`},
		{"badname", ReasonInvalidImageName, `couldn't parse image name "Loop:UPPER": invalid reference format`},
		{"nosecret", ReasonCreateContainerConfigError, `secret "clawfarm-api-key" not found`},
	} {
		p := waitPod(t, ns, c.pod, c.reason, waiting(c.reason, c.message))
		if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != node {
			t.Fatalf("%s: want Pending and bound to %s: %+v", c.pod, node, p)
		}
	}
	if p := getPod(t, ns, "pull"); !strings.HasSuffix(p.Status.ContainerStatuses[0].State.Waiting.Message, ": not found") {
		t.Fatalf("back-off message: %q", p.Status.ContainerStatuses[0].State.Waiting.Message)
	}
	for _, rig := range []string{"rig-a", "rig-b", "rig-c"} {
		if l := kl.Ledger()[ns+"/"+rig]; len(l) != 0 {
			t.Fatalf("a container that never started ran a process on %s: %+v", rig, l)
		}
	}

	deletePod(t, secret)
	p := waitPod(t, ns, "nosecret", "Failed", phase(corev1.PodFailed))
	if term := terminatedOf(t, p); term.Reason != "ContainerStatusUnknown" {
		t.Fatalf("a deleted pod that never started: %+v", term)
	}
	p = waitPod(t, ns, "nosecret", "deleted with grace 0", graceZero)
	release(t, p)
}

// The kubelet's eviction ends the pod Failed, reason Evicted, with
// DisruptionTarget (TerminationByKubelet); the eviction API's deletes it
// gracefully with DisruptionTarget (EvictionByEvictionAPI), and the process
// meets SIGTERM.
func TestEvictionsCarryDisruptionTarget(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-n")
	runPod(t, ns, "pressure", "rig-a", node, 30, false, Ending{After: 300 * time.Millisecond, Evict: ByKubelet})
	runPod(t, ns, "drained", "rig-b", node, 30, true, Ending{After: 300 * time.Millisecond, Evict: ByEvictionAPI})

	disruption := func(p *corev1.Pod) *corev1.PodCondition {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
				return &p.Status.Conditions[i]
			}
		}
		return nil
	}
	p := waitPod(t, ns, "pressure", "Failed", phase(corev1.PodFailed))
	if c := disruption(p); p.Status.Reason != "Evicted" || c == nil || c.Status != corev1.ConditionTrue ||
		c.Reason != corev1.PodReasonTerminationByKubelet || c.Message != pressureMessage || p.DeletionTimestamp != nil {
		t.Fatalf("kubelet eviction: reason %q, condition %+v, deleted %v", p.Status.Reason, c, p.DeletionTimestamp)
	}
	if term := terminatedOf(t, p); term.ExitCode != 137 {
		t.Fatalf("kubelet eviction kills: %+v", term)
	}
	waitEnded(t, ns, "rig-a", "pressure")

	p = waitPod(t, ns, "drained", "Failed", phase(corev1.PodFailed))
	if c := disruption(p); c == nil || c.Reason != string(ByEvictionAPI) || p.DeletionTimestamp == nil {
		t.Fatalf("API eviction: condition %+v, deleted %v", c, p.DeletionTimestamp)
	}
	if term := terminatedOf(t, p); term.ExitCode != 143 {
		t.Fatalf("API eviction sends SIGTERM: %+v", term)
	}
	release(t, p)
	waitPod(t, ns, "drained", "gone", isGone)
}

// A force deletion on a cut-off node removes the pod object at once; its
// process runs on until the node returns and the kubelet kills it. The
// ledger shows that whole interval, and a pod started on the same rig
// meanwhile is a violation when the old process outlives SIGTERM.
func TestForceDeletedPodsProcessRunsUntilItsNodeReturns(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	n1, n2 := env.MakeNode(t, ns+"-n1"), env.MakeNode(t, ns+"-n2")
	stubborn := runPod(t, ns, "stubborn", "rig-1", n1, 30, false, Ending{Hang: true, IgnoreSIGTERM: true})
	polite := runPod(t, ns, "polite", "rig-2", n2, 30, false, Ending{Hang: true})
	waitPod(t, ns, "stubborn", "Running", phase(corev1.PodRunning))
	waitPod(t, ns, "polite", "Running", phase(corev1.PodRunning))
	cutOff(t, n1, 0)
	cutOff(t, n2, 0)
	deletePod(t, stubborn, client.GracePeriodSeconds(0))
	deletePod(t, polite, client.GracePeriodSeconds(0))
	if getPod(t, ns, "stubborn") != nil || getPod(t, ns, "polite") != nil {
		t.Fatal("a force-deleted pod without finalizers must go at once")
	}
	runPod(t, ns, "next-1", "rig-1", n1, 30, false, Ending{Hang: true})
	runPod(t, ns, "next-2", "rig-2", n2, 30, false, Ending{Hang: true})
	time.Sleep(500 * time.Millisecond)
	mustLive(t, ns, "rig-1", "stubborn")
	mustLive(t, ns, "rig-2", "polite")
	if _, ok := interval(t, ns, "rig-1", "next-1"); ok {
		t.Fatal("next-1 started on a cut-off node")
	}

	healedAt := heal(t, n1)
	heal(t, n2)
	waitPod(t, ns, "next-1", "Running", phase(corev1.PodRunning))
	waitPod(t, ns, "next-2", "Running", phase(corev1.PodRunning))
	old := waitEnded(t, ns, "rig-1", "stubborn")
	if d := old.End.Sub(healedAt); d < 1900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("the orphan ignoring SIGTERM was killed %v after its node came back, want the kubelet's 2 s", d)
	}
	if old.Node != n1 || old.Start.After(healedAt) {
		t.Fatalf("interval of the force-deleted pod: %+v", old)
	}
	if v := violationsIn(ns); len(v) != 1 || !strings.Contains(v[0], "rig "+ns+"/rig-1: "+ns+"/next-1 started while "+ns+"/stubborn was live") {
		t.Fatalf("violations %q, want next-1 over stubborn on rig-1 only", v)
	}
	if politeEnd, next := waitEnded(t, ns, "rig-2", "polite"), mustLive(t, ns, "rig-2", "next-2"); next.Start.Before(politeEnd.End) {
		t.Fatalf("next-2 started at %v, before the old process ended at %v", next.Start, politeEnd.End)
	}
}

// A pod for a node another agent runs (a real rignode beside the fake
// kubelet) is bound, as the scheduler would, and never run or written.
func TestForeignNodesPodsAreOnlyBound(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	node := env.MakeNode(t, ns+"-foreign")
	runPod(t, ns, "theirs", "rig-f", node, 30, false, Ending{After: 100 * time.Millisecond, Message: "done"})
	waitPod(t, ns, "theirs", "bound to "+node, func(p *corev1.Pod) bool { return p != nil && p.Spec.NodeName == node })
	time.Sleep(500 * time.Millisecond) // room for a start that must not come
	if p := getPod(t, ns, "theirs"); p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
		t.Fatalf("the fake kubelet ran a foreign node's pod: %+v", p.Status)
	}
	if _, ok := interval(t, ns, "rig-f", "theirs"); ok {
		t.Fatal("the fake kubelet started a process for a foreign node's pod")
	}
}
