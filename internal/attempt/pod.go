// Package attempt builds attempt pods and classifies how they ended.
package attempt

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

const (
	// ContainerName is the loop container's name.
	ContainerName = "loop"
	// DeadlineGraceSeconds is added to the session budget for activeDeadlineSeconds,
	// so the loop ends itself (exit 13) before the kubelet kills it.
	DeadlineGraceSeconds = 60
	// TerminationGraceSeconds is how long a cancelled loop gets to stop cleanly.
	TerminationGraceSeconds = 30
	// DefaultRigStateRoot is where rig state lives on a node when the rig names no volume.
	DefaultRigStateRoot = "/var/lib/clawfarm/rigs"
	stateVolumeName     = "rig-state"
	// StateInitContainerName is the init step that gives a hostPath state
	// directory to the loop's user (the loop's own-state command).
	StateInitContainerName = "own-state"
	traceVolumeName        = "trace-token"
	rigTokenVolumeName     = "rig-token"
	// traceTokenSeconds is the trace token's lifetime; the kubelet renews it.
	traceTokenSeconds = 3600
)

// PodName is the deterministic name of an attempt pod: <run>-a<N>, and
// <run>-a<N>-r<M> for the M-th infrastructure retry of attempt N.
func PodName(run string, attempt, retry int32) string {
	if retry == 0 {
		return fmt.Sprintf("%s-a%d", run, attempt)
	}
	return fmt.Sprintf("%s-a%d-r%d", run, attempt, retry)
}

// Defaults the manager fills in where a run says nothing (its flags
// --loop-image, --loop-service-account, --image-pull-policy,
// --loop-resources, --loop-security-context, --loop-pod-security-context).
type Defaults struct {
	Image              string
	ServiceAccountName string
	ImagePullPolicy    corev1.PullPolicy
	// Resources of the loop container, unless the run's spec.pod.resources
	// sets its own.
	Resources corev1.ResourceRequirements
	// SecurityContext of the loop container; nil leaves it to the cluster.
	SecurityContext *corev1.SecurityContext
	// PodSecurityContext of the loop pod; nil leaves it to the cluster. The
	// loop writes the rig's state directory (a hostPath by default), so the
	// user chosen here must be able to write it on the rig's node.
	PodSecurityContext *corev1.PodSecurityContext
	// TraceURL, when set, is the trace server loop pods upload to, with a
	// service account token of TraceAudience projected for it.
	TraceURL      string
	TraceAudience string
	// TraceKeep is how many attempts' traces a rig's state directory keeps.
	TraceKeep int
	// APIServer, when set (host:port), is where loop pods reach the API
	// server, instead of the kubernetes Service the kubelet names in
	// KUBERNETES_SERVICE_HOST/PORT: for nodes without a Service proxy.
	APIServer string
	// OTel is where loop pods export their OpenTelemetry spans.
	OTel OTel
}

// Spec is everything an attempt pod is built from.
type Spec struct {
	Run     *farmv1.AgentRun
	Rig     *farmv1.DeviceRig
	Attempt int32
	Retry   int32
	// Resume asks the loop to continue from the attempt's snapshot (after an infrastructure cut).
	Resume   bool
	Defaults Defaults
	// ToolPolicies are the ToolPolicies that select the run (ToolPolicySet).
	ToolPolicies toolpolicy.Set
	// ModelKeySHA256 pins the model key the operator checked (contract.KeySHA256).
	ModelKeySHA256 string
}

