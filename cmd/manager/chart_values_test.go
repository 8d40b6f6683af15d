package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// What a cluster operator sets in the chart's values reaches the cluster:
// the schema refuses what would not work, and each value lands where
// docs/chart.md says.

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func managerDeployment(t *testing.T, objs []object) object {
	t.Helper()
	dep := find(objs, "Deployment", "farm", "t-clawfarm-manager")
	if dep == nil {
		t.Fatal("the chart renders no manager Deployment")
	}
	return dep
}

func TestChartSchemaRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  string
		says string
	}{
		{"manager.replica=2", "'replica' not allowed"},
		{"replicas=2", "'replicas' not allowed"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"image.manager.digest=sha256:abc", "/image/manager/digest"},
		{"image.loop.digest=md5:" + strings.Repeat("a", 32), "/image/loop/digest"},
		{"image.loop.sha=x", "'sha' not allowed"},
		{"manager.logLevel=verbose", "/manager/logLevel"},
		{"manager.rigProbeInterval=15", "/manager/rigProbeInterval"},
		{"runs.podStartupTimeout=five minutes", "/runs/podStartupTimeout"},
		{"manager.agentRunWorkers=0", "/manager/agentRunWorkers"},
		{"manager.replicas=0", "/manager/replicas"},
		{"metrics.port=70000", "/metrics/port"},
		{"runs.loopPod.resources.request.cpu=1", "'request' not allowed"},
		{"runs.followUpPod.securityContext.runAsUsr=1", "'runAsUsr' not allowed"},
		{"runs.loopPod.podSecurityContext.runAsUser=-1", "/runs/loopPod/podSecurityContext/runAsUser"},
		{"apiServer=https://10.0.0.5:6443", "/apiServer"},
		{"runs.loopPod.apiServer=10.0.0.5:6443", "'apiServer' not allowed"},
		{"manager.hostNetwork=yes", "/manager/hostNetwork"},
		{"runs.followUpPod.resources.limits.memory=lots", "/runs/followUpPod/resources/limits/memory"},
		{"metrics.serviceMonitor.interval=soon", "/metrics/serviceMonitor/interval"},
		{"metrics.dashbord.enabled=true", "'dashbord' not allowed"},
		{"rignode.rbac.subjects[0].kind=Robot,rignode.rbac.subjects[0].name=x", "/rignode/rbac/subjects/0/kind"},
		{"imagePullSecrets[0].secret=x", "'secret' not allowed"},
	} {
		_, stderr, err := renderChartErr(t, "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s: the chart rendered; the schema should refuse it", tc.set)
			continue
		}
		if !strings.Contains(stderr, tc.says) {
			t.Errorf("--set %s: helm says %q, want it to mention %q", tc.set, stderr, tc.says)
		}
	}
}

// The schema's Kubernetes types list exactly the fields of the core/v1 types
// the manager decodes its flags into: a field the schema refuses would be
// usable, one it accepts that the manager does not know would stop it.
func TestChartSchemaKnowsTheCoreV1Fields(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../charts/clawfarm/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema %v, want draft-07", schema["$schema"])
	}
	for def, typ := range map[string]reflect.Type{
		"resources":          reflect.TypeFor[corev1.ResourceRequirements](),
		"securityContext":    reflect.TypeFor[corev1.SecurityContext](),
		"podSecurityContext": reflect.TypeFor[corev1.PodSecurityContext](),
		"capabilities":       reflect.TypeFor[corev1.Capabilities](),
		"seccompProfile":     reflect.TypeFor[corev1.SeccompProfile](),
	} {
		var want []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			want = append(want, name)
		}
		var got []string
		for name := range dig(schema, "definitions", def, "properties").(map[string]any) {
			got = append(got, name)
		}
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("schema definition %s has %v, core/v1 %s has %v", def, got, typ.Name(), want)
		}
		if dig(schema, "definitions", def, "additionalProperties") != false {
			t.Errorf("schema definition %s accepts unknown fields", def)
		}
	}
}

