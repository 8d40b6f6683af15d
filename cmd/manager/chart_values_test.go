package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
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

func TestChartServiceMonitor(t *testing.T) {
	t.Parallel()
	if find(renderChart(t), "ServiceMonitor", "", "") != nil {
		t.Error("a ServiceMonitor by default: clusters without prometheus-operator would refuse the release")
	}
	objs := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=15s",
		"--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack")
	var sm object
	for _, o := range objs {
		if o["kind"] == "ServiceMonitor" {
			sm = o
		}
	}
	if sm == nil || sm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("ServiceMonitor %v", sm)
	}
	if dig(sm, "metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v", dig(sm, "metadata", "labels"))
	}
	ep := dig(sm, "spec", "endpoints").([]any)[0]
	if dig(ep, "interval") != "15s" || dig(ep, "port") != "metrics" {
		t.Errorf("endpoint %v", ep)
	}
	// The run counters' namespace label is the run's: Prometheus must keep
	// it, not rename it exported_namespace under the manager's.
	if dig(ep, "honorLabels") != true {
		t.Errorf("endpoint %v, want honorLabels: true", ep)
	}
	// The endpoint is HTTPS and wants a token, as the manager is told: the
	// token of a ServiceAccount the chart binds to the metrics reader role,
	// from a Secret in the ServiceMonitor's namespace (authorization, not
	// the deprecated bearerTokenFile, which names a file of Prometheus's pod).
	if dig(ep, "scheme") != "https" || dig(ep, "bearerTokenFile") != nil || !*chartManagerFlags(t, managerDeployment(t, objs)).metricsSecure {
		t.Errorf("endpoint %v, want https with authorization, to a manager with --metrics-secure", ep)
	}
	if dig(ep, "authorization", "type") != "Bearer" || dig(ep, "authorization", "credentials", "name") != "t-clawfarm-metrics-scraper-token" ||
		dig(ep, "authorization", "credentials", "key") != "token" {
		t.Errorf("endpoint authorization %v, want the Bearer token in t-clawfarm-metrics-scraper-token", dig(ep, "authorization"))
	}
	tok := find(objs, "Secret", "farm", "t-clawfarm-metrics-scraper-token")
	if tok == nil || tok["type"] != "kubernetes.io/service-account-token" ||
		dig(tok, "metadata", "annotations", "kubernetes.io/service-account.name") != "t-clawfarm-metrics-scraper" {
		t.Errorf("the scraper's token Secret %v", tok)
	}
	if find(objs, "ServiceAccount", "farm", "t-clawfarm-metrics-scraper") == nil {
		t.Error("no scraper ServiceAccount for the token")
	}
	crb := find(objs, "ClusterRoleBinding", "", "t-clawfarm-metrics-scraper")
	if crb == nil || dig(crb, "roleRef", "name") != "t-clawfarm-metrics-reader" || find(objs, "ClusterRole", "", "t-clawfarm-metrics-reader") == nil ||
		dig(crb, "subjects").([]any)[0].(map[string]any)["name"] != "t-clawfarm-metrics-scraper" {
		t.Errorf("the scraper's binding %v, want t-clawfarm-metrics-reader bound to t-clawfarm-metrics-scraper", crb)
	}
	// A Secret of the user's own: named, and nothing made for it.
	own := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.tokenSecret.name=prom-token",
		"--set", "metrics.serviceMonitor.tokenSecret.key=jwt")
	for _, o := range own {
		if o["kind"] == "ServiceMonitor" {
			if cred := dig(o, "spec", "endpoints").([]any)[0].(map[string]any)["authorization"]; dig(cred, "credentials", "name") != "prom-token" || dig(cred, "credentials", "key") != "jwt" {
				t.Errorf("tokenSecret prom-token/jwt: authorization %v", cred)
			}
		}
	}
	if find(own, "ServiceAccount", "farm", "t-clawfarm-metrics-scraper") != nil || find(own, "Secret", "farm", "t-clawfarm-metrics-scraper-token") != nil {
		t.Error("with tokenSecret.name set the chart still makes a scraper account")
	}
	plain := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.secure=false")
	for _, o := range plain {
		if o["kind"] == "ServiceMonitor" && dig(o, "spec", "endpoints").([]any)[0].(map[string]any)["scheme"] != nil {
			t.Errorf("metrics.secure=false still scrapes %v", dig(o, "spec", "endpoints"))
		}
	}
	if find(plain, "ServiceAccount", "farm", "t-clawfarm-metrics-scraper") != nil {
		t.Error("metrics.secure=false: a scraper account for plain HTTP")
	}
	if *chartManagerFlags(t, managerDeployment(t, plain)).metricsSecure {
		t.Error("metrics.secure=false: the manager still serves HTTPS")
	}
	svc := find(objs, "Service", "farm", "t-clawfarm-metrics")
	svcLabels := dig(svc, "metadata", "labels").(map[string]any)
	for k, v := range dig(sm, "spec", "selector", "matchLabels").(map[string]any) {
		if svcLabels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%v, which the metrics Service lacks", k, v)
		}
	}
	if port := dig(svc, "spec", "ports").([]any)[0]; dig(port, "name") != "metrics" {
		t.Errorf("the metrics Service's port is %v, the ServiceMonitor scrapes 'metrics'", port)
	}
	if _, stderr, err := renderChartErr(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.enabled=false"); err == nil ||
		!strings.Contains(stderr, "needs metrics.enabled") {
		t.Errorf("a ServiceMonitor without metrics: err %v, %s", err, stderr)
	}
}

