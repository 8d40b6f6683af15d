package attempt

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

func podSpecFor(run *farmv1.AgentRun, d Defaults) *corev1.Pod {
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node", Endpoint: farmv1.RigEndpoint{URL: "http://rig/mcp"}}}
	return BuildPod(Spec{Run: run, Rig: rig, Attempt: 1, Defaults: d})
}

func TestBuildPodCarriesTheManagersDefaults(t *testing.T) {
	d := Defaults{
		Image: "loop:1", ServiceAccountName: "sa", ImagePullPolicy: corev1.PullNever,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		SecurityContext:    &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
		PodSecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](1000)},
	}
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	pod := podSpecFor(run, d)
	c := pod.Spec.Containers[0]
	if c.Image != "loop:1" || c.ImagePullPolicy != corev1.PullNever || pod.Spec.ServiceAccountName != "sa" {
		t.Errorf("image %q pull %q sa %q", c.Image, c.ImagePullPolicy, pod.Spec.ServiceAccountName)
	}
	if c.Resources.Requests.Cpu().Cmp(resource.MustParse("100m")) != 0 || c.Resources.Limits.Memory().Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("resources %+v", c.Resources)
	}
	if c.SecurityContext == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v", c.SecurityContext)
	}
	if pod.Spec.SecurityContext == nil || *pod.Spec.SecurityContext.RunAsUser != 1000 {
		t.Errorf("pod securityContext %+v", pod.Spec.SecurityContext)
	}
	// The pod owns copies: changing it leaves the defaults alone.
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
	*pod.Spec.SecurityContext.RunAsUser = 0
	*c.SecurityContext.AllowPrivilegeEscalation = true
	if d.Resources.Requests.Cpu().Cmp(resource.MustParse("100m")) != 0 || *d.PodSecurityContext.RunAsUser != 1000 || *d.SecurityContext.AllowPrivilegeEscalation {
		t.Error("the pod aliases the manager's defaults")
	}

	// A run's spec.pod.resources replaces the default resources whole.
	run.Spec.Pod = &farmv1.PodOverrides{Image: "mine:2", Resources: &corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}
	c = podSpecFor(run, d).Spec.Containers[0]
	if c.Image != "mine:2" || len(c.Resources.Requests) != 0 || c.Resources.Limits.Cpu().Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("spec.pod did not override: image %q resources %+v", c.Image, c.Resources)
	}
}

func TestBuildPodWithoutDefaultsSetsNoSecurityContext(t *testing.T) {
	pod := podSpecFor(&farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}, Defaults{Image: "loop"})
	if pod.Spec.SecurityContext != nil || pod.Spec.Containers[0].SecurityContext != nil {
		t.Errorf("security contexts %+v %+v, want none", pod.Spec.SecurityContext, pod.Spec.Containers[0].SecurityContext)
	}
	if r := pod.Spec.Containers[0].Resources; len(r.Requests)+len(r.Limits) != 0 {
		t.Errorf("resources %+v, want none", r)
	}
}

// With a trace server, the loop gets its URL, and a token for it (its own
// audience, not the API server's) where the contract says.
func TestBuildPodProjectsTheTraceToken(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	pod := podSpecFor(run, Defaults{Image: "loop", TraceURL: "http://trace:8080", TraceKeep: 7})
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[contract.SettingTraceURL.Env] != "http://trace:8080" || env[contract.SettingTraceTokenFile.Env] != contract.TraceTokenPath ||
		env[contract.SettingTraceKeep.Env] != "7" {
		t.Errorf("env %v", env)
	}
	checkToken(t, pod, traceVolumeName, contract.DefaultTraceAudience, contract.TraceTokenPath)

	// Without one, no trace token is projected at all.
	for _, v := range podSpecFor(run, Defaults{Image: "loop"}).Spec.Volumes {
		if v.Name == traceVolumeName {
			t.Errorf("a trace token is projected with no trace server: %+v", v)
		}
	}
}

// checkToken wants the pod's volume name to project one token for
// audience, mounted read-only at path.
func checkToken(t *testing.T, pod *corev1.Pod, name, audience, path string) {
	t.Helper()
	var tok *corev1.ServiceAccountTokenProjection
	for _, v := range pod.Spec.Volumes {
		if v.Name == name && v.Projected != nil && len(v.Projected.Sources) == 1 {
			tok = v.Projected.Sources[0].ServiceAccountToken
		}
	}
	if tok == nil || tok.Audience != audience || tok.ExpirationSeconds == nil {
		t.Fatalf("volume %s: token projection %+v, want audience %s", name, tok, audience)
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == name && m.MountPath+"/"+tok.Path == path && m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the %s token is not mounted read-only at %s: %+v", audience, path, pod.Spec.Containers[0].VolumeMounts)
	}
}