func TestChartImagesByTagOrDigest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args          []string
		manager, loop string
	}{
		{nil, "ghcr.io/clawfarm/manager:0.1.0", "ghcr.io/clawfarm/loop:0.1.0"},
		{[]string{"--set", "image.manager.tag=v2", "--set", "image.loop.repository=reg.example/loop"},
			"ghcr.io/clawfarm/manager:v2", "reg.example/loop:0.1.0"},
		// The dev cluster's form: a registry and digests; a digest wins over a tag.
		{[]string{"--set", "image.manager.repository=localhost:5000/clawfarm/manager", "--set", "image.manager.digest=" + digestA,
			"--set", "image.manager.tag=ignored", "--set", "image.loop.repository=localhost:5000/clawfarm/loop", "--set", "image.loop.digest=" + digestA},
			"localhost:5000/clawfarm/manager@" + digestA, "localhost:5000/clawfarm/loop@" + digestA},
	} {
		dep := managerDeployment(t, renderChart(t, tc.args...))
		f := chartManagerFlags(t, dep)
		image := dig(dep, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)["image"]
		if image != tc.manager || *f.managerImage != tc.manager || *f.loopImage != tc.loop {
			t.Errorf("%q: manager container %v, --manager-image %q, --loop-image %q; want %s and %s",
				tc.args, image, *f.managerImage, *f.loopImage, tc.manager, tc.loop)
		}
	}
}

func TestChartImagePullSecretsReachEveryPod(t *testing.T) {
	t.Parallel()
	objs := renderChart(t, "--set", "imagePullSecrets[0].name=regcred", "--set", "runs.namespaces={lab-a,lab-b}")
	want := []any{map[string]any{"name": "regcred"}}
	dep := managerDeployment(t, objs)
	if got := dig(dep, "spec", "template", "spec", "imagePullSecrets"); !reflect.DeepEqual(got, want) {
		t.Errorf("manager pod imagePullSecrets %v", got)
	}
	accounts := map[string]string{"t-clawfarm-manager": "farm"}
	for _, ns := range []string{"lab-a", "lab-b"} {
		accounts["clawfarm-loop@"+ns], accounts["clawfarm-followup@"+ns] = ns, ns
	}
	for key, ns := range accounts {
		name, _, _ := strings.Cut(key, "@")
		sa := find(objs, "ServiceAccount", ns, name)
		if sa == nil {
			t.Errorf("no ServiceAccount %s/%s", ns, name)
			continue
		}
		if got := sa["imagePullSecrets"]; !reflect.DeepEqual(got, want) {
			t.Errorf("ServiceAccount %s/%s imagePullSecrets %v: its pods could not pull from the private registry", ns, name, got)
		}
	}
	for _, o := range renderChart(t) {
		if o["kind"] == "ServiceAccount" && o["imagePullSecrets"] != nil {
			t.Errorf("ServiceAccount %v has imagePullSecrets with none set", dig(o, "metadata", "name"))
		}
	}
}

// The chart's defaults for the pods the manager creates reach them: loop
// pods and follow-up Jobs locked down (attempt.RestrictedSecurityContext),
// the follow-ups with small requests, both with the chart's pull policy.
func TestChartPodSettingsReachTheManagersPods(t *testing.T) {
	t.Parallel()
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "run", UID: "u"},
		Spec: farmv1.AgentRunSpec{Trigger: "go", Model: farmv1.ModelSpec{Name: "m"}}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node", Endpoint: farmv1.RigEndpoint{URL: "http://rig/mcp"}}}
	child := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "run-f1"}, Spec: run.Spec}
	build := func(f *managerFlags) (*corev1.Pod, *corev1.PodSpec) {
		loop, fu := f.podDefaults()
		cj, err := followup.WaitCronJob(run, child, time.Now().Add(time.Hour), fu)
		if err != nil {
			t.Fatal(err)
		}
		return attempt.BuildPod(attempt.Spec{Run: run, Rig: rig, Attempt: 1, Defaults: loop}), &cj.Spec.JobTemplate.Spec.Template.Spec
	}

	pod, job := build(chartManagerFlags(t, managerDeployment(t, renderChart(t))))
	for name, got := range map[string][2]any{
		"loop container":      {pod.Spec.Containers[0].SecurityContext, attempt.RestrictedSecurityContext()},
		"loop pod":            {pod.Spec.SecurityContext, attempt.RestrictedPodSecurityContext()},
		"follow-up container": {job.Containers[0].SecurityContext, attempt.RestrictedSecurityContext()},
		"follow-up pod":       {job.SecurityContext, attempt.RestrictedPodSecurityContext()},
	} {
		if !apiequality.Semantic.DeepEqual(got[0], got[1]) {
			t.Errorf("%s securityContext by default %+v, want %+v", name, got[0], got[1])
		}
	}
	if ic := pod.Spec.InitContainers; len(ic) != 1 || ic[0].Name != attempt.StateInitContainerName || !slices.Contains(ic[0].Args, "65532") {
		t.Errorf("loop pod init containers by default %+v, want own-state for uid 65532 (the hostPath state)", ic)
	}
	c := job.Containers[0]
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("follow-up pull policy %q", c.ImagePullPolicy)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("follow-up container securityContext %+v", sc)
	}
	if psc := job.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("follow-up pod securityContext %+v", psc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("follow-up resources %+v, want small requests and a memory limit", c.Resources)
	}

	pod, job = build(chartManagerFlags(t, managerDeployment(t, renderChart(t,
		"--set", "image.pullPolicy=Always",
		"--set", "runs.loopPod.resources.requests.cpu=250m",
		"--set", "runs.loopPod.resources.limits.memory=1Gi",
		"--set", "runs.loopPod.podSecurityContext.runAsUser=65532",
		"--set", "runs.loopPod.securityContext.readOnlyRootFilesystem=true",
		"--set", "runs.followUpPod.resources.limits.memory=96Mi",
		"--set", "apiServer=10.0.0.5:6443",
	))))
	lc := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range lc.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "10.0.0.5" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("apiServer: the loop's KUBERNETES_SERVICE_HOST/PORT are %q/%q", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
	}
	if lc.ImagePullPolicy != corev1.PullAlways || job.Containers[0].ImagePullPolicy != corev1.PullAlways {
		t.Errorf("pull policies: loop %q, follow-up %q; want the chart's Always", lc.ImagePullPolicy, job.Containers[0].ImagePullPolicy)
	}
	if lc.Resources.Requests.Cpu().Cmp(resource.MustParse("250m")) != 0 || lc.Resources.Limits.Memory().Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("loop resources %+v", lc.Resources)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("loop pod securityContext %+v", psc)
	}
	if sc := lc.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("loop container securityContext %+v", sc)
	}
	if m := job.Containers[0].Resources.Limits.Memory(); m.Cmp(resource.MustParse("96Mi")) != 0 {
		t.Errorf("follow-up memory limit %s", m.String())
	}
}

