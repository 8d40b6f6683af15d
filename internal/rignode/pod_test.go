package rignode_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/clawfarm/clawfarm/internal/rignode"
)

func TestPodSucceedsWithExitZeroAndMessage(t *testing.T) {
	t.Parallel()
	pod := create(t, newPod(t, "exit", "0", `{"sentinel":"DONE"}`))
	p := waitPod(t, pod, 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded))
	term := terminated(t, p)
	if term.ExitCode != 0 || term.Reason != "Completed" || term.Message != `{"sentinel":"DONE"}` {
		t.Fatalf("terminated = %+v, want exit 0, Completed, the message", term)
	}
	if p.Status.StartTime == nil || p.Status.PodIP != "127.0.0.1" || p.Status.HostIP != "127.0.0.1" {
		t.Fatalf("start time / IPs not set: %+v", p.Status)
	}
	if !strings.HasPrefix(term.ContainerID, "rignode://") {
		t.Fatalf("container id %q", term.ContainerID)
	}
}

func TestPodFailsWithExitCodeAndMessage(t *testing.T) {
	t.Parallel()
	pod := create(t, newPod(t, "exit", "12", `{"sentinel":"STUCK"}`))
	p := waitPod(t, pod, 30*time.Second, "phase Failed", phaseIs(corev1.PodFailed, corev1.PodSucceeded))
	if p.Status.Phase != corev1.PodFailed {
		t.Fatalf("phase %s, want Failed", p.Status.Phase)
	}
	term := terminated(t, p)
	if term.ExitCode != 12 || term.Reason != "Error" || term.Message != `{"sentinel":"STUCK"}` {
		t.Fatalf("terminated = %+v, want exit 12, Error, the message", term)
	}
}

func TestFallbackToLogsOnError(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "exit", "3")
	pod.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	p := waitPod(t, create(t, pod), 30*time.Second, "phase Failed", phaseIs(corev1.PodFailed))
	if term := terminated(t, p); term.ExitCode != 3 || term.Message != "first line\nsecond line\n" {
		t.Fatalf("terminated = %+v, want exit 3 and the log tail as message", term)
	}
}

// An image from a registry that cannot be reached waits ErrImagePull, as
// on a kubelet, and the pod stays Pending (retried; the operator's startup
// timeout bounds it).
func TestUnreachableRegistryWaitsErrImagePull(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "exit", "0")
	pod.Spec.Containers[0].Image = "127.0.0.1:1/nothing:v1"
	p := waitPod(t, create(t, pod), 30*time.Second, "waiting ErrImagePull", waitingFor(rignode.ReasonErrImagePull))
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "127.0.0.1:1/nothing:v1") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("message %q does not say which image and why", msg)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Fatalf("phase %s, want Pending", p.Status.Phase)
	}
}

