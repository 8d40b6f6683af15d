package rignode

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deletionSweep is how often rignode looks for deleted pods that
// virtual-kubelet does not hand to DeletePod.
const deletionSweep = 2 * time.Second

// watchDeletions covers what virtual-kubelet leaves out: it tells the
// provider of a deleted pod only while the pod's API status says a
// container runs. A pod deleted while it waited to start (for a rig's
// directory, for its volumes) or while no rignode ran would otherwise never
// learn it is deleted — and could start after all — and a pod deleted
// before this node ran it would never be reported ended, so a finalizer
// waiting for that (the operator's) would wait forever. So every
// deletionSweep rignode lists its node's pods and, besides saying again how
// a pod that ended here ended when the API still has it running,
//   - stops each deleted pod it runs or prepares (SIGTERM, grace, SIGKILL;
//     one that has not started never will), and
//   - reports Failed each deleted pod it never ran, as a kubelet does.
func (p *Provider) watchDeletions(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(deletionSweep):
		}
		list, err := p.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.cfg.NodeName})
		if err != nil {
			continue
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			p.mu.Lock()
			r, creating := p.pods[podKey(pod.Namespace, pod.Name)], p.creating[string(pod.UID)]
			p.mu.Unlock()
			if r != nil && r.pod.UID == pod.UID && r.ended() {
				// It ended here and the API has not heard: say it again (a
				// notification can be lost while virtual-kubelet starts).
				p.publish(r.snapshot())
				continue
			}
			if pod.DeletionTimestamp == nil {
				continue
			}
			switch {
			case r != nil && r.pod.UID == pod.UID:
				if !r.isDeleted() {
					p.cfg.Logf("pod %s/%s was deleted; stopping it", pod.Namespace, pod.Name)
					r.markDeleted()
					go r.terminate(deletionGrace(pod))
				}
			case creating:
				// CreatePod is preparing it; the next sweep finds it in pods.
			default:
				p.neverRan(ctx, pod)
			}
		}
	}
}

// neverRan reports Failed a deleted pod this node never started.
func (p *Provider) neverRan(ctx context.Context, pod *corev1.Pod) {
	pod = pod.DeepCopy()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = "Deleted"
	pod.Status.Message = fmt.Sprintf("the pod was deleted before %s started it", p.cfg.NodeName)
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if cs.State.Terminated == nil {
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "the container never started: its pod was deleted first", FinishedAt: now}}
			cs.Ready = false
		}
	}
	setCondition(&pod.Status, corev1.PodReady, false, "PodCompleted")
	if _, err := p.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		p.cfg.Logf("pod %s/%s: report it ended: %v", pod.Namespace, pod.Name, err)
		return
	}
	p.cfg.Logf("pod %s/%s was deleted before it started here; reported Failed", pod.Namespace, pod.Name)
}
