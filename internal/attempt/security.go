package attempt

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// NonRootUID is the user the project's images run as (internal/images);
// the pods the manager creates run as it too.
const NonRootUID int64 = 65532

// RestrictedSecurityContext is the container security context of the pods
// the manager creates (loop and follow-up): Pod Security "restricted" for
// the container — not root, no privilege escalation, no capabilities — and
// a read-only root filesystem (the loop writes only the rig's state
// directory). The chart's runs.loopPod and runs.followUpPod default to it.
func RestrictedSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To(NonRootUID),
		RunAsGroup:               ptr.To(NonRootUID),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// RestrictedPodSecurityContext is the pod security context that goes with
// it: the runtime's default seccomp profile.
func RestrictedPodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}