// Every loop pod gets a token for the rig's gateway: bound to the pod, for
// the rig audience, where the rig client reads it.
func TestBuildPodProjectsTheRigToken(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	pod := podSpecFor(run, Defaults{Image: "loop", ServiceAccountName: "clawfarm-loop"})
	checkToken(t, pod, rigTokenVolumeName, contract.DefaultRigAudience, contract.RigTokenPath)
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[contract.SettingRigTokenFile.Env] != contract.RigTokenPath {
		t.Errorf("%s=%q in the loop's environment, want %s", contract.SettingRigTokenFile.Env, env[contract.SettingRigTokenFile.Env], contract.RigTokenPath)
	}
	// A pod with no service account named can carry no token (the API
	// server refuses the projection): none, and no setting pointing at it.
	bare := podSpecFor(run, Defaults{Image: "loop"})
	for _, v := range bare.Spec.Volumes {
		if v.Name == rigTokenVolumeName {
			t.Errorf("a rig token projected with no service account: %+v", v)
		}
	}
	for _, e := range bare.Spec.Containers[0].Env {
		if e.Name == contract.SettingRigTokenFile.Env {
			t.Errorf("%s=%q with no token", e.Name, e.Value)
		}
	}
}

// The budgets and the model's tuning reach the loop; the run's input token
// budget is what its recorded attempts left.
func TestSettingsCarryBudgetsAndTuning(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	run.Spec.Model = farmv1.ModelSpec{Provider: "anthropic", Name: "claude", ThinkingBudgetTokens: 4096,
		Fold: &farmv1.FoldPolicy{AtTurns: 40, KeepTurns: 12}}
	run.Spec.Limits = farmv1.RunLimits{MaxErrors: 3, MaxInputTokens: 5000, MaxRunInputTokens: 9000}
	run.Status.Usage = &farmv1.TokenUsage{PromptTokens: 2500, CachedTokens: 2000}
	env := map[string]string{}
	for _, e := range podSpecFor(run, Defaults{Image: "loop"}).Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		contract.SettingMaxErrors.Env: "3", contract.SettingMaxInputTokens.Env: "5000",
		contract.SettingRunInputTokensLeft.Env: "6500", contract.SettingThinkingBudget.Env: "4096", contract.SettingFold.Env: "40/12",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if left, limited := RunInputTokensLeft(run); left != 6500 || !limited {
		t.Errorf("RunInputTokensLeft = %d, %v", left, limited)
	}
	run.Spec.Limits.MaxRunInputTokens = 0
	if _, limited := RunInputTokensLeft(run); limited {
		t.Error("a run without maxRunInputTokens is limited")
	}
}

// The system prompt's parts reach the pod: the rig's bootstrap ConfigMaps,
// then the run's (one both name, once, as the rig's), mounted in folders
// that sort in that order and listed in that order; the run's append and
// reply bound.
func TestBuildPodMountsBootstrapInOrder(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"},
		Spec: farmv1.AgentRunSpec{Bootstrap: []farmv1.BootstrapSource{{ConfigMapName: "farm-setup"}, {ConfigMapName: "phone-apps"}},
			SystemPromptAppend: "Answer in French.", Model: farmv1.ModelSpec{MaxOutputTokens: 2048}}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node", Endpoint: farmv1.RigEndpoint{URL: "http://rig/mcp"},
			Bootstrap: []farmv1.BootstrapSource{{ConfigMapName: "phone-apps"}}}}
	pod := BuildPod(Spec{Run: run, Rig: rig, Attempt: 1})
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	want := "/etc/clawfarm/bootstrap/00-rig-phone-apps,/etc/clawfarm/bootstrap/01-run-farm-setup"
	if env["CLAWFARM_BOOTSTRAP_DIRS"] != want {
		t.Errorf("CLAWFARM_BOOTSTRAP_DIRS=%q, want %q", env["CLAWFARM_BOOTSTRAP_DIRS"], want)
	}
	if env["CLAWFARM_SYSTEM_PROMPT_APPEND"] != "Answer in French." || env["CLAWFARM_MAX_OUTPUT_TOKENS"] != "2048" {
		t.Errorf("append %q, max output %q", env["CLAWFARM_SYSTEM_PROMPT_APPEND"], env["CLAWFARM_MAX_OUTPUT_TOKENS"])
	}
	mounted := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			mounted[v.Name] = v.ConfigMap.Name
		}
	}
	dirs := strings.Split(want, ",")
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if i, ok := strings.CutPrefix(m.Name, "bootstrap-"); ok {
			if n, _ := strconv.Atoi(i); m.MountPath != dirs[n] || !m.ReadOnly || !strings.HasPrefix(m.MountPath, contract.BootstrapMountRoot+"/") {
				t.Errorf("mount %+v, want %s read-only", m, dirs[n])
			}
		}
	}
	if mounted["bootstrap-0"] != "phone-apps" || mounted["bootstrap-1"] != "farm-setup" || len(mounted) != 2 {
		t.Errorf("ConfigMap volumes %v", mounted)
	}
}

