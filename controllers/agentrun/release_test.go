package agentrun

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func attemptPod(run *farmv1.AgentRun, name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: name,
		Labels: map[string]string{farmv1.LabelRun: run.Name, farmv1.LabelKind: "attempt"}},
		Status: corev1.PodStatus{Phase: phase}}
}

// endedLast answers only for the pod this manager created last: shown by
// the cache and ended, with every other pod of the run ended too.
func TestEndedLastNamesOnlyThePodThisManagerMadeLast(t *testing.T) {
	t.Parallel()
	run := poolRun("r", 0, "a")
	key := client.ObjectKeyFromObject(run)
	a1 := attemptPod(run, "r-a1-r0", corev1.PodSucceeded)
	a2 := attemptPod(run, "r-a2-r0", corev1.PodSucceeded)
	var n notes
	if n.endedLast(key, []*corev1.Pod{a1}) {
		t.Fatal("a manager that created no pod of the run vouched for it (a restarted manager must read the API server)")
	}
	n.created(key, a2, holdsBase)
	if n.endedLast(key, []*corev1.Pod{a1}) {
		t.Fatal("the last pod made is not in the cache yet, and endedLast said no pod is alive")
	}
	if !n.endedLast(key, []*corev1.Pod{a1, a2}) {
		t.Fatal("the last pod made is shown ended, and endedLast did not say so")
	}
	if n.endedLast(key, []*corev1.Pod{attemptPod(run, "r-a1-r0", corev1.PodRunning), a2}) {
		t.Fatal("a pod of the run runs, and endedLast said none is alive")
	}
	n.madeUnknown(key)
	if n.endedLast(key, []*corev1.Pod{a1, a2}) {
		t.Fatal("after a create with no answer, endedLast still vouched for the run's pods")
	}
}

// A finished run gives its rig back without reading its pods from the API
// server when the cache shows the last pod this manager created ended; a
// manager that did not create it (restarted since) reads them, and holds
// the rig while the API server shows a pod its cache does not.
func TestReleaseReadsTheAPIServerUnlessItMadeTheLastPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		madeHere     bool // this manager created the run's last pod
		unseenLive   bool // the API server has a live pod of the run the cache does not show
		wantLists    int
		wantReleased bool
	}{
		{name: "this manager made the last pod", madeHere: true, wantLists: 0, wantReleased: true},
		{name: "a restarted manager", wantLists: 1, wantReleased: true},
		{name: "a restarted manager, a pod the cache has not shown", unseenLive: true, wantLists: 1, wantReleased: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := poolRun("r", 0, "a")
			run.Status.Phase = farmv1.RunSucceeded
			ended := attemptPod(run, "r-a1-r0", corev1.PodSucceeded)
			r := newQueueReconciler(t, poolRig("a"), leaseFor("a", run), run, ended)
			api := r.Client.(client.WithWatch)
			if tc.unseenLive {
				if err := api.Create(ctx, attemptPod(run, "r-a2-r0", corev1.PodRunning)); err != nil {
					t.Fatal(err)
				}
			}
			lists := 0
			r.APIReader = interceptor.NewClient(api, interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
					if _, ok := l.(*corev1.PodList); ok {
						lists++
					}
					return c.List(ctx, l, opts...)
				}})
			if tc.madeHere {
				r.notes.created(types.NamespacedName{Namespace: "farm", Name: "r"}, ended, holdsBase)
			}
			released, err := r.releaseRig(ctx, run, world{now: r.now(), held: "a", pods: []*corev1.Pod{ended}})
			if err != nil || released != tc.wantReleased || lists != tc.wantLists {
				t.Fatalf("releaseRig = %v, %v with %d pod lists from the API server; want %v with %d",
					released, err, lists, tc.wantReleased, tc.wantLists)
			}
		})
	}
}