// On a node without kube-proxy or a pod network (a farm's rig-side nodes,
// the dev cluster's kubelet nodes) the manager and the trace server share
// the node's network and reach the API server where apiServer says; by
// default neither does, and the kubelet's Service variables stand.
func TestChartHostNetworkAndAPIServer(t *testing.T) {
	t.Parallel()
	pods := func(objs []object) map[string]object {
		out := map[string]object{}
		for _, name := range []string{"t-clawfarm-manager", "t-clawfarm-server"} {
			dep := find(objs, "Deployment", "farm", name)
			if dep == nil {
				t.Fatalf("no Deployment %s", name)
			}
			out[name] = dig(dep, "spec", "template", "spec").(map[string]any)
		}
		return out
	}
	envOf := func(spec object) map[string]any {
		env := map[string]any{}
		list, _ := dig(spec["containers"].([]any)[0], "env").([]any)
		for _, e := range list {
			env[e.(map[string]any)["name"].(string)] = e.(map[string]any)["value"]
		}
		return env
	}
	for name, spec := range pods(renderChart(t)) {
		if spec["hostNetwork"] != nil || envOf(spec)["KUBERNETES_SERVICE_HOST"] != nil {
			t.Errorf("%s by default: hostNetwork %v, env %v; want the pod network and the kubelet's Service variables", name, spec["hostNetwork"], envOf(spec))
		}
	}
	objs := renderChart(t, "--set", "apiServer=127.0.0.1:6443", "--set", "manager.hostNetwork=true", "--set", "server.hostNetwork=true")
	for name, spec := range pods(objs) {
		env := envOf(spec)
		if spec["hostNetwork"] != true || spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
			t.Errorf("%s: hostNetwork %v dnsPolicy %v", name, spec["hostNetwork"], spec["dnsPolicy"])
		}
		if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" || env["KUBERNETES_SERVICE_PORT_HTTPS"] != "6443" {
			t.Errorf("%s: env %v, want the Service variables at 127.0.0.1:6443", name, env)
		}
	}
	// The surge pod of a rolling update would want the old pod's host
	// ports: on a host network the manager replaces its pods one at a time.
	if s := dig(managerDeployment(t, objs), "spec", "strategy"); fmt.Sprint(s) != "map[rollingUpdate:map[maxSurge:0 maxUnavailable:1] type:RollingUpdate]" {
		t.Errorf("manager on the host network: strategy %v, want a rolling update with maxSurge 0, maxUnavailable 1", s)
	}
	if s := dig(managerDeployment(t, renderChart(t)), "spec", "strategy"); s != nil {
		t.Errorf("manager on the pod network: strategy %v, want the Deployment's default", s)
	}
	if f := chartManagerFlags(t, managerDeployment(t, objs)); *f.loopAPIServer != "127.0.0.1:6443" {
		t.Errorf("--loop-api-server %q, want apiServer's 127.0.0.1:6443", *f.loopAPIServer)
	}
	// The S3 credentials' envFrom and apiServer's env sit side by side.
	objs = renderChart(t, "--set", "apiServer=10.0.0.5:6443", "--set", "server.s3.bucket=b", "--set", "server.s3.endpoint=s3:9000", "--set", "server.s3.credentialsSecret=s3")
	c := pods(objs)["t-clawfarm-server"]["containers"].([]any)[0].(map[string]any)
	if c["envFrom"] == nil || envOf(pods(objs)["t-clawfarm-server"])["KUBERNETES_SERVICE_HOST"] != "10.0.0.5" {
		t.Errorf("server container with S3 and apiServer: envFrom %v env %v", c["envFrom"], c["env"])
	}
}