// A hostPath state directory gets the own-state init step, as root with
// CHOWN and FOWNER only, for the loop's user; a PVC (fsGroup works there) or
// a loop with no known user gets none.
func TestBuildPodOwnsAHostPathStateForTheLoopsUser(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	d := Defaults{Image: "loop:1", ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: RestrictedSecurityContext(), PodSecurityContext: RestrictedPodSecurityContext()}
	pod := podSpecFor(run, d)
	if len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("init containers %+v, want the own-state step", pod.Spec.InitContainers)
	}
	c := pod.Spec.InitContainers[0]
	want := []string{contract.OwnStateCommand, "--dir", contract.StateMountPath, "--uid", "65532", "--gid", "65532"}
	if c.Name != StateInitContainerName || c.Image != "loop:1" || strings.Join(c.Args, " ") != strings.Join(want, " ") || len(c.Command) != 0 {
		t.Errorf("own-state %s image %s command %v args %v, want the loop image's entrypoint with %v", c.Name, c.Image, c.Command, c.Args, want)
	}
	sc := c.SecurityContext
	if sc == nil || *sc.RunAsUser != 0 || *sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 2 {
		t.Errorf("own-state securityContext %+v", sc)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != pod.Spec.Containers[0].VolumeMounts[0].Name || c.VolumeMounts[0].MountPath != contract.StateMountPath {
		t.Errorf("own-state mounts %+v", c.VolumeMounts)
	}

	// The pod's user, where the container says none.
	d.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}
	d.PodSecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}
	if c := podSpecFor(run, d).Spec.InitContainers; len(c) != 1 || strings.Join(c[0].Args[3:], " ") != "--uid 1000" {
		t.Errorf("pod-level user: %+v", c)
	}
	for name, d := range map[string]Defaults{
		"no user":   {Image: "loop:1"},
		"root user": {Image: "loop:1", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}},
	} {
		if c := podSpecFor(run, d).Spec.InitContainers; len(c) != 0 {
			t.Errorf("%s: init containers %+v, want none", name, c)
		}
	}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node", StateVolume: farmv1.StateVolume{PersistentVolumeClaim: "rig-state"}}}
	d.SecurityContext = RestrictedSecurityContext()
	if c := BuildPod(Spec{Run: run, Rig: rig, Attempt: 1, Defaults: d}).Spec.InitContainers; len(c) != 0 {
		t.Errorf("a PVC state volume: init containers %+v, want none", c)
	}
}

// A rig whose phone server is on its node's loopback gets host-network
// pods; the manager's --loop-api-server goes in the loop's own variables.
func TestBuildPodNetworkAndAPIServer(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node", HostNetwork: true, Endpoint: farmv1.RigEndpoint{URL: "http://127.0.0.1:8000/mcp"}}}
	pod := BuildPod(Spec{Run: run, Rig: rig, Attempt: 1, Defaults: Defaults{APIServer: "127.0.0.1:6443"}})
	if !pod.Spec.HostNetwork {
		t.Error("the rig asks for the node's network; the pod has its own")
	}
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("KUBERNETES_SERVICE_HOST/PORT = %q/%q, want 127.0.0.1/6443", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
	}
	rig.Spec.HostNetwork = false
	pod = BuildPod(Spec{Run: run, Rig: rig, Attempt: 1})
	if pod.Spec.HostNetwork {
		t.Error("a rig that says nothing gets host-network pods")
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") {
			t.Errorf("without --loop-api-server the pod sets %s", e.Name)
		}
	}
}

// The loop's heartbeat stays well within the run's stall watchdog: three
// heartbeats go by before the watchdog judges the session stalled.
func TestBuildPodSetsTheProgressHeartbeatFromTheStallWatchdog(t *testing.T) {
	for stall, want := range map[*int32]string{nil: "15", ptr.To[int32](0): "15", ptr.To[int32](40): "10", ptr.To[int32](10): "2"} {
		run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"}}
		run.Spec.Limits.StallSeconds = stall
		got := ""
		for _, e := range podSpecFor(run, Defaults{}).Spec.Containers[0].Env {
			if e.Name == contract.SettingProgressHeartbeat.Env {
				got = e.Value
			}
		}
		if got != want {
			t.Errorf("stallSeconds %v: %s=%q, want %q", stall, contract.SettingProgressHeartbeat.Env, got, want)
		}
	}
}
