// Package argocd checks the Argo CD health checks in config/argocd: each
// script is run the way Argo CD runs a check configured in argocd-cm (the
// object as the global obj, only the base, package and table libraries, a
// one-second budget, a table with status and message returned) against the
// samples its health_test.yaml lists, in Argo CD's own test layout. Every
// phase the API declares must have a sample, and the copies of the scripts
// in docs/gitops.md and config/argocd/argocd-cm.yaml must equal the files.
package argocd

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

var root = filepath.Join("..", "..")

// check is one health check: the kind it is for, its directory under
// config/argocd (Argo CD's resource_customizations/<group>/<kind> layout),
// and the API type whose constants are the kind's phases.
type check struct {
	kind, dir, phaseType string
}

var checks = []check{
	{"AgentRun", "config/argocd/farm.clawfarm.dev/AgentRun", "RunPhase"},
	{"DeviceRig", "config/argocd/farm.clawfarm.dev/DeviceRig", "RigPhase"},
}

// configKey is the argocd-cm key of a check.
func configKey(kind string) string { return "resource.customizations.health.farm.clawfarm.dev_" + kind }

// healthTests is Argo CD's health_test.yaml.
type healthTests struct {
	Tests []struct {
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
		InputPath string `json:"inputPath"`
	} `json:"tests"`
}

// Argo CD's health statuses; a check returning another is shown Unknown.
var validStatus = []string{"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

func TestHealthChecksOnTheirSamples(t *testing.T) {
	for _, c := range checks {
		script := read(t, filepath.Join(c.dir, "health.lua"))
		for _, tc := range tests(t, c).Tests {
			t.Run(c.kind+"/"+tc.InputPath, func(t *testing.T) {
				obj := sample(t, c, tc.InputPath)
				status, message, err := health(script, obj)
				if err != nil {
					t.Fatal(err)
				}
				if status != tc.HealthStatus.Status || message != tc.HealthStatus.Message {
					t.Fatalf("got %s %q, want %s %q", status, message, tc.HealthStatus.Status, tc.HealthStatus.Message)
				}
			})
		}
	}
}

// Every value of a phase enum has a sample, and no phase the API declares
// is Unknown to its check: a phase added to api/v1alpha1 fails here until
// the check and its samples say what it means.
func TestEveryPhaseHasASample(t *testing.T) {
	for _, c := range checks {
		phases := phaseConstants(t, c.phaseType)
		script := read(t, filepath.Join(c.dir, "health.lua"))
		covered := map[string]bool{}
		for _, tc := range tests(t, c).Tests {
			obj := sample(t, c, tc.InputPath)
			if st, ok := obj["status"].(map[string]any); ok {
				if p, ok := st["phase"].(string); ok {
					covered[p] = true
				}
			}
		}
		for _, p := range phases {
			if !covered[p] {
				t.Errorf("%s phase %s (api/v1alpha1, type %s) has no sample in %s/health_test.yaml", c.kind, p, c.phaseType, c.dir)
			}
			obj := map[string]any{"apiVersion": "farm.clawfarm.dev/v1alpha1", "kind": c.kind,
				"metadata": map[string]any{"name": "x", "generation": int64(1)},
				"status":   map[string]any{"phase": p, "observedGeneration": int64(1)}}
			if status, _, err := health(script, obj); err != nil || status == "Unknown" {
				t.Errorf("%s phase %s is Unknown to %s/health.lua (err %v)", c.kind, p, c.dir, err)
			}
		}
	}
}

// The scripts in config/argocd/argocd-cm.yaml (both) and docs/gitops.md (the
// AgentRun check, and any other it inlines) are the files, byte for byte:
// readers copy them from there.
func TestConfigCopiesAreTheScripts(t *testing.T) {
	copies := map[string]map[string]string{"config/argocd/argocd-cm.yaml": configMapData(t, read(t, "config/argocd/argocd-cm.yaml"))}
	for _, block := range fencedYAML(read(t, "docs/gitops.md")) {
		if strings.Contains(block, configKey("AgentRun")) {
			copies["docs/gitops.md"] = configMapData(t, block)
		}
	}
	if copies["docs/gitops.md"] == nil {
		t.Fatalf("docs/gitops.md has no yaml block with %s", configKey("AgentRun"))
	}
	for _, c := range checks {
		script := read(t, filepath.Join(c.dir, "health.lua"))
		for where, data := range copies {
			got, ok := data[configKey(c.kind)]
			switch {
			case !ok && (where != "docs/gitops.md" || c.kind == "AgentRun"):
				t.Errorf("%s has no %s", where, configKey(c.kind))
			case ok && got != script:
				t.Errorf("%s: %s differs from %s/health.lua; copy the file", where, configKey(c.kind), c.dir)
			}
		}
	}
}

// health runs script the way Argo CD runs a health check configured in
// argocd-cm (util/lua VM.runLua with UseOpenLibs false): only the package,
// base and table libraries are open, obj is the object, the script has a
// second, and what it returns must be a table with a valid status.
func health(script string, obj map[string]any) (status, message string, err error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return "", "", err
	}
	hs, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", l.Get(-1).Type())
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"status", &status}, {"message", &message}} {
		switch v := hs.RawGetString(f.name).(type) {
		case lua.LString:
			*f.to = string(v)
		case *lua.LNilType:
		default:
			return "", "", fmt.Errorf("hs.%s is a %s, not a string", f.name, v.Type())
		}
	}
	if !slices.Contains(validStatus, status) {
		return "", "", fmt.Errorf("hs.status %q is not an Argo CD health status", status)
	}
	return status, message, nil
}

