package rignode

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// These drive the provider directly (no API server): the pod controller's
// calls, with a fake clientset for volume sources.

func newTestProvider(t *testing.T, objs ...k8sruntime.Object) *Provider {
	t.Helper()
	p, err := NewProvider(Config{
		NodeName: "n", NodeIP: "127.0.0.1", RootDir: t.TempDir(),
		Images: ImageMap{"sh": "/bin"}, Client: fake.NewClientset(objs...),
		RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func shPod(name, script string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "n", RestartPolicy: policy, Containers: []corev1.Container{{
			Name: "c", Image: "sh", Command: []string{"sh", "-c", script},
		}}},
	}
}

func waitStatus(t *testing.T, p *Provider, name string, what string, ok func(*corev1.PodStatus) bool) *corev1.PodStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var st *corev1.PodStatus
	for time.Now().Before(deadline) {
		var err error
		if st, err = p.GetPodStatus(context.Background(), "ns", name); err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %s did not happen; status %+v", name, what, st)
	return nil
}

func TestRestartAlwaysKeepsRestartingUntilDeleted(t *testing.T) {
	p := newTestProvider(t)
	pod := shPod("always", "echo run; exit 0", corev1.RestartPolicyAlways)
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p, "always", "two restarts", func(st *corev1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].RestartCount >= 2 && st.Phase == corev1.PodRunning
	})
	if err := p.DeletePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetPod(context.Background(), "ns", "always"); err == nil {
		t.Fatal("the pod is still known after DeletePod")
	}
}

func TestPodStartedByAnEarlierRignodeFails(t *testing.T) {
	p := newTestProvider(t)
	pod := shPod("orphan", "sleep 100", corev1.RestartPolicyNever)
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p, "orphan", "phase Failed", func(st *corev1.PodStatus) bool { return st.Phase == corev1.PodFailed })
	if st.Reason != ReasonNodeRestarted || st.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("status %+v, want Failed %s with the container terminated", st, ReasonNodeRestarted)
	}
}

func TestClaimBoundToAHostPathVolume(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "f"), []byte("from-pv"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t,
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "state"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nfs"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv2"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv2"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/x"}}}},
	)
	pod := shPod("pvc", "cat /state/f > /dev/termination-log", corev1.RestartPolicyNever)
	pod.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "state"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "s", MountPath: "/state"}}
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p, "pvc", "phase Succeeded", func(st *corev1.PodStatus) bool {
		return st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed
	})
	if m := st.ContainerStatuses[0].State.Terminated.Message; m != "from-pv" {
		t.Fatalf("message %q, want the PV's file", m)
	}

	nfs := shPod("nfs", "true", corev1.RestartPolicyNever)
	nfs.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "nfs"}}}}
	if err := p.CreatePod(context.Background(), nfs); err == nil {
		t.Fatal("a claim on an NFS volume was accepted")
	}
}
