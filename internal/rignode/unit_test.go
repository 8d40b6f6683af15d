package rignode

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestImageMap(t *testing.T) {
	m, err := ParseImageMap("ghcr.io/clawfarm/loop=/bin/loop, clawfarm/manager:dev=/bin/manager")
	if err != nil {
		t.Fatal(err)
	}
	for img, want := range map[string]string{
		"ghcr.io/clawfarm/loop":            "/bin/loop",
		"ghcr.io/clawfarm/loop:v1":         "/bin/loop",
		"ghcr.io/clawfarm/loop@sha256:abc": "/bin/loop",
		"clawfarm/manager:dev":             "/bin/manager",
	} {
		if got, err := m.Resolve(img); err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", img, got, err, want)
		}
	}
	if _, err := m.Resolve("clawfarm/manager:v2"); err == nil || !strings.Contains(err.Error(), "--image-map clawfarm/manager=") {
		t.Errorf("an unmapped tag resolved or the error does not say how to map it: %v", err)
	}
	for _, bad := range []string{"noequals", "=/bin/x", "img="} {
		if _, err := ParseImageMap(bad); err == nil {
			t.Errorf("ParseImageMap(%q) accepted", bad)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "images")
	if err := os.WriteFile(file, []byte("# loop pods\nclawfarm/loop = bin/loop\n\nclawfarm/rigsim=/abs/rigsim\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fm, err := LoadImageMapFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if fm["clawfarm/loop"] != filepath.Join(dir, "bin/loop") || fm["clawfarm/rigsim"] != "/abs/rigsim" {
		t.Errorf("file map %v", fm)
	}
	if err := os.WriteFile(file, []byte("clawfarm/loop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadImageMapFile(file); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad file line: %v", err)
	}
}

func TestPathMap(t *testing.T) {
	var m PathMap
	m.Add("/etc/clawfarm/skills/a", "/h/a")
	m.Add("/etc/clawfarm/skills", "/h/skills")
	m.Add("/dev/termination-log", "/h/term")
	for in, want := range map[string]string{
		"/etc/clawfarm/skills/a/x.md":                   "/h/a/x.md",
		"/etc/clawfarm/skills/b":                        "/h/skills/b",
		"/etc/clawfarm/skillsX":                         "/etc/clawfarm/skillsX",
		"/dev/termination-log":                          "/h/term",
		"/etc/clawfarm/skills/a,/etc/clawfarm/skills/b": "/h/a,/h/skills/b",
		"http://rig:8080/mcp":                           "http://rig:8080/mcp",
		"relative/etc/clawfarm/skills":                  "relative/etc/clawfarm/skills",
	} {
		if got := m.Value(in); got != want {
			t.Errorf("Value(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)-$(B)": "1-two",
		"$$(A)":     "$(A)",
		"$(C)":      "$(C)",
		"cost $5":   "cost $5",
		"$(A":       "$(A",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseTaintsAndLabels(t *testing.T) {
	ts, err := ParseTaints("farm.clawfarm.dev/rig=true:NoSchedule,dedicated:NoExecute")
	if err != nil || len(ts) != 2 || ts[0].Value != "true" || ts[1].Key != "dedicated" || ts[1].Effect != corev1.TaintEffectNoExecute {
		t.Fatalf("taints %v, %v", ts, err)
	}
	for _, bad := range []string{"k=v", "k=v:Sometimes", ":NoSchedule"} {
		if _, err := ParseTaints(bad); err == nil {
			t.Errorf("ParseTaints(%q) accepted", bad)
		}
	}
	ls, err := ParseLabels("a=1,b=")
	if err != nil || ls["a"] != "1" || ls["b"] != "" {
		t.Fatalf("labels %v, %v", ls, err)
	}
	if _, err := ParseLabels("novalue"); err == nil {
		t.Error("ParseLabels accepted a label without =")
	}
}

func TestFieldValue(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"batch.kubernetes.io/job-name": "job-1"}},
		Spec:       corev1.PodSpec{NodeName: "n", ServiceAccountName: "sa"},
	}
	for path, want := range map[string]string{
		"metadata.name": "p", "metadata.namespace": "ns", "metadata.uid": "u", "spec.nodeName": "n",
		"spec.serviceAccountName": "sa", "metadata.labels['batch.kubernetes.io/job-name']": "job-1",
	} {
		if got, err := FieldValue(pod, path); err != nil || got != want {
			t.Errorf("FieldValue(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := FieldValue(pod, "spec.nope"); err == nil {
		t.Error("unknown field path accepted")
	}
}

func TestStreamLogOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "1.log")
	w, err := newLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.now = func() time.Time { clock = clock.Add(time.Minute); return clock }
	_, _ = io.WriteString(w, "a\nb\nc")
	_, _ = io.WriteString(w, "\nunterminated")
	_ = w.Close()
	read := func(o api.ContainerLogOpts) string {
		var b strings.Builder
		if err := streamLog(context.Background(), path, o, func() bool { return true }, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got := read(api.ContainerLogOpts{}); got != "a\nb\nc\nunterminated\n" {
		t.Errorf("all = %q", got)
	}
	if got := read(api.ContainerLogOpts{Tail: 1}); got != "unterminated\n" {
		t.Errorf("tail = %q", got)
	}
	if got := read(api.ContainerLogOpts{SinceTime: time.Date(2026, 1, 1, 0, 3, 0, 0, time.UTC)}); got != "c\nunterminated\n" {
		t.Errorf("since = %q", got)
	}
	if got := read(api.ContainerLogOpts{LimitBytes: 3}); got != "a\nb" {
		t.Errorf("limit = %q", got)
	}
	if got := read(api.ContainerLogOpts{Tail: 1, Timestamps: true}); got != "2026-01-01T00:04:00Z unterminated\n" {
		t.Errorf("timestamps = %q", got)
	}
	if got := tailText(path, 2, 100); got != "c\nunterminated\n" {
		t.Errorf("tailText = %q", got)
	}
}
