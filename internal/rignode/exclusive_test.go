package rignode_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// rigPod runs the helper with args, the rig's host directory mounted at /rig.
func rigPod(t *testing.T, ns, name, rig string, args ...string) *corev1.Pod {
	t.Helper()
	pod := newPod(t, args...)
	pod.Namespace, pod.Name = ns, name
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
	pod.Spec.Volumes = []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: rig, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "state", MountPath: "/rig"}}
	return pod
}

// One phone, one process, at the node: a pod deleted while its process is
// slow to stop (it ignores SIGTERM), and a new pod for the same rig created
// at once. The new process starts only once the old one is gone — the lock
// the old one holds on the rig's directory says so — and until then the new
// pod says what it waits for.
func TestNextPodOnARigWaitsForTheOldProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		grace *int64
	}{
		{"graceful-delete", nil},           // SIGTERM, the pod's 3 s, SIGKILL
		{"force-delete", ptr.To[int64](0)}, // the object is gone at once; the process still gets SIGTERM and 2 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := t.TempDir()
			old := create(t, rigPod(t, namespace(t), "old", rig, "hold", "/rig/lock", "600", "stubborn"))
			waitPod(t, old, 30*time.Second, "phase Running", phaseIs(corev1.PodRunning))
			waitLog(t, old, "holding") // the lock is taken, SIGTERM ignored
			if err := cs.CoreV1().Pods(old.Namespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: tc.grace}); err != nil {
				t.Fatal(err)
			}
			next := create(t, rigPod(t, old.Namespace, "next", rig, "hold", "/rig/lock", "0"))
			waitPod(t, next, 10*time.Second, "waiting for the old pod's process", func(p *corev1.Pod) bool {
				cs := p.Status.ContainerStatuses
				return len(cs) == 1 && cs[0].State.Waiting != nil && strings.Contains(cs[0].State.Waiting.Message, "waiting for the process of pod "+old.Namespace+"/old")
			})
			done := waitPod(t, next, 30*time.Second, "a terminal phase", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
			term := terminated(t, done)
			if done.Status.Phase != corev1.PodSucceeded || term.Message != "alone" {
				t.Fatalf("the next pod ended %s with %q: its process ran beside the old one", done.Status.Phase, term.Message)
			}
			// (Not checked from StartedAt: the API keeps it to the second.)
		})
	}
}

// A pod deleted while it waits for a rig's directory never starts: the
// next pod's process must not run for a pod that is gone.
func TestPodDeletedWhileWaitingForARigNeverStarts(t *testing.T) {
	t.Parallel()
	rig := t.TempDir()
	ns := namespace(t)
	old := create(t, rigPod(t, ns, "old", rig, "hold", "/rig/lock", "600"))
	waitLog(t, old, "holding")
	next := rigPod(t, ns, "next", rig, "hold", "/rig/lock", "0")
	next.Finalizers = []string{"test.clawfarm.dev/keep"} // read its last status
	next = create(t, next)
	waitPod(t, next, 10*time.Second, "waiting for the old pod's process", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && strings.Contains(cs[0].State.Waiting.Message, "waiting for the process of pod")
	})
	if err := cs.CoreV1().Pods(ns).Delete(context.Background(), "next", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	done := waitPod(t, next, 15*time.Second, "Failed", phaseIs(corev1.PodFailed, corev1.PodSucceeded))
	if done.Status.Phase != corev1.PodFailed {
		t.Fatalf("a pod deleted before it started ended %s", done.Status.Phase)
	}
	if err := cs.CoreV1().Pods(ns).Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), "old", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old pod did not end after its deletion")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // room for a start that must not come
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), "next", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Status.ContainerStatuses; len(c) == 1 && (c[0].State.Running != nil || c[0].State.Terminated != nil && c[0].State.Terminated.Message != "") {
		t.Fatalf("the deleted pod's process ran once the rig was free: %+v", c[0].State)
	}
	removeFinalizer(t, p)
}