func TestChartSpreadsReplicasOnlyWhenThereAreSeveral(t *testing.T) {
	t.Parallel()
	objs := renderChart(t, "--set", "manager.replicas=1")
	if find(objs, "PodDisruptionBudget", "farm", "t-clawfarm-manager") != nil {
		t.Error("a PodDisruptionBudget for one replica blocks every drain")
	}
	if a := dig(managerDeployment(t, objs), "spec", "template", "spec", "affinity"); a != nil {
		t.Errorf("affinity %v for one replica", a)
	}

	objs = renderChart(t, "--set", "manager.replicas=3")
	dep := managerDeployment(t, objs)
	podLabels := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
	pdb := find(objs, "PodDisruptionBudget", "farm", "t-clawfarm-manager")
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget for 3 replicas")
	}
	if mu := dig(pdb, "spec", "maxUnavailable"); mu != int64(1) && mu != float64(1) {
		t.Errorf("maxUnavailable %v, want 1", mu)
	}
	selects := func(sel any) bool {
		m, _ := sel.(map[string]any)
		for k, v := range m {
			if podLabels[k] != v {
				return false
			}
		}
		return len(m) > 0
	}
	if !selects(dig(pdb, "spec", "selector", "matchLabels")) {
		t.Errorf("the PodDisruptionBudget selects %v, not the manager pods %v", dig(pdb, "spec", "selector"), podLabels)
	}
	terms, _ := dig(dep, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution").([]any)
	if len(terms) != 1 || dig(terms[0], "podAffinityTerm", "topologyKey") != "kubernetes.io/hostname" ||
		!selects(dig(terms[0], "podAffinityTerm", "labelSelector", "matchLabels")) {
		t.Errorf("anti-affinity %v, want a preferred term on kubernetes.io/hostname selecting the manager pods", terms)
	}

	objs = renderChart(t, "--set", "manager.replicas=3", "--set", "manager.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"--set", "manager.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists")
	a := dig(managerDeployment(t, objs), "spec", "template", "spec", "affinity").(map[string]any)
	if a["podAntiAffinity"] != nil || a["nodeAffinity"] == nil {
		t.Errorf("affinity %v, want manager.affinity as given", a)
	}
}

// rignode's and the rig gateway's ClusterRoles are there when asked for,
// and bound to the subjects named.
func TestChartRigHostRBAC(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ key, suffix string }{{"rignode", "-rignode"}, {"rigGateway", "-rig-gateway"}} {
		for _, o := range renderChart(t) {
			if strings.HasSuffix(dig(o, "metadata", "name").(string), c.suffix) {
				t.Errorf("%s %v rendered with %s.rbac.create off", o["kind"], dig(o, "metadata", "name"), c.key)
			}
		}
		name := "t-clawfarm" + c.suffix
		objs := renderChart(t, "--set", c.key+".rbac.create=true")
		if find(objs, "ClusterRole", "", name) == nil {
			t.Fatalf("no ClusterRole %s", name)
		}
		if find(objs, "ClusterRoleBinding", "", name) != nil {
			t.Errorf("a ClusterRoleBinding %s with no subjects", name)
		}
		objs = renderChart(t, "--set", c.key+".rbac.create=true",
			"--set", c.key+".rbac.subjects[0].kind=Group", "--set", c.key+".rbac.subjects[0].name=system:nodes",
			"--set", c.key+".rbac.subjects[1].kind=ServiceAccount", "--set", c.key+".rbac.subjects[1].name=rignode", "--set", c.key+".rbac.subjects[1].namespace=rigs")
		b := find(objs, "ClusterRoleBinding", "", name)
		if b == nil || dig(b, "roleRef", "name") != name {
			t.Fatalf("binding %v", b)
		}
		want := []any{
			map[string]any{"kind": "Group", "name": "system:nodes", "apiGroup": "rbac.authorization.k8s.io"},
			map[string]any{"kind": "ServiceAccount", "name": "rignode", "namespace": "rigs"},
		}
		if !reflect.DeepEqual(b["subjects"], want) {
			t.Errorf("%s subjects %v, want %v", name, b["subjects"], want)
		}
	}
}
