package main

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

// The chart's trial (docs/chart.md, "A trial without phones"): rigsim and
// modelsim as pods, a DeviceRig per simulated rig pointing at its Service,
// a model key Secret, and NOTES.txt's AgentRun naming all of them, so a run
// reaches DONE on a cluster with no phone and no model key.

// trialOn are the values that turn the trial on.
var trialOn = []string{"--set", "trial.enabled=true", "--set", "trial.nodeName=rig-node"}

// isTrial says whether an object is the trial's.
func isTrial(o object) bool {
	name, _ := dig(o, "metadata", "name").(string)
	switch dig(o, "metadata", "labels", "app.kubernetes.io/component") {
	case "rigsim", "modelsim", "trial", "trial-rig":
		return true
	}
	return o["kind"] == "DeviceRig" || strings.Contains(name, "rigsim") || strings.Contains(name, "modelsim") ||
		dig(o, "metadata", "labels", admission.LabelModelKey) != nil
}

func TestChartTrialIsOffByDefault(t *testing.T) {
	t.Parallel()
	for _, o := range renderChart(t) {
		if isTrial(o) {
			t.Errorf("the default values render the trial's %s %v", o["kind"], dig(o, "metadata", "name"))
		}
	}
	for _, o := range renderChart(t, append(trialOn, "--set", "trial.enabled=false")...) {
		if isTrial(o) {
			t.Errorf("trial.enabled=false renders the trial's %s %v", o["kind"], dig(o, "metadata", "name"))
		}
	}
}

// strictly decodes a rendered object into a typed one, refusing any field
// the type does not have.
func strictly[T any](t *testing.T, o object) *T {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	v := new(T)
	if err := d.Decode(v); err != nil {
		t.Fatalf("%s %v does not decode strictly: %v", o["kind"], dig(o, "metadata", "name"), err)
	}
	return v
}

func mustFind(t *testing.T, objs []object, kind, ns, name string) object {
	t.Helper()
	o := find(objs, kind, ns, name)
	if o == nil {
		t.Fatalf("no %s %s/%s", kind, ns, name)
	}
	return o
}

// programFlags are the flags a command under cmd/ defines, read from its
// main.go: every fs.<Type>("name", …) call.
func programFlags(t *testing.T, program string) map[string]bool {
	t.Helper()
	file := filepath.Join("..", program, "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "fs" {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			name, _ := strconv.Unquote(lit.Value)
			flags[name] = true
		}
		return true
	})
	if !flags["listen"] {
		t.Fatalf("%s: found flags %v, want at least --listen", file, flags)
	}
	return flags
}

// checkArgs fails on an arg that is not one of the program's flags, and
// returns the args as flag name → value.
func checkArgs(t *testing.T, program string, c corev1.Container) map[string]string {
	t.Helper()
	known := programFlags(t, program)
	got := map[string]string{}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !known[name] {
			t.Errorf("%s is given %q, which is not one of its flags (cmd/%s/main.go)", program, a, program)
		}
		got[name] = value
	}
	return got
}

// listenPort is the port of a --listen address.
func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("--listen=%q: %v", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return int32(p)
}

// servedBy checks that svc reaches pod's container on port port: it selects
// the pod's labels, and its target is the container port the program
// listens on. It returns the Service port.
func servedBy(t *testing.T, svc *corev1.Service, pod corev1.PodTemplateSpec, listen int32) int32 {
	t.Helper()
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("Service %s selects %v, not its pod's labels %v", svc.Name, svc.Spec.Selector, pod.Labels)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service %s has ports %v, want one", svc.Name, svc.Spec.Ports)
	}
	sp := svc.Spec.Ports[0]
	var cp *corev1.ContainerPort
	for i, p := range pod.Spec.Containers[0].Ports {
		if p.Name == sp.TargetPort.String() || p.ContainerPort == sp.TargetPort.IntVal {
			cp = &pod.Spec.Containers[0].Ports[i]
		}
	}
	if cp == nil || cp.ContainerPort != listen {
		t.Errorf("Service %s targets %s, not the container port %d the program listens on (%v)", svc.Name, sp.TargetPort.String(), listen, pod.Spec.Containers[0].Ports)
	}
	return sp.Port
}