// The dashboard's queries name only metrics the operator exports
// (controllers/agentrun/metrics.go, controllers/devicerig/metrics.go).
func TestChartDashboardNamesOnlyExistingMetrics(t *testing.T) {
	t.Parallel()
	if find(renderChart(t), "ConfigMap", "", "t-clawfarm-dashboard") != nil {
		t.Error("the dashboard ConfigMap rendered with the dashboard off")
	}
	objs := renderChart(t, "--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.namespace=monitoring")
	cm := find(objs, "ConfigMap", "monitoring", "t-clawfarm-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap in metrics.dashboard.namespace")
	}
	if dig(cm, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("dashboard labels %v, want the Grafana sidecar's grafana_dashboard: \"1\"", dig(cm, "metadata", "labels"))
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(dig(cm, "data", "clawfarm.json").(string)), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exported := exportedMetrics(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			names := promQLMetrics(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("panel %q: %q names %s, which the operator does not export", p.Title, tg.Expr, n)
				}
				used[n] = true
			}
		}
	}
	if len(dash.Panels) == 0 || len(used) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	t.Logf("the dashboard uses %d of the %d exported series names", len(used), len(exported))
}

// The PrometheusRule's alerts read only series the operator exports, with
// label values it sets (run and rig phases, attempt outcomes), and take
// their thresholds from the values.
func TestChartPrometheusRule(t *testing.T) {
	t.Parallel()
	if find(renderChart(t), "PrometheusRule", "", "t-clawfarm-alerts") != nil {
		t.Error("a PrometheusRule by default: clusters without prometheus-operator would refuse the release")
	}
	objs := renderChart(t, "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
		"--set", "metrics.prometheusRule.rigsNotReadyFor=7m", "--set", "metrics.prometheusRule.queuedFor=45m",
		"--set-json", "metrics.prometheusRule.budgetExhaustedRatio=0.25")
	pr := find(objs, "PrometheusRule", "farm", "t-clawfarm-alerts")
	if pr == nil || pr["apiVersion"] != "monitoring.coreos.com/v1" || dig(pr, "metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Fatalf("PrometheusRule %v", pr)
	}
	known := map[string]map[string]bool{"phase": {}, "outcome": {}}
	for _, p := range []farmv1.RunPhase{farmv1.RunPending, farmv1.RunQueued, farmv1.RunRunning, farmv1.RunRetrying, farmv1.RunWaiting,
		farmv1.RunSucceeded, farmv1.RunFailed, farmv1.RunCancelled} {
		known["phase"][string(p)] = true
	}
	for _, p := range []farmv1.RigPhase{farmv1.RigReady, farmv1.RigInUse, farmv1.RigNotReady, farmv1.RigOffline, farmv1.RigMaintenance} {
		known["phase"][string(p)] = true
	}
	for _, o := range []string{farmv1.OutcomeDone, farmv1.OutcomeFail, farmv1.OutcomeWait, farmv1.OutcomeIdle, farmv1.OutcomeStuck,
		farmv1.OutcomeBudget, farmv1.OutcomeNotRetryable, farmv1.OutcomeInvalidConfig, farmv1.OutcomeInfrastructure,
		farmv1.OutcomeCancelled, farmv1.OutcomeStalled} {
		known["outcome"][o] = true
	}
	matcher := regexp.MustCompile(`(\w+)=~?"([^"]*)"`)
	exported := exportedMetrics(t)
	alerts := map[string]map[string]any{}
	for _, g := range dig(pr, "spec", "groups").([]any) {
		for _, r := range dig(g, "rules").([]any) {
			rule := r.(map[string]any)
			name, _ := rule["alert"].(string)
			expr, _ := rule["expr"].(string)
			alerts[name] = rule
			if dig(rule, "labels", "severity") == nil || dig(rule, "annotations", "summary") == nil || dig(rule, "annotations", "description") == nil {
				t.Errorf("alert %s lacks a severity, a summary or a description: %v", name, rule)
			}
			names := promQLMetrics(expr)
			if len(names) == 0 {
				t.Errorf("alert %s: %q names no metric", name, expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("alert %s: %q names %s, which the operator does not export", name, expr, n)
				}
			}
			for _, m := range matcher.FindAllStringSubmatch(expr, -1) {
				for _, v := range strings.Split(m[2], "|") {
					if values, ok := known[m[1]]; ok && !values[v] {
						t.Errorf("alert %s: %s=%q is not a value the operator sets", name, m[1], v)
					}
				}
			}
		}
	}
	for name, want := range map[string]string{"ClawfarmRigsNotReady": "7m", "ClawfarmRunsQueuedWithoutProgress": "5m", "ClawfarmBudgetExhaustion": "15m"} {
		if rule := alerts[name]; rule == nil || rule["for"] != want {
			t.Errorf("alert %s: %v, want for: %s", name, rule, want)
		}
	}
	if rule := alerts["ClawfarmStallWatchdogFiring"]; rule == nil || !strings.Contains(rule["expr"].(string), `outcome="Stalled"`) {
		t.Errorf("no stall watchdog alert: %v", rule)
	}
	if e, _ := dig(alerts["ClawfarmRunsQueuedWithoutProgress"], "expr").(string); !strings.Contains(e, "[45m]") {
		t.Errorf("queuedFor=45m: %q", e)
	}
	if e, _ := dig(alerts["ClawfarmBudgetExhaustion"], "expr").(string); !strings.HasSuffix(e, "> 0.25") {
		t.Errorf("budgetExhaustedRatio=0.25: %q", e)
	}
	if _, stderr, err := renderChartErr(t, "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.enabled=false"); err == nil ||
		!strings.Contains(stderr, "needs metrics.enabled") {
		t.Errorf("alerts without metrics: err %v, %s", err, stderr)
	}
	if _, _, err := renderChartErr(t, "--set", "metrics.prometheusRule.budgetExhaustedRatio=2"); err == nil {
		t.Error("budgetExhaustedRatio=2 rendered; the schema must refuse a share above 1")
	}
}