func TestEnvFromSecretConfigMapAndFields(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "env", "KEY", "MODE", "NAME", "NS", "NODE", "RUN", "SA", "DIR", "EXPANDED")
	ctx := context.Background()
	if _, err := cs.CoreV1().Secrets(pod.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Namespace: pod.Namespace}, StringData: map[string]string{"apiKey": "sk-secret"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(pod.Namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: pod.Namespace}, Data: map[string]string{"mode": "fast"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"farm.clawfarm.dev/run": "run-1"}
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/var/lib/clawfarm/state"}}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model"}, Key: "apiKey"}}},
		corev1.EnvVar{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "mode"}}},
		corev1.EnvVar{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		corev1.EnvVar{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		corev1.EnvVar{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		corev1.EnvVar{Name: "RUN", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['farm.clawfarm.dev/run']"}}},
		corev1.EnvVar{Name: "SA", Value: "x"},
		corev1.EnvVar{Name: "DIR", Value: "/var/lib/clawfarm/state/sub"},
		corev1.EnvVar{Name: "EXPANDED", Value: "mode=$(MODE)"},
	)
	p := waitPod(t, create(t, pod), 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	var got map[string]string
	if err := json.Unmarshal([]byte(terminated(t, p).Message), &got); err != nil {
		t.Fatalf("message %q: %v", terminated(t, p).Message, err)
	}
	want := map[string]string{"KEY": "sk-secret", "MODE": "fast", "NAME": "p", "NS": pod.Namespace, "NODE": nodeName, "RUN": "run-1", "SA": "x", "EXPANDED": "mode=fast"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if !strings.HasSuffix(got["DIR"], "/volumes/scratch/sub") || !filepath.IsAbs(got["DIR"]) {
		t.Errorf("DIR = %q, want the mount path rewritten into the pod's emptyDir", got["DIR"])
	}
}

func TestConfigMapSecretAndHostPathVolumes(t *testing.T) {
	t.Parallel()
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "memory.md"), []byte("remember"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, mount, file, want string }{
		{"configmap", "/etc/clawfarm/skills/s1", "/etc/clawfarm/skills/s1/skill.md", "# skill"},
		{"secret", "/etc/secret", "/etc/secret/token", "tok"},
		{"hostpath", "/var/lib/clawfarm/state", "/var/lib/clawfarm/state/memory.md", "remember"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(t, "cat", tc.file)
			ctx := context.Background()
			var vol corev1.VolumeSource
			switch tc.name {
			case "configmap":
				_, err := cs.CoreV1().ConfigMaps(pod.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "s1"}, Data: map[string]string{"skill.md": "# skill"}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				vol.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s1"}}
			case "secret":
				_, err := cs.CoreV1().Secrets(pod.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"token": "tok"}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				vol.Secret = &corev1.SecretVolumeSource{SecretName: "s"}
			case "hostpath":
				vol.HostPath = &corev1.HostPathVolumeSource{Path: host, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}
			}
			pod.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: vol}}
			pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: tc.mount}}
			p := waitPod(t, create(t, pod), 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
			if m := terminated(t, p).Message; m != tc.want {
				t.Fatalf("read %q through the mount, want %q", m, tc.want)
			}
		})
	}
}

func TestDeleteSendsSIGTERMThenSIGKILLAfterGrace(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "signals")
	pod := newPod(t, "stubborn", marker)
	pod.Finalizers = []string{"test.clawfarm.dev/keep"} // keep the pod to read its final status
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	pod = create(t, pod)
	waitPod(t, pod, 30*time.Second, "phase Running", phaseIs(corev1.PodRunning))
	waitLog(t, pod, "ready") // the helper's SIGTERM handler is installed
	start := time.Now()
	if err := cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, pod, 30*time.Second, "a terminal phase", phaseIs(corev1.PodFailed, corev1.PodSucceeded))
	took := time.Since(start)
	term := terminated(t, p)
	if term.ExitCode != 137 || term.Signal != 9 {
		t.Fatalf("terminated = %+v, want exit 137 (SIGKILL)", term)
	}
	if took < 2*time.Second {
		t.Fatalf("killed after %s, before the 2s grace period", took)
	}
	if b, _ := os.ReadFile(marker); !strings.Contains(string(b), "SIGTERM") {
		t.Fatalf("the process never saw SIGTERM (marker %q)", b)
	}
	if p.Status.Phase != corev1.PodFailed {
		t.Fatalf("phase %s, want Failed", p.Status.Phase)
	}
	removeFinalizer(t, p)
}

func TestDeleteEndsCooperativeProcessAtSIGTERM(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "sleep")
	pod.Finalizers = []string{"test.clawfarm.dev/keep"}
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	pod = create(t, pod)
	waitPod(t, pod, 30*time.Second, "phase Running", phaseIs(corev1.PodRunning))
	waitLog(t, pod, "ready")
	if err := cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, pod, 10*time.Second, "a terminal phase", phaseIs(corev1.PodFailed, corev1.PodSucceeded))
	if term := terminated(t, p); term.ExitCode != 143 {
		t.Fatalf("terminated = %+v, want exit 143 (its own SIGTERM exit)", term)
	}
	removeFinalizer(t, p)
}

func removeFinalizer(t *testing.T, p *corev1.Pod) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := cs.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestActiveDeadlineFailsThePod(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "sleep")
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](1)
	p := waitPod(t, create(t, pod), 30*time.Second, "phase Failed", phaseIs(corev1.PodFailed, corev1.PodSucceeded))
	if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "DeadlineExceeded" {
		t.Fatalf("phase %s reason %q, want Failed DeadlineExceeded", p.Status.Phase, p.Status.Reason)
	}
	if term := terminated(t, p); term.ExitCode != 143 {
		t.Fatalf("terminated = %+v, want exit 143", term)
	}
}