// restricted fails unless a pod meets Pod Security "restricted" as the
// chart's other pods do: non-root, seccomp RuntimeDefault, no privilege
// escalation, every capability dropped, a read-only root, no host
// namespaces or volumes, and no API token it has no use for.
func restricted(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccomp RuntimeDefault", name, psc)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s shares a host namespace", name)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s mounts the host path %s", name, v.HostPath.Path)
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s gets an API token it never uses", name)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
			(sc.Privileged != nil && *sc.Privileged) {
			t.Errorf("%s container %s: securityContext %+v, want no privilege escalation, a read-only root and every capability dropped", name, c.Name, sc)
		}
		if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s container %s: resources %+v, want a memory request and limit", name, c.Name, c.Resources)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
			t.Errorf("%s container %s has no readiness probe: its Service would send to it before it listens", name, c.Name)
		}
	}
}

func TestChartTrial(t *testing.T) {
	t.Parallel()
	// Runs in lab-a and lab-b: the trial lives in the first.
	objs := renderChart(t, append(trialOn, "--set", "runs.namespaces={lab-a,lab-b}",
		"--set", "image.rigsim.digest="+digestA)...)
	const ns = "lab-a"
	for _, o := range objs {
		if isTrial(o) && dig(o, "metadata", "namespace") != ns {
			t.Errorf("the trial's %s %v is in %v, want the first run namespace %s", o["kind"], dig(o, "metadata", "name"), dig(o, "metadata", "namespace"), ns)
		}
	}

	// modelsim: its Deployment runs the modelsim image with modelsim's
	// flags, its Service reaches it.
	md := strictly[appsv1.Deployment](t, mustFind(t, objs, "Deployment", ns, "t-clawfarm-modelsim"))
	mc := md.Spec.Template.Spec.Containers[0]
	if mc.Image != "ghcr.io/clawfarm/modelsim:0.1.0" || mc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("modelsim image %s (%s), want ghcr.io/clawfarm/modelsim:0.1.0, the appVersion tag", mc.Image, mc.ImagePullPolicy)
	}
	margs := checkArgs(t, "modelsim", mc)
	if _, ok := margs["scenarios"]; ok || len(md.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("no scenarios given, yet modelsim gets --scenarios or a volume: %v %v", mc.Args, md.Spec.Template.Spec.Volumes)
	}
	msvc := strictly[corev1.Service](t, mustFind(t, objs, "Service", ns, "t-clawfarm-modelsim"))
	modelPort := servedBy(t, msvc, md.Spec.Template, listenPort(t, margs["listen"]))
	restricted(t, "modelsim", md.Spec.Template.Spec)

	// The model key: labelled as the manager requires, holding api-key.
	secret := strictly[corev1.Secret](t, mustFind(t, objs, "Secret", ns, "t-clawfarm-model-key"))
	if err := admission.CheckModelKeySecret(secret); err != nil || secret.StringData["api-key"] == "" {
		t.Errorf("model key Secret keys %v: %v; want a model key with an api-key", secret.StringData, err)
	}

	// Each rig: rigsim with rigsim's flags behind its own Service, and a
	// DeviceRig whose endpoint is that Service, pinned to trial.nodeName.
	var rigs []object
	for _, o := range objs {
		if o["kind"] == "DeviceRig" {
			rigs = append(rigs, o)
		}
	}
	if len(rigs) != 2 {
		t.Fatalf("%d DeviceRigs, want trial.rigs' default 2", len(rigs))
	}
	var rigPods []corev1.PodTemplateSpec
	for i := range 2 {
		name := "t-clawfarm-rigsim-" + strconv.Itoa(i)
		dep := strictly[appsv1.Deployment](t, mustFind(t, objs, "Deployment", ns, name))
		rigPods = append(rigPods, dep.Spec.Template)
		c := dep.Spec.Template.Spec.Containers[0]
		if c.Image != "ghcr.io/clawfarm/rigsim@"+digestA {
			t.Errorf("%s image %s, want the digest", name, c.Image)
		}
		if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 {
			t.Errorf("%s: strategy %s, replicas %v; want one pod, Recreate: two would be two phones behind one rig", name, dep.Spec.Strategy.Type, dep.Spec.Replicas)
		}
		args := checkArgs(t, "rigsim", c)
		if _, many := args["rigs"]; many {
			t.Errorf("%s serves several rigs: %v", name, c.Args)
		}
		restricted(t, name, dep.Spec.Template.Spec)
		svc := strictly[corev1.Service](t, mustFind(t, objs, "Service", ns, name))
		port := servedBy(t, svc, dep.Spec.Template, listenPort(t, args["listen"]))

		rig := strictly[farmv1.DeviceRig](t, mustFind(t, objs, "DeviceRig", ns, name))
		if rig.Spec.NodeName != "rig-node" {
			t.Errorf("%s nodeName %q, want trial.nodeName", name, rig.Spec.NodeName)
		}
		host := name + "." + ns + ".svc:" + strconv.Itoa(int(port))
		if rig.Spec.Endpoint.URL != "http://"+host+"/mcp" || rig.Spec.Endpoint.HealthURL != "http://"+host+"/api/status" {
			t.Errorf("%s endpoint %+v, want its Service http://%s/mcp and /api/status, rigsim's routes", name, rig.Spec.Endpoint, host)
		}
		// The manager probes only a health URL on the endpoint's host.
		u, _ := url.Parse(rig.Spec.Endpoint.URL)
		h, _ := url.Parse(rig.Spec.Endpoint.HealthURL)
		if u == nil || h == nil || u.Hostname() != h.Hostname() {
			t.Errorf("%s: health URL %s is not on the endpoint's host %s: the manager would not probe it", name, rig.Spec.Endpoint.HealthURL, rig.Spec.Endpoint.URL)
		}
		if errs := crdValidate(t, "farm.clawfarm.dev_devicerigs.yaml", mustFind(t, objs, "DeviceRig", ns, name)); len(errs) > 0 {
			t.Errorf("%s fails the DeviceRig CRD's schema: %v", name, errs)
		}
	}
	// One rig's Service never reaches the other's phone.
	for i, p := range rigPods {
		svc := strictly[corev1.Service](t, mustFind(t, objs, "Service", ns, "t-clawfarm-rigsim-"+strconv.Itoa(1-i)))
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
			t.Errorf("Service %s also selects rig %d's pod", svc.Name, i)
		}
	}
	// The manager's and the trace server's Services never select a trial pod.
	for _, name := range []string{"t-clawfarm-metrics", "t-clawfarm-server"} {
		sel := dig(mustFind(t, objs, "Service", "", name), "spec", "selector").(map[string]any)
		set := labels.Set{}
		for k, v := range sel {
			set[k] = v.(string)
		}
		for _, p := range append(rigPods, md.Spec.Template) {
			if labels.SelectorFromSet(set).Matches(labels.Set(p.Labels)) {
				t.Errorf("Service %s selects the trial pod %v", name, p.Labels)
			}
		}
	}

	// The release namespace without runs.namespaces; the rig count and
	// modelsim's image by digest as asked.
	objs = renderChart(t, append(trialOn, "--set", "trial.rigs=3", "--set", "image.modelsim.repository=reg.example/clawfarm/modelsim",
		"--set", "image.modelsim.digest="+digestA)...)
	for i := range 3 {
		if find(objs, "DeviceRig", "farm", "t-clawfarm-rigsim-"+strconv.Itoa(i)) == nil || find(objs, "Service", "farm", "t-clawfarm-rigsim-"+strconv.Itoa(i)) == nil {
			t.Errorf("trial.rigs=3: no rig %d in the release namespace", i)
		}
	}
	if find(objs, "DeviceRig", "farm", "t-clawfarm-rigsim-3") != nil {
		t.Error("trial.rigs=3 renders a fourth rig")
	}
	md = strictly[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "farm", "t-clawfarm-modelsim"))
	if img := md.Spec.Template.Spec.Containers[0].Image; img != "reg.example/clawfarm/modelsim@"+digestA {
		t.Errorf("modelsim image %s, want reg.example/clawfarm/modelsim@%s", img, digestA)
	}
	if modelPort != 8090 {
		t.Errorf("modelsim's Service port %d; NOTES.txt and the admission allow-list name 8090", modelPort)
	}
}