// exportedMetrics reads the metric names the two controllers declare: the
// Name of each prometheus Opts literal and the first argument of each
// prometheus.NewDesc, with _bucket, _sum and _count for histograms.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, file := range []string{"../../controllers/agentrun/metrics.go", "../../controllers/devicerig/metrics.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if id, _ := kv.Key.(*ast.Ident); ok && id != nil && id.Name == "Name" {
						name := stringLit(t, kv.Value)
						names[name] = true
						if sel.Sel.Name == "HistogramOpts" {
							names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
					names[stringLit(t, n.Args[0])] = true
				}
			}
			return true
		})
	}
	if len(names) < 4 {
		t.Fatalf("found only %v in the controllers' metrics.go", names)
	}
	return names
}

func stringLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		t.Fatalf("a metric name that is not a string literal: %#v", e)
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	promQLStrip = regexp.MustCompile(`"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\b(by|without|on|ignoring)\s*\([^)]*\)`)
	promQLWord  = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	// The PromQL functions and keywords the dashboard may use; any other
	// word in a query is taken for a metric name.
	promQLKeywords = map[string]bool{"sum": true, "max": true, "min": true, "avg": true, "count": true, "rate": true,
		"irate": true, "increase": true, "histogram_quantile": true, "and": true, "or": true, "unless": true, "offset": true}
)