func TestOnFailureRestartsUntilSuccess(t *testing.T) {
	t.Parallel()
	counter := filepath.Join(t.TempDir(), "runs")
	pod := newPod(t, "count", counter)
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	p := waitPod(t, create(t, pod), 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	cs := p.Status.ContainerStatuses[0]
	if p.Status.Phase != corev1.PodSucceeded || cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Fatalf("phase %s, status %+v: want Succeeded after one restart from exit 1", p.Status.Phase, cs)
	}
}

func TestContainerLogs(t *testing.T) {
	t.Parallel()
	pod := create(t, newPod(t, "lines", "5", "200ms"))
	waitPod(t, pod, 30*time.Second, "phase Running", phaseIs(corev1.PodRunning))
	ctx := context.Background()

	// Follow from the start: every line, and the stream ends when the process does.
	rc, err := provider.GetContainerLogs(ctx, pod.Namespace, pod.Name, "main", api.ContainerLogOpts{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Fatalf("followed log %q", b)
	}
	rc, err = provider.GetContainerLogs(ctx, pod.Namespace, pod.Name, "main", api.ContainerLogOpts{Tail: 2, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(rc)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[1], " line 5") || !strings.Contains(lines[0], "T") {
		t.Fatalf("tail 2 with timestamps: %q", b)
	}

	// Through the API server, which dials rignode's kubelet API.
	waitPod(t, pod, 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded))
	raw, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](3)}).Do(ctx).Raw()
	if err != nil {
		t.Fatalf("pods/log through the API server: %v: %s", err, raw)
	}
	if string(raw) != "line 3\nline 4\nline 5\n" {
		t.Fatalf("pods/log = %q", raw)
	}
}

func TestServiceAccountTokenGivesAWorkingKubeconfig(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "whoami")
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(pod.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "loop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantPodRead(t, pod.Namespace, "loop")
	pod.Spec.ServiceAccountName = "loop"
	// A token for another audience comes first (the trace token of loop
	// pods): the kubeconfig must still carry the API server's.
	pod.Spec.Volumes = []corev1.Volume{{Name: "other-audience", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "clawfarm-trace", Path: "token"}}},
	}}}, {Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
	}}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "other-audience", MountPath: "/var/run/secrets/other", ReadOnly: true},
		{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	)
	p := waitPod(t, create(t, pod), 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	if m := terminated(t, p).Message; !strings.HasPrefix(m, "node="+nodeName+" host=") {
		t.Fatalf("the pod could not read itself with its service account: %q", m)
	}
}

func TestPodWaitsForAConfigMapCreatedAfterIt(t *testing.T) {
	t.Parallel()
	pod := newPod(t, "cat", "/etc/late/k")
	pod.Spec.Volumes = []corev1.Volume{{Name: "late", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "late"}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "late", MountPath: "/etc/late"}}
	pod = create(t, pod)
	time.Sleep(2 * time.Second)
	if _, err := cs.CoreV1().ConfigMaps(pod.Namespace).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string]string{"k": "arrived"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, pod, 30*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded, corev1.PodFailed))
	if m := terminated(t, p).Message; m != "arrived" {
		t.Fatalf("message %q, want the ConfigMap's value", m)
	}
}

func TestFollowLogsThroughTheAPIServer(t *testing.T) {
	t.Parallel()
	pod := create(t, newPod(t, "lines", "4", "300ms"))
	waitPod(t, pod, 30*time.Second, "phase Running", phaseIs(corev1.PodRunning))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// kubectl logs -f: the stream carries lines as they are written and ends when the process does.
	rc, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "line 1\nline 2\nline 3\nline 4\n" {
		t.Fatalf("followed %q", b)
	}
	if p := waitPod(t, pod, 10*time.Second, "phase Succeeded", phaseIs(corev1.PodSucceeded)); p.Status.Phase != corev1.PodSucceeded {
		t.Fatal(p.Status.Phase)
	}
}