// Extra rigsim flags reach every rig; modelsim's scenarios are mounted
// where --scenarios reads them, and parse as modelsim parses them.
func TestChartTrialSimulatorSettings(t *testing.T) {
	t.Parallel()
	scenario := `{"wifi-on":{"name":"wifi-on","description":"turn Wi-Fi on","sessions":[{"steps":[{"peek":true},{"tap":"Settings"},{"end":{"status":"DONE","recap":"Wi-Fi on."}}]}]}}`
	objs := renderChart(t, append(trialOn, "--set", "trial.rigsim.args={--locked,--glare=0.1}", "--set-json", "trial.modelsim.scenarios="+scenario)...)
	for i := range 2 {
		dep := strictly[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "farm", "t-clawfarm-rigsim-"+strconv.Itoa(i)))
		args := checkArgs(t, "rigsim", dep.Spec.Template.Spec.Containers[0])
		if _, ok := args["locked"]; !ok || args["glare"] != "0.1" {
			t.Errorf("rig %d args %v, want trial.rigsim.args", i, dep.Spec.Template.Spec.Containers[0].Args)
		}
	}
	dep := strictly[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "farm", "t-clawfarm-modelsim"))
	spec := dep.Spec.Template.Spec
	args := checkArgs(t, "modelsim", spec.Containers[0])
	cm := strictly[corev1.ConfigMap](t, mustFind(t, objs, "ConfigMap", "farm", "t-clawfarm-modelsim-scenarios"))
	var mounted bool
	for _, m := range spec.Containers[0].VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.MountPath == args["scenarios"] {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("modelsim --scenarios=%q, mounts %v, volumes %v: the ConfigMap %s is not mounted there", args["scenarios"], spec.Containers[0].VolumeMounts, spec.Volumes, cm.Name)
	}
	s, err := modelsim.ParseScenario([]byte(cm.Data["wifi-on.yaml"]))
	if err != nil || s.Name != "wifi-on" {
		t.Errorf("the scenario as mounted: %v, %v\n%s", s, err, cm.Data["wifi-on.yaml"])
	}
	if dep.Spec.Template.Annotations["checksum/scenarios"] == "" {
		t.Error("modelsim reads its scenarios at start, but a changed scenario does not restart it")
	}
}

