package rignode

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestImageMap(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	path := filepath.Join(t.TempDir(), "1.log")
	w, err := newLogWriter(path, 0, 0)
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

// A log past its size limit is rotated as a kubelet rotates: at most
// maxFiles files are kept, and a reader sees the rotated lines before the
// current ones, and follows the log across a rotation.
func TestLogRotation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "1.log")
	// Each stamped line is 30 (timestamp) + 1 + 4 + 1 = 36 bytes; 100 bytes
	// hold two lines, so every third line rotates.
	w, err := newLogWriter(path, 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.now = func() time.Time { clock = clock.Add(time.Second); return clock.Add(123456789) }
	for i := range 9 {
		fmt.Fprintf(w, "l%03d\n", i)
	}
	files, _ := filepath.Glob(path + "*")
	if len(files) != 3 {
		t.Fatalf("files = %v, want 3 (the current one and two rotated)", files)
	}
	for _, f := range files {
		if st, _ := os.Stat(f); st.Size() > 100 {
			t.Errorf("%s is %d bytes, past the 100-byte limit", f, st.Size())
		}
	}
	var b strings.Builder
	if err := streamLog(context.Background(), path, api.ContainerLogOpts{}, func() bool { return true }, &b); err != nil {
		t.Fatal(err)
	}
	// Nine lines written two to a file: [l000 l001] … [l006 l007] [l008];
	// three files kept, so the four oldest lines are gone.
	if got, want := b.String(), "l004\nl005\nl006\nl007\nl008\n"; got != want {
		t.Errorf("read = %q, want %q", got, want)
	}

	// Follow: lines written after the reader started, across two rotations.
	var mu sync.Mutex
	finished := false
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(streamLog(context.Background(), path, api.ContainerLogOpts{Follow: true, Tail: 1},
			func() bool { mu.Lock(); defer mu.Unlock(); return finished }, pw))
	}()
	sc := bufio.NewScanner(pr)
	next := func() string {
		if !sc.Scan() {
			t.Fatalf("follow ended early: %v", sc.Err())
		}
		return sc.Text()
	}
	if got := next(); got != "l008" {
		t.Fatalf("first followed line = %q, want l008", got)
	}
	for i := 9; i < 14; i++ {
		fmt.Fprintf(w, "l%03d\n", i)
		if got, want := next(), fmt.Sprintf("l%03d", i); got != want {
			t.Fatalf("followed line = %q, want %q", got, want)
		}
	}
	_ = w.Close()
	mu.Lock()
	finished = true
	mu.Unlock()
	if sc.Scan() {
		t.Errorf("line after the end: %q", sc.Text())
	}
}

// A restarted rignode adopts a process only when its pid still names the
// process the shim started: a pid reused by an unrelated process is neither
// adopted nor signalled.
func TestAdoptionChecksTheProcessIdentity(t *testing.T) {
	t.Parallel()
	if _, ok := procIdentity(os.Getpid()); !ok {
		t.Skip("no process identity on this system: nothing is ever adopted")
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	pid := sleeper.Process.Pid
	real, _ := procIdentity(pid)

	for _, tc := range []struct {
		name  string
		id    string
		adopt bool
	}{
		{"pid reused by another process", "another-boot/12345", false},
		{"the same process", real, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := &container{dir: dir}
			if err := writeJSON(c.file(1, "spec"), shimSpec{Argv: []string{"x"}}); err != nil {
				t.Fatal(err)
			}
			if err := writeJSON(c.file(1, "state"), shimState{ShimPID: pid, ShimID: tc.id, PID: pid, ID: tc.id, StartedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			c.adopt()
			if adopted := c.proc != nil; adopted != tc.adopt {
				t.Fatalf("adopted = %v, want %v", adopted, tc.adopt)
			}
			if !tc.adopt && (c.pending == nil || c.pending.lost == "") {
				t.Fatalf("a run whose process is gone is not reported lost: %+v", c.pending)
			}
			if id, ok := procIdentity(pid); !ok || id != real {
				t.Fatal("the unrelated process was signalled")
			}
		})
	}
}