// Settings is the loop configuration of an attempt, as the pod contract defines it.
func (s Spec) Settings() contract.Settings {
	run := s.Run
	var skills []string
	for _, sk := range s.skillSources() {
		skills = append(skills, path.Join(contract.SkillsMountRoot, sk.ConfigMapName))
	}
	var fold string
	if f := run.Spec.Model.Fold; f != nil {
		fold = fmt.Sprintf("%d/%d", f.AtTurns, f.KeepTurns)
	}
	left, _ := RunInputTokensLeft(run)
	trigger, steered := Opening(run)
	return contract.Settings{
		Run:            run.Namespace + "/" + run.Name,
		Attempt:        int(s.Attempt),
		RigEndpoint:    s.Rig.Spec.Endpoint.URL,
		RigTokenFile:   s.rigTokenFile(),
		Trigger:        trigger,
		Steered:        steered,
		ModelProvider:  string(run.Spec.Model.Provider),
		Model:          run.Spec.Model.Name,
		ModelBaseURL:   run.Spec.Model.BaseURL,
		ModelAPI:       string(run.Spec.Model.API),
		ContextWindow:  int(run.Spec.Model.ContextWindow),
		MaxTurns:       int(run.Spec.Limits.MaxTurns),
		SessionSeconds: int(run.Spec.Limits.AttemptTimeoutSeconds),
		StateDir:       contract.StateMountPath,
		SkillsDirs:     skills,
		DenyTools:      run.Spec.DenyTools,
		Resume:         s.Resume,
		TerminationLog: corev1.TerminationMessagePathDefault,
		TraceURL:       s.Defaults.TraceURL,
		TraceTokenFile: traceTokenFile(s.Defaults.TraceURL),
		TraceKeep:      s.Defaults.TraceKeep,

		MaxErrors:            int(run.Spec.Limits.ErrorLimit()),
		MaxInputTokens:       run.Spec.Limits.MaxInputTokens,
		RunInputTokensLeft:   left,
		ThinkingBudgetTokens: int(run.Spec.Model.ThinkingBudgetTokens),
		Fold:                 fold,
		BootstrapDirs:        bootstrapDirs(s.bootstrapSources()),
		SystemPromptAppend:   run.Spec.SystemPromptAppend,
		MaxOutputTokens:      int(run.Spec.Model.MaxOutputTokens),
		ToolPolicies:         s.toolPolicies(),
		ModelKeySHA256:       s.ModelKeySHA256,
		// A heartbeat well within the run's stall watchdog.
		ProgressHeartbeatSeconds: int(contract.ProgressHeartbeatFor(run.Spec.Limits.StallTimeout()) / time.Second),
	}
}

// serviceAccount is the pod's: the run's spec.pod, else the manager's default.
func (s Spec) serviceAccount() string {
	if o := s.Run.Spec.Pod; o != nil && o.ServiceAccountName != "" {
		return o.ServiceAccountName
	}
	return s.Defaults.ServiceAccountName
}

// rigTokenFile is where the rig token is projected, when the pod has one
// (a named service account).
func (s Spec) rigTokenFile() string {
	if s.serviceAccount() == "" {
		return ""
	}
	return contract.RigTokenPath
}

// toolPolicies is the setting's JSON; the controller has checked the set
// (ToolPolicySet), so an error here cannot happen and leaves it empty.
func (s Spec) toolPolicies() string {
	if len(s.ToolPolicies.Policies) == 0 {
		return ""
	}
	out, _ := s.ToolPolicies.Encode()
	return out
}

// bootstrapSource is a bootstrap ConfigMap and whose it is (rig or run).
type bootstrapSource struct {
	owner, configMap string
}

// bootstrapSources are the rig's bootstrap ConfigMaps, then the run's, in
// the order each lists them; a ConfigMap both name comes once, as the rig's.
func (s Spec) bootstrapSources() []bootstrapSource {
	seen := map[string]bool{}
	var out []bootstrapSource
	for _, l := range []struct {
		owner string
		list  []farmv1.BootstrapSource
	}{{"rig", s.Rig.Spec.Bootstrap}, {"run", s.Run.Spec.Bootstrap}} {
		for _, b := range l.list {
			if !seen[b.ConfigMapName] {
				seen[b.ConfigMapName] = true
				out = append(out, bootstrapSource{l.owner, b.ConfigMapName})
			}
		}
	}
	return out
}

// bootstrapDir is where a bootstrap ConfigMap is mounted: numbered, so the
// folders sort in the order the system prompt takes them.
func bootstrapDir(i int, b bootstrapSource) string {
	return path.Join(contract.BootstrapMountRoot, fmt.Sprintf("%02d-%s-%s", i, b.owner, b.configMap))
}

func bootstrapDirs(srcs []bootstrapSource) []string {
	var out []string
	for i, b := range srcs {
		out = append(out, bootstrapDir(i, b))
	}
	return out
}

// RunInputTokensLeft is what is left of the run's input token budget
// (spec.limits.maxRunInputTokens) once the recorded attempts' input tokens
// are taken off; limited is false when the run has no such budget. A run
// with limited and left <= 0 must start no attempt.
func RunInputTokensLeft(run *farmv1.AgentRun) (left int64, limited bool) {
	budget := run.Spec.Limits.MaxRunInputTokens
	if budget <= 0 {
		return 0, false
	}
	var used int64
	if u := run.Status.Usage; u != nil {
		used = u.PromptTokens
	}
	return budget - used, true
}