// A sharded farm: the trial's rigs carry a pool a manager serves; with an
// admission allow-list of rig hosts, the trial's are on it; modelsim's URL
// is an allowed model endpoint.
func TestChartTrialMeetsTheFarmsRules(t *testing.T) {
	t.Parallel()
	objs := renderChart(t, append(trialOn, "--set", "shards[0].name=a", "--set", "shards[0].pools={x,y}",
		"--set", "shards[1].name=b", "--set", "shards[1].pools={z}")...)
	for i := range 2 {
		rig := mustFind(t, objs, "DeviceRig", "farm", "t-clawfarm-rigsim-"+strconv.Itoa(i))
		if p := dig(rig, "metadata", "labels", farmv1.LabelPool); p != "x" {
			t.Errorf("rig %d pool %v, want x, the first shard's first pool", i, p)
		}
	}
	params := func(objs []object) (models, hosts []string) {
		cm := mustFind(t, objs, "ConfigMap", "farm", "t-clawfarm-admission")
		return strings.Split(dig(cm, "data", "modelBaseURLPrefixes").(string), "\n"),
			strings.Fields(dig(cm, "data", "rigEndpointHosts").(string))
	}
	models, hosts := params(renderChart(t, trialOn...))
	if !slices.Contains(models, "http://t-clawfarm-modelsim.farm.svc:8090/v1") || len(hosts) != 0 {
		t.Errorf("trial on: model endpoints %q, rig hosts %q; want modelsim's URL, and no rig host (an empty list allows any)", models, hosts)
	}
	models, _ = params(renderChart(t))
	if slices.Contains(models, "http://t-clawfarm-modelsim.farm.svc:8090/v1") {
		t.Error("trial off, modelsim's URL is still an allowed model endpoint")
	}
	_, hosts = params(renderChart(t, append(trialOn, "--set", "admission.rigs.endpointCIDRs={10.20.0.0/16}")...))
	if !slices.Equal(hosts, []string{"t-clawfarm-rigsim-0.farm.svc", "t-clawfarm-rigsim-1.farm.svc"}) {
		t.Errorf("rig endpoints restricted to a CIDR: rig hosts %q, want the trial rigs'", hosts)
	}
	_, hosts = params(renderChart(t, append(trialOn, "--set", "admission.rigs.endpointHosts={*.farm.lan}")...))
	if !slices.Equal(hosts, []string{"*.farm.lan", "t-clawfarm-rigsim-0.farm.svc", "t-clawfarm-rigsim-1.farm.svc"}) {
		t.Errorf("rig hosts %q, want *.farm.lan and the trial rigs'", hosts)
	}
}

func TestChartTrialSchemaRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--set", "trial.rig=3"}, "'rig' not allowed"},
		{[]string{"--set", "trial.rigs=0"}, "/trial/rigs"},
		{[]string{"--set", "trial.rigs=two"}, "/trial/rigs"},
		{[]string{"--set", "trial.nodeName=Rig_Node"}, "/trial/nodeName"},
		{[]string{"--set", "trial.rigsim.resources.request.cpu=1"}, "'request' not allowed"},
		{[]string{"--set", "trial.securityContext.runAsUsr=1"}, "'runAsUsr' not allowed"},
		{[]string{"--set", "trial.modelsim.scenario.x=1"}, "'scenario' not allowed"},
		{[]string{"--set-json", `trial.modelsim.scenarios={"x":{"steps":[]}}`}, "/trial/modelsim/scenarios/x"},
		{[]string{"--set", "trial.rigsim.args={-locked}"}, "/trial/rigsim/args/0"},
		{[]string{"--set", "image.rigsim.digest=sha256:abc"}, "/image/rigsim/digest"},
		{[]string{"--set", "image.modelsim.tags=x"}, "'tags' not allowed"},
		// What the schema cannot say, the chart does, naming the value.
		{[]string{"--set", "trial.enabled=true"}, "trial.nodeName is required with trial.enabled"},
		{append(trialOn, "--set", "trial.rigsim.args={--listen=:9000}"), "trial.rigsim.args: --listen=:9000 is the chart's"},
		{append(trialOn, "--set", "trial.rigsim.args={--rigs=2}"), "trial.rigsim.args: --rigs=2 is the chart's"},
	} {
		_, stderr, err := renderChartErr(t, tc.args...)
		if err == nil {
			t.Errorf("%q: the chart rendered; it should refuse it", tc.args)
			continue
		}
		if !strings.Contains(stderr, tc.says) {
			t.Errorf("%q: helm says %q, want it to mention %q", tc.args, stderr, tc.says)
		}
	}
}

