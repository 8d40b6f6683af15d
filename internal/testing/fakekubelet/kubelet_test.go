package fakekubelet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// env is the envtest API server the kubelet's real-semantics tests run on;
// kl is the one kubelet they share (a second would drive the same pods), in
// the list mode the controllers' suites use; book holds its scripts.
var (
	env  *testenv.Env
	kl   *Kubelet
	book = &scriptBook{m: map[string]Ending{}}
)

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	kl = &Kubelet{Client: env.Client, Poll: 20 * time.Millisecond, Script: book.script,
		Foreign: func(node string) bool { return strings.HasSuffix(node, "-foreign") }}
	done := make(chan struct{})
	go func() { kl.Run(ctx); close(done) }()
	code := m.Run()
	cancel()
	<-done
	env.Stop()
	os.Exit(code)
}

func attemptPod(name, rig string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: name,
			Labels: map[string]string{farmv1.LabelKind: "attempt", farmv1.LabelRig: rig, farmv1.LabelRun: name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "loop", Image: "loop"}}},
	}
}

// Fed by a watch's events, the kubelet ends each pod as its script says, and
// it still notices two live pods on one rig — the check the exclusivity tests
// and the benchmark rely on.
func TestEventsDrivePodsAndCatchTwoOnOneRig(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	first, second, other := attemptPod("first", "rig-a"), attemptPod("second", "rig-a"), attemptPod("other", "rig-b")
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(first, second, other).WithStatusSubresource(&corev1.Pod{}).Build()
	k := &Kubelet{Client: c, Poll: 5 * time.Millisecond, EndOnly: true, Script: func(p *corev1.Pod) Ending {
		if strings.HasPrefix(p.Name, "first") {
			return Ending{Hang: true} // first is still live when second arrives
		}
		return Ending{After: 10 * time.Millisecond, ExitCode: 0, Message: "done"}
	}}
	events := k.Events()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	for _, p := range []*corev1.Pod{first, other, second} {
		events.OnAdd(p.DeepCopy(), false)
		time.Sleep(20 * time.Millisecond)
	}

	ended := func(name string) bool {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: "farm", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Status.Phase == corev1.PodSucceeded && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].State.Terminated != nil && p.Status.ContainerStatuses[0].State.Terminated.Message == "done"
	}
	deadline := time.Now().Add(5 * time.Second)
	for !(ended("other") && ended("second")) {
		if time.Now().After(deadline) {
			t.Fatal("the kubelet did not end the pods its events gave it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ended("first") {
		t.Fatal("a hanging pod was ended")
	}
	if got := k.Started(); got != 3 {
		t.Fatalf("started %d pods, want 3", got)
	}
	v := k.Violations()
	if len(v) != 1 || !strings.Contains(v[0], "rig farm/rig-a: farm/second started while farm/first was live") {
		t.Fatalf("violations %q, want exactly second over first on rig-a", v)
	}

	// A pod deleted while it runs is no longer live: a new pod on its rig is
	// no violation.
	hanging := attemptPod("first-c", "rig-c") // hangs, as every "first…" pod does
	if err := c.Create(ctx, hanging); err != nil {
		t.Fatal(err)
	}
	events.OnAdd(hanging, false)
	for k.Started() != 4 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("first-c never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Delete(ctx, hanging); err != nil {
		t.Fatal(err)
	}
	events.OnDelete(hanging)
	next := attemptPod("next-c", "rig-c")
	if err := c.Create(ctx, next); err != nil {
		t.Fatal(err)
	}
	events.OnAdd(next, false)
	for !ended("next-c") {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("next-c never ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v := k.Violations(); len(v) != 1 {
		t.Fatalf("violations after first-c was deleted: %q", v)
	}
}

// Fed by events, a partitioned node's kubelet writes nothing while its
// processes run on, hears no force deletion, and on its return reports the
// ending it missed and kills the process whose pod is gone.
func TestEventsPartitionAndHeal(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ends, orphan := attemptPod("ends", "rig-a"), attemptPod("orphan", "rig-b")
	for _, p := range []*corev1.Pod{ends, orphan} {
		p.Spec.NodeName = "n"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(ends, orphan, node).
		WithStatusSubresource(&corev1.Pod{}, &corev1.Node{}).Build()
	k := &Kubelet{Client: c, Poll: 5 * time.Millisecond, EndOnly: true, Script: func(p *corev1.Pod) Ending {
		if p.Name == "ends" {
			return Ending{After: 100 * time.Millisecond, Message: "done"}
		}
		return Ending{Hang: true}
	}}
	events := k.Events()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	events.OnAdd(ends.DeepCopy(), false)
	events.OnAdd(orphan.DeepCopy(), false)
	for deadline := time.Now().Add(5 * time.Second); k.Started() != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pods never started")
		}
	}
	if err := k.PartitionNode(ctx, "n", 0); err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := c.Get(ctx, types.NamespacedName{Name: "n"}, &n); err != nil || len(n.Status.Conditions) != 1 ||
		n.Status.Conditions[0].Status != corev1.ConditionUnknown {
		t.Fatalf("node after the cut: %+v (%v)", n.Status.Conditions, err)
	}
	if err := c.Delete(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	events.OnDelete(orphan)
	time.Sleep(300 * time.Millisecond)
	phaseOf := func(name string) corev1.PodPhase {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: "farm", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Status.Phase
	}
	l := k.Ledger()
	if len(l["farm/rig-a"]) != 1 || l["farm/rig-a"][0].End.IsZero() || len(l["farm/rig-b"]) != 1 || !l["farm/rig-b"][0].End.IsZero() {
		t.Fatalf("ledger while cut off: %+v", l)
	}
	if got := phaseOf("ends"); got != "" {
		t.Fatalf("a cut-off kubelet wrote phase %q", got)
	}

	healedAt := time.Now()
	if err := k.HealNode(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); phaseOf("ends") != corev1.PodSucceeded; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ending was not reported once the node came back")
		}
	}
	l = k.Ledger()
	if end := l["farm/rig-a"][0].End; !end.Before(healedAt) {
		t.Fatalf("ends ended at %v, after the heal at %v", end, healedAt)
	}
	if end := l["farm/rig-b"][0].End; end.Before(healedAt) {
		t.Fatalf("the orphan ended at %v, before its node came back at %v", end, healedAt)
	}
}
