package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The roles people are given on the farm's API (docs/security.md) are
// config/rbac/'s, aggregated into the built-in roles as that says.

// renderRelease renders the chart as release clawfarm in clawfarm-system,
// the names config/ is written with.
func renderRelease(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := exec.Command(helmBinary(t), append([]string{"template", "clawfarm", chartDir, "--namespace", "clawfarm-system"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("helm template: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("helm template: %v", err)
	}
	return decodeAll(t, out)
}

func TestChartUserRolesAreConfigRBAC(t *testing.T) {
	t.Parallel()
	objs := renderRelease(t)
	aggregation := func(o object) map[string]any {
		out := map[string]any{}
		for k, v := range dig(o, "metadata", "labels").(map[string]any) {
			if strings.HasPrefix(k, "rbac.authorization.k8s.io/") {
				out[k] = v
			}
		}
		return out
	}
	for _, c := range []struct {
		file, role string
		aggregated []string
	}{
		{"rig_admin_role.yaml", "clawfarm-rig-admin", nil},
		{"run_editor_role.yaml", "clawfarm-run-editor", []string{"admin", "edit"}},
		{"run_viewer_role.yaml", "clawfarm-run-viewer", []string{"view"}},
		{"metrics_reader_role.yaml", "clawfarm-metrics-reader", nil},
	} {
		b, err := os.ReadFile(filepath.Join("../../config/rbac", c.file))
		if err != nil {
			t.Fatal(err)
		}
		want := decodeAll(t, b)[0]
		role := find(objs, "ClusterRole", "", c.role)
		if role == nil {
			t.Fatalf("the chart has no ClusterRole %s", c.role)
		}
		if !reflect.DeepEqual(role["rules"], want["rules"]) {
			t.Errorf("ClusterRole %s's rules differ from config/rbac/%s:\nchart: %v\nwant:  %v", c.role, c.file, role["rules"], want["rules"])
		}
		wantAgg := map[string]any{}
		if labels, ok := dig(want, "metadata", "labels").(map[string]any); ok {
			wantAgg = labels
		}
		if got := aggregation(role); !reflect.DeepEqual(got, wantAgg) {
			t.Errorf("ClusterRole %s is aggregated by %v, config/rbac/%s by %v", c.role, got, c.file, wantAgg)
		}
		var to []string
		for k := range aggregation(role) {
			to = append(to, strings.TrimPrefix(k, "rbac.authorization.k8s.io/aggregate-to-"))
		}
		sort.Strings(to)
		if !reflect.DeepEqual(to, c.aggregated) && (len(to) > 0 || len(c.aggregated) > 0) {
			t.Errorf("ClusterRole %s is aggregated to %v, want %v", c.role, to, c.aggregated)
		}
	}
	// Neither the editor nor the viewer may write a run's status: only the
	// operator and the run's own loop pod record it.
	for _, name := range []string{"clawfarm-run-editor", "clawfarm-run-viewer"} {
		for _, r := range find(objs, "ClusterRole", "", name)["rules"].([]any) {
			for _, res := range dig(r, "resources").([]any) {
				if strings.Contains(res.(string), "/") {
					t.Errorf("ClusterRole %s grants %s", name, res)
				}
			}
		}
	}
}