func traceTokenFile(url string) string {
	if url == "" {
		return ""
	}
	return contract.TraceTokenPath
}

// skillSources merges the rig's skills and the run's, without duplicates.
func (s Spec) skillSources() []farmv1.SkillSource {
	seen := map[string]bool{}
	var out []farmv1.SkillSource
	for _, list := range [][]farmv1.SkillSource{s.Rig.Spec.Skills, s.Run.Spec.Skills} {
		for _, sk := range list {
			if !seen[sk.ConfigMapName] {
				seen[sk.ConfigMapName] = true
				out = append(out, sk)
			}
		}
	}
	return out
}

// BuildPod renders the attempt pod: owned by the run, pinned to the rig's node,
// tolerating the rig taint, with the tracking finalizer, a deadline, the rig's
// state volume, skills, the loop's settings in its environment, and the
// manager's defaults for image, pull policy, resources and security contexts
// where the run's spec.pod does not override them.
func BuildPod(s Spec) *corev1.Pod {
	run, rig := s.Run, s.Rig
	image, sa := s.Defaults.Image, s.serviceAccount()
	resources := *s.Defaults.Resources.DeepCopy()
	var tolerations []corev1.Toleration
	if o := run.Spec.Pod; o != nil {
		if o.Image != "" {
			image = o.Image
		}
		if o.Resources != nil {
			resources = *o.Resources
		}
		tolerations = append(tolerations, o.Tolerations...)
	}
	tolerations = append(tolerations, corev1.Toleration{Key: farmv1.TaintRig, Operator: corev1.TolerationOpExists})

	var env []corev1.EnvVar
	for _, e := range s.Settings().Environ() {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	if ref := run.Spec.Model.APIKeySecretRef; ref != nil {
		env = append(env, corev1.EnvVar{
			Name:      contract.SettingModelAPIKey.Env,
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref.DeepCopy()},
		})
	}
	if host, port, err := net.SplitHostPort(s.Defaults.APIServer); err == nil {
		// A container's own variables win over the ones the kubelet makes.
		env = append(env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
	}
	env = append(env, otelEnv(s.Defaults.OTel, rig)...)

	volumes := []corev1.Volume{stateVolume(rig)}
	mounts := []corev1.VolumeMount{{Name: stateVolumeName, MountPath: contract.StateMountPath}}
	for i, sk := range s.skillSources() {
		name := "skills-" + strconv.Itoa(i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: sk.ConfigMapName}},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path.Join(contract.SkillsMountRoot, sk.ConfigMapName), ReadOnly: true})
	}
	for i, b := range s.bootstrapSources() {
		name := "bootstrap-" + strconv.Itoa(i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: b.configMap}},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: bootstrapDir(i, b), ReadOnly: true})
	}

	// The token a rig's gateway asks for (internal/riggate): bound to this
	// pod, for the rig audience only, so neither the API server nor the
	// trace server takes it, and a rig without a gateway ignores it. A
	// token needs the pod's service account named (the chart always does).
	if sa != "" {
		volumes = append(volumes, corev1.Volume{Name: rigTokenVolumeName, VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: contract.DefaultRigAudience, ExpirationSeconds: ptr.To[int64](traceTokenSeconds), Path: path.Base(contract.RigTokenPath),
				},
			}}},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: rigTokenVolumeName, MountPath: path.Dir(contract.RigTokenPath), ReadOnly: true})
	}

	if s.Defaults.TraceURL != "" {
		aud := s.Defaults.TraceAudience
		if aud == "" {
			aud = contract.DefaultTraceAudience
		}
		volumes = append(volumes, corev1.Volume{Name: traceVolumeName, VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: aud, ExpirationSeconds: ptr.To[int64](traceTokenSeconds), Path: path.Base(contract.TraceTokenPath),
				},
			}}},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: traceVolumeName, MountPath: path.Dir(contract.TraceTokenPath), ReadOnly: true})
	}

	// The session clock stops while a person decides on a held call: the
	// hard deadline has room for the waits the loop allows an attempt.
	approvals := int64(s.ToolPolicies.LongestApprovalTimeout()) * toolpolicy.ApprovalWaitsPerAttempt
	deadline := int64(run.Spec.Limits.AttemptTimeoutSeconds) + DeadlineGraceSeconds + approvals
	name := PodName(run.Name, s.Attempt, s.Retry)
	var inits []corev1.Container
	if c, ok := ownStateContainer(volumes[0], image, s.Defaults, resources); ok {
		inits = append(inits, c)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: run.Namespace,
			Name:      name,
			Labels: farmv1.CarryPool(map[string]string{
				farmv1.LabelRun:     run.Name,
				farmv1.LabelRig:     rig.Name,
				farmv1.LabelAttempt: strconv.Itoa(int(s.Attempt)),
				farmv1.LabelKind:    "attempt",
			}, run.Labels),
			Annotations: map[string]string{farmv1.AnnotationRetry: strconv.Itoa(int(s.Retry))},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: run.Name, UID: run.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
			Finalizers: []string{farmv1.FinalizerOutcome},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: ptr.To[int64](TerminationGraceSeconds),
			ServiceAccountName:            sa,
			SecurityContext:               s.Defaults.PodSecurityContext.DeepCopy(),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchFields: []corev1.NodeSelectorRequirement{{
							Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{rig.Spec.NodeName},
						}},
					}},
				},
			}},
			HostNetwork:    rig.Spec.HostNetwork,
			Tolerations:    tolerations,
			Volumes:        volumes,
			InitContainers: inits,
			Containers: []corev1.Container{{
				Name:                     ContainerName,
				Image:                    image,
				ImagePullPolicy:          s.Defaults.ImagePullPolicy,
				Env:                      env,
				Resources:                resources,
				SecurityContext:          s.Defaults.SecurityContext.DeepCopy(),
				VolumeMounts:             mounts,
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
}

// ownStateContainer is the init step of a loop pod whose state is a
// hostPath and whose loop runs as a known non-root user: a kubelet creates a
// missing hostPath directory root:root 0755 and fsGroup does not apply to
// hostPath volumes, so the loop's own-state command, as root with only
// CAP_CHOWN and CAP_FOWNER, gives the directory to that user first
// (docs/loop-contract.md, "The state directory"). Without a runAsUser the
// image's user is unknown and there is no init step.
func ownStateContainer(state corev1.Volume, image string, d Defaults, resources corev1.ResourceRequirements) (corev1.Container, bool) {
	if state.HostPath == nil {
		return corev1.Container{}, false
	}
	var uid, gid *int64
	if p := d.PodSecurityContext; p != nil {
		uid, gid = p.RunAsUser, p.RunAsGroup
	}
	if c := d.SecurityContext; c != nil {
		if c.RunAsUser != nil {
			uid = c.RunAsUser
		}
		if c.RunAsGroup != nil {
			gid = c.RunAsGroup
		}
	}
	if uid == nil || *uid == 0 {
		return corev1.Container{}, false
	}
	args := []string{contract.OwnStateCommand, "--dir", contract.StateMountPath, "--uid", strconv.FormatInt(*uid, 10)}
	if gid != nil {
		args = append(args, "--gid", strconv.FormatInt(*gid, 10))
	}
	return corev1.Container{
		Name:            StateInitContainerName,
		Image:           image,
		ImagePullPolicy: d.ImagePullPolicy,
		Args:            args,
		Resources:       resources,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](0),
			RunAsGroup:               ptr.To[int64](0),
			RunAsNonRoot:             ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities: &corev1.Capabilities{
				Drop: []corev1.Capability{"ALL"},
				Add:  []corev1.Capability{"CHOWN", "FOWNER"},
			},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: stateVolumeName, MountPath: contract.StateMountPath}},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}, true
}

func stateVolume(rig *farmv1.DeviceRig) corev1.Volume {
	v := corev1.Volume{Name: stateVolumeName}
	sv := rig.Spec.StateVolume
	switch {
	case sv.PersistentVolumeClaim != "":
		v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: sv.PersistentVolumeClaim}
	case sv.HostPath != "":
		v.HostPath = &corev1.HostPathVolumeSource{Path: sv.HostPath, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}
	default:
		// The namespace keeps same-named rigs of two namespaces on one node
		// apart: each has its own memory, logs and traces.
		v.HostPath = &corev1.HostPathVolumeSource{Path: path.Join(DefaultRigStateRoot, rig.Namespace, rig.Name), Type: ptr.To(corev1.HostPathDirectoryOrCreate)}
	}
	return v
}