// renderNotes renders NOTES.txt, which helm template leaves out: a copy of
// the chart gets a template holding the notes' text in a ConfigMap.
func renderNotes(t *testing.T, args ...string) string {
	t.Helper()
	helm := helmBinary(t)
	dir := filepath.Join(t.TempDir(), "clawfarm")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	probe := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include \"clawfarm/templates/NOTES.txt\" . | quote }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-probe.yaml"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, append([]string{"template", "t", dir, "--namespace", "farm", "--show-only", "templates/zz-notes-probe.yaml"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return dig(decodeAll(t, out)[0], "data", "notes").(string)
}

// heredoc finds `kubectl -n NS apply -f - <<EOF` … `EOF` blocks: each
// namespace and document, its indentation removed.
var heredoc = regexp.MustCompile(`(?m)^( *)kubectl -n (\S+) apply -f - <<EOF\n((?:.*\n)*?)( *)EOF\n`)

type applied struct{ namespace, doc string }

func notesApplies(t *testing.T, notes string) []applied {
	t.Helper()
	var out []applied
	for _, m := range heredoc.FindAllStringSubmatch(notes, -1) {
		var b strings.Builder
		for _, line := range strings.SplitAfter(m[3], "\n") {
			if line != "" && !strings.HasPrefix(line, m[4]) {
				t.Fatalf("a line of the heredoc is not indented as its EOF: %q", line)
			}
			b.WriteString(strings.TrimPrefix(line, m[4]))
		}
		out = append(out, applied{m[2], b.String()})
	}
	return out
}

// The AgentRun NOTES.txt tells the user to apply: a valid AgentRun (strict
// decode, the CRD's schema and rules) in the trial's namespace, on a trial
// rig, with modelsim's Service as its OpenAI-compatible endpoint, a
// scenario modelsim has, and the trial's model key.
func TestChartTrialNotesApplyARunTheCRDAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		ns   string
		pool string
	}{
		{"release namespace", nil, "farm", ""},
		{"first run namespace", []string{"--set", "runs.namespaces={lab-a,lab-b}"}, "lab-a", ""},
		{"shards", []string{"--set", "shards[0].name=a", "--set", "shards[0].pools={x}"}, "farm", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{}, trialOn...), tc.args...)
			notes := renderNotes(t, args...)
			objs := renderChart(t, args...)
			var runs []applied
			for _, a := range notesApplies(t, notes) {
				if strings.Contains(a.doc, "kind: AgentRun") {
					runs = append(runs, a)
				}
			}
			if len(runs) != 1 {
				t.Fatalf("NOTES.txt applies %d AgentRuns, want one:\n%s", len(runs), notes)
			}
			a := runs[0]
			var run farmv1.AgentRun
			if err := yaml.UnmarshalStrict([]byte(a.doc), &run); err != nil {
				t.Fatalf("NOTES.txt's AgentRun does not decode strictly: %v\n%s", err, a.doc)
			}
			var raw map[string]any
			if err := yaml.Unmarshal([]byte(a.doc), &raw); err != nil {
				t.Fatal(err)
			}
			if errs := crdValidate(t, "farm.clawfarm.dev_agentruns.yaml", raw); len(errs) > 0 {
				t.Errorf("NOTES.txt's AgentRun fails the CRD's schema: %v\n%s", errs, a.doc)
			}
			if a.namespace != tc.ns {
				t.Errorf("NOTES.txt applies the run in %s, want the trial's namespace %s", a.namespace, tc.ns)
			}
			if run.Spec.RigRef == nil || find(objs, "DeviceRig", tc.ns, run.Spec.RigRef.Name) == nil {
				t.Errorf("the run's rigRef %+v names no trial DeviceRig in %s", run.Spec.RigRef, tc.ns)
			}
			if run.Labels[farmv1.LabelPool] != tc.pool {
				t.Errorf("the run's pool %q, want %q", run.Labels[farmv1.LabelPool], tc.pool)
			}
			m := run.Spec.Model
			svc := strictly[corev1.Service](t, mustFind(t, objs, "Service", tc.ns, "t-clawfarm-modelsim"))
			wantURL := "http://" + svc.Name + "." + tc.ns + ".svc:" + strconv.Itoa(int(svc.Spec.Ports[0].Port)) + "/v1"
			if m.Provider != farmv1.ModelProvider("openai-compatible") || m.BaseURL != wantURL {
				t.Errorf("the run's model %s at %s, want openai-compatible at modelsim's Service %s", m.Provider, m.BaseURL, wantURL)
			}
			lib, err := modelsim.Builtin()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := lib[strings.TrimPrefix(m.Name, "sim/")]; !ok || !strings.HasPrefix(m.Name, "sim/") {
				t.Errorf("the run's model %q is none of modelsim's scenarios %v", m.Name, lib.Names())
			}
			ref := m.APIKeySecretRef
			if ref == nil {
				t.Fatal("the run names no model key")
			}
			secret := strictly[corev1.Secret](t, mustFind(t, objs, "Secret", tc.ns, ref.Name))
			if err := admission.CheckModelKeySecret(secret); err != nil || secret.StringData[ref.Key] == "" {
				t.Errorf("the run's key %s/%s: %v, keys %v; want the trial's model key", ref.Name, ref.Key, err, secret.StringData)
			}
			for _, want := range []string{"kubectl -n " + tc.ns + " get ar " + run.Name + " -w", "wait --for=condition=Finished ar/" + run.Name} {
				if !strings.Contains(notes, want) {
					t.Errorf("NOTES.txt does not say how to watch the run (%q):\n%s", want, notes)
				}
			}
		})
	}
	if notes := renderNotes(t); strings.Contains(notes, "sim/timer") || strings.Contains(notes, "trial") {
		t.Errorf("with the trial off NOTES.txt still tells of it:\n%s", notes)
	}
}

// crdValidate checks an object against the CRD of charts/clawfarm/crds/file
// as the API server would on create: its defaults applied, then its
// OpenAPI schema and its CEL rules.
func crdValidate(t *testing.T, file string, obj map[string]any) field.ErrorList {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "crds", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	var v *apiextv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Storage {
			v = &crd.Spec.Versions[i]
		}
	}
	if v == nil || v.Schema == nil || obj["apiVersion"] != crd.Spec.Group+"/"+v.Name {
		t.Fatalf("%s: no schema for %v", file, obj["apiVersion"])
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
		t.Fatal(err)
	}
	ss, err := structuralschema.NewStructural(&internal)
	if err != nil {
		t.Fatal(err)
	}
	obj = jsonCopy(t, obj)
	structuraldefaulting.Default(obj, ss)
	validator, _, err := apiservervalidation.NewSchemaValidator(&internal)
	if err != nil {
		t.Fatal(err)
	}
	errs := apiservervalidation.ValidateCustomResource(nil, obj, validator)
	celErrs, _ := cel.NewValidator(ss, true, celconfig.PerCallLimit).Validate(context.Background(), nil, ss, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// jsonCopy is obj as JSON decodes it (int64 and float64 numbers as
// encoding/json gives them), which the validators expect.
func jsonCopy(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return numbers(out).(map[string]any)
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