// promQLMetrics returns the metric names in a PromQL expression: its words
// once strings, label matchers, ranges and grouping clauses are removed,
// less the functions and keywords.
func promQLMetrics(expr string) []string {
	var out []string
	for _, w := range promQLWord.FindAllString(promQLStrip.ReplaceAllString(expr, " "), -1) {
		if !promQLKeywords[w] {
			out = append(out, w)
		}
	}
	return out
}

func TestPromQLMetrics(t *testing.T) {
	t.Parallel()
	got := promQLMetrics(`histogram_quantile(0.95, sum by (le) (rate(a_bucket{phase=~"x|y"}[$__rate_interval]))) / max without (pod) (b) + 2`)
	if !slices.Equal(got, []string{"a_bucket", "b"}) {
		t.Errorf("promQLMetrics = %v", got)
	}
}

func TestChartRignodeRBAC(t *testing.T) {
	t.Parallel()
	for _, o := range renderChart(t) {
		if strings.HasSuffix(dig(o, "metadata", "name").(string), "-rignode") {
			t.Errorf("%s %v rendered with rignode.rbac.create off", o["kind"], dig(o, "metadata", "name"))
		}
	}
	objs := renderChart(t, "--set", "rignode.rbac.create=true")
	if find(objs, "ClusterRole", "", "t-clawfarm-rignode") == nil {
		t.Fatal("no rignode ClusterRole")
	}
	if find(objs, "ClusterRoleBinding", "", "t-clawfarm-rignode") != nil {
		t.Error("a ClusterRoleBinding with no subjects")
	}
	objs = renderChart(t, "--set", "rignode.rbac.create=true",
		"--set", "rignode.rbac.subjects[0].kind=Group", "--set", "rignode.rbac.subjects[0].name=system:nodes",
		"--set", "rignode.rbac.subjects[1].kind=ServiceAccount", "--set", "rignode.rbac.subjects[1].name=rignode", "--set", "rignode.rbac.subjects[1].namespace=rigs")
	b := find(objs, "ClusterRoleBinding", "", "t-clawfarm-rignode")
	if b == nil || dig(b, "roleRef", "name") != "t-clawfarm-rignode" {
		t.Fatalf("binding %v", b)
	}
	want := []any{
		map[string]any{"kind": "Group", "name": "system:nodes", "apiGroup": "rbac.authorization.k8s.io"},
		map[string]any{"kind": "ServiceAccount", "name": "rignode", "namespace": "rigs"},
	}
	if !reflect.DeepEqual(b["subjects"], want) {
		t.Errorf("subjects %v, want %v", b["subjects"], want)
	}
}
