package main

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The Helm chart runs this binary: its Deployment's args must be flags the
// manager knows, its roles must be the ones the code asks for, and every run
// namespace must get the service accounts the manager puts on pods and Jobs.

type object = map[string]any

func renderChart(t *testing.T, args ...string) []object {
	t.Helper()
	objs, stderr, err := renderChartErr(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	return objs
}

// renderChartErr runs helm template on the chart and returns its objects, or
// helm's error and stderr.
func renderChartErr(t *testing.T, args ...string) ([]object, string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", "t", chartDir, "--namespace", "farm"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, stderr.String(), err
	}
	return decodeAll(t, out), stderr.String(), nil
}

// chartDir is the chart the tests render.
const chartDir = "../../charts/clawfarm"

// helmBinary is $HELM (make test sets it), else the one hack/build-helm.sh
// built; without either the test skips (fails under make test).
//
// helm reads the chart in a process of its own, out of go test's sight: the
// test reads the chart's directories itself, so that the cached result of a
// test goes with a change to any file of the chart.
func helmBinary(t *testing.T) string {
	t.Helper()
	if err := filepath.WalkDir(chartDir, func(string, fs.DirEntry, error) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return testenv.BuiltTool(t, "HELM", "build-helm.sh", "helm")
}

func decodeAll(t *testing.T, b []byte) []object {
	t.Helper()
	var objs []object
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var o object
		err := d.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("decode rendered chart: %v", err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func find(objs []object, kind, namespace, name string) object {
	for _, o := range objs {
		md, _ := o["metadata"].(map[string]any)
		if o["kind"] == kind && md["name"] == name && (namespace == "" || md["namespace"] == namespace) {
			return o
		}
	}
	return nil
}

func dig(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

func TestChartDeploymentArgsAreManagerFlags(t *testing.T) {
	objs := renderChart(t)
	dep := find(objs, "Deployment", "farm", "t-clawfarm-manager")
	if dep == nil {
		t.Fatal("the chart renders no manager Deployment")
	}
	f := chartManagerFlags(t, dep)
	if !*f.leaderElect || *f.leaderNamespace != "farm" {
		t.Errorf("leader election: %v in %q, want on in the release namespace", *f.leaderElect, *f.leaderNamespace)
	}
	if *f.loopImage != "ghcr.io/clawfarm/loop:0.1.0" || *f.managerImage != "ghcr.io/clawfarm/manager:0.1.0" {
		t.Errorf("images: loop %q, manager %q; want the appVersion tag", *f.loopImage, *f.managerImage)
	}
	if got := dig(dep, "spec", "replicas"); got != int64(2) && got != float64(2) {
		t.Errorf("replicas %v, want 2 (leader election)", got)
	}
	if sa := dig(dep, "spec", "template", "spec", "serviceAccountName"); sa != "t-clawfarm-manager" {
		t.Errorf("manager service account %v", sa)
	}
	svc := find(objs, "Service", "farm", "t-clawfarm-metrics")
	if svc == nil {
		t.Fatal("no metrics Service")
	}
	podLabels := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range dig(svc, "spec", "selector").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("the metrics Service selects %s=%v, which the manager pods lack", k, v)
		}
	}
}

// chartManagerFlags parses the args the chart gives the manager container
// of dep with the manager's own flag set.
func chartManagerFlags(t *testing.T, dep object) *managerFlags {
	t.Helper()
	containers := dig(dep, "spec", "template", "spec", "containers").([]any)
	var args []string
	for _, a := range dig(containers[0], "args").([]any) {
		args = append(args, a.(string))
	}
	f := newManagerFlags()
	var out bytes.Buffer
	f.fs.SetOutput(&out)
	if err := f.parse(args); err != nil {
		t.Fatalf("the chart passes args the manager refuses: %v\n%s\nargs: %q", err, out.String(), args)
	}
	return f
}

func TestChartRolesAreTheGeneratedOnes(t *testing.T) {
	objs := renderChart(t, "--set", "rignode.rbac.create=true", "--set", "rigGateway.rbac.create=true")
	for _, c := range []struct{ file, role string }{
		{"role.yaml", "t-clawfarm-manager"},
		{"loop_role.yaml", "t-clawfarm-loop"},
		{"followup_role.yaml", "t-clawfarm-followup"},
		{"rignode_role.yaml", "t-clawfarm-rignode"},
		{"rig_gateway_role.yaml", "t-clawfarm-rig-gateway"},
		{"server_role.yaml", "t-clawfarm-server"},
	} {
		b, err := os.ReadFile(filepath.Join("../../config/rbac", c.file))
		if err != nil {
			t.Fatal(err)
		}
		want := decodeAll(t, b)[0]["rules"]
		role := find(objs, "ClusterRole", "", c.role)
		if role == nil {
			t.Fatalf("the chart has no ClusterRole %s", c.role)
		}
		if !reflect.DeepEqual(role["rules"], want) {
			t.Errorf("ClusterRole %s differs from config/rbac/%s (run make manifests):\nchart: %v\nwant:  %v", c.role, c.file, role["rules"], want)
		}
	}
	loop := find(objs, "ClusterRole", "", "t-clawfarm-loop")
	rules := loop["rules"].([]any)
	if len(rules) != 2 || !reflect.DeepEqual(dig(rules[0], "verbs"), []any{"patch"}) || !reflect.DeepEqual(dig(rules[0], "resources"), []any{"agentruns/status"}) ||
		!reflect.DeepEqual(dig(rules[1], "verbs"), []any{"get"}) || !reflect.DeepEqual(dig(rules[1], "resources"), []any{"agentruns"}) {
		t.Errorf("loop pods may do more than patch their run's status and get runs (steer messages, approval answers): %v", rules)
	}
}

func TestChartGivesEveryRunNamespaceItsServiceAccounts(t *testing.T) {
	f := newManagerFlags()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"farm"}},
		{[]string{"--set", "runs.namespaces={lab-a,lab-b}"}, []string{"lab-a", "lab-b"}},
	} {
		objs := renderChart(t, tc.args...)
		for _, ns := range tc.want {
			for sa, role := range map[string]string{*f.loopSA: "t-clawfarm-loop", *f.followupSA: "t-clawfarm-followup"} {
				if find(objs, "ServiceAccount", ns, sa) == nil {
					t.Errorf("namespace %s has no service account %s", ns, sa)
				}
				var bound bool
				for _, o := range objs {
					if o["kind"] == "RoleBinding" && dig(o, "metadata", "namespace") == ns && dig(o, "roleRef", "name") == role {
						subj := o["subjects"].([]any)[0]
						bound = dig(subj, "name") == sa && dig(subj, "namespace") == ns
					}
					if bound {
						break
					}
				}
				if !bound {
					t.Errorf("namespace %s: %s is not bound to %s", ns, sa, role)
				}
			}
		}
	}
}