// toLua converts a decoded object as Argo CD's decodeValue does.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(toLua(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for k, item := range v {
			tbl.RawSetH(lua.LString(k), toLua(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// phaseConstants reads the values of the constants of type typ in
// api/v1alpha1, and checks they are the values the type's
// +kubebuilder:validation:Enum marker lets the API server store.
func phaseConstants(t *testing.T, typ string) []string {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(root, "api", "v1alpha1")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var values, enum []string
	marker := regexp.MustCompile(`\+kubebuilder:validation:Enum=(\S+)`)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.Name == typ && gd.Doc != nil {
						if m := marker.FindStringSubmatch(gd.Doc.Text()); m != nil {
							enum = strings.Split(m[1], ";")
						}
					}
				case *ast.ValueSpec:
					if id, ok := s.Type.(*ast.Ident); !ok || id.Name != typ || gd.Tok != token.CONST {
						continue
					}
					for _, v := range s.Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Fatalf("a %s constant is not a string literal", typ)
						}
						s, _ := strconv.Unquote(lit.Value)
						values = append(values, s)
					}
				}
			}
		}
	}
	if len(values) == 0 {
		t.Fatalf("no constants of type %s in api/v1alpha1", typ)
	}
	a, b := slices.Clone(values), slices.Clone(enum)
	sort.Strings(a)
	sort.Strings(b)
	if !slices.Equal(a, b) {
		t.Fatalf("the %s constants %v are not the values of its Enum marker %v", typ, a, b)
	}
	return values
}

func tests(t *testing.T, c check) healthTests {
	t.Helper()
	var ht healthTests
	if err := yaml.UnmarshalStrict([]byte(read(t, filepath.Join(c.dir, "health_test.yaml"))), &ht); err != nil {
		t.Fatalf("%s/health_test.yaml: %v", c.dir, err)
	}
	if len(ht.Tests) == 0 {
		t.Fatalf("%s/health_test.yaml lists no tests", c.dir)
	}
	return ht
}

// sample reads a test's input, a manifest of the check's kind.
func sample(t *testing.T, c check, path string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(read(t, filepath.Join(c.dir, path))), &obj); err != nil {
		t.Fatalf("%s/%s: %v", c.dir, path, err)
	}
	if obj["apiVersion"] != "farm.clawfarm.dev/v1alpha1" || obj["kind"] != c.kind {
		t.Fatalf("%s/%s is a %v %v, not a farm.clawfarm.dev/v1alpha1 %s", c.dir, path, obj["apiVersion"], obj["kind"], c.kind)
	}
	return obj
}

func configMapData(t *testing.T, doc string) map[string]string {
	t.Helper()
	var cm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
		t.Fatalf("%v in:\n%s", err, doc)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != "argocd-cm" {
		t.Fatalf("not the argocd-cm ConfigMap:\n%s", doc)
	}
	return cm.Data
}

// fencedYAML returns the ```yaml blocks of a Markdown document.
func fencedYAML(doc string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```yaml":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
