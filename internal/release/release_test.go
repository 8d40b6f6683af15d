package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apiyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
	"github.com/clawfarm/clawfarm/internal/images"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The tools the test runs, as make test sets them.
const (
	envHelm     = "HELM"              // hack/build-helm.sh --print
	envRegistry = "CLAWFARM_REGISTRY" // hack/build-registry.sh --print
)

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{
		"v0.3.0": true, "v1.12.0-rc.1": true, "v0.0.0-2f37616a1b2c-dirty": true,
		"0.3.0": false, "v0.3": false, "v0.3.0+build": false, "v01.2.3": false, "v0.3.x": false, "": false,
	} {
		if err := checkVersion(v); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", v, err, ok)
		}
	}
}

// The release directory is replaced: one that is the checkout, or holds
// it, is refused before anything is deleted.
func TestOutMustNotHoldTheCheckout(t *testing.T) {
	t.Parallel()
	for _, out := range []string{"../..", "../../..", "/"} {
		_, err := Build(context.Background(), Options{Root: "../..", Out: out, Helm: "helm", Version: "v0.1.0"})
		if err == nil || !strings.Contains(err.Error(), "would be deleted") {
			t.Errorf("Out %s: %v, want refused", out, err)
		}
	}
	if _, err := os.Stat("../../go.mod"); err != nil {
		t.Fatal(err)
	}
}

// A release built and pushed to a real registry: every artifact is there,
// says the release's version, names its images by digest, and checks out
// against SHA256SUMS; the chart pulled from the registry with no values
// names images that are in the registry under the release's tag; the
// kustomize base applies to a real API server.
func TestRelease(t *testing.T) {
	testenv.Needs(t, envHelm, envRegistry, testenv.Assets)
	helm := os.Getenv(envHelm)
	statSources(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	dir := t.TempDir()
	addr := testenv.FreeAddr(t)
	reg, err := devcluster.StartRegistry(ctx, os.Getenv(envRegistry), filepath.Join(dir, "registry"), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop(5 * time.Second)

	host := images.HostPlatform()
	const version = "v0.3.0-rc.1"
	out := filepath.Join(dir, "dist")
	res, err := Build(ctx, Options{
		Root: "../..", Out: out, Version: version, Registry: addr, Helm: helm,
		Platforms: []v1.Platform{host}, Binaries: []v1.Platform{host}, Log: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	repo := addr + "/clawfarm"
	for _, n := range images.Default {
		if !strings.HasPrefix(res.Images[n], repo+"/"+n+"@sha256:") {
			t.Errorf("image %s: %q, want %s/%s by digest", n, res.Images[n], repo, n)
		}
	}

	checkSums(t, out, res.Files)

	// The chart from the registry, with no values: its images are the
	// release's tag, and the registry has that tag at the built digest.
	rendered, err := exec.CommandContext(ctx, helm, "template", "clawfarm", res.ChartRef, "--version", res.ChartVersion,
		"--plain-http", "--namespace", ReleaseNamespace).Output()
	if err != nil {
		t.Fatalf("helm template %s: %v", res.ChartRef, stderrOf(err))
	}
	mgr := deployment(t, decode(t, rendered), "clawfarm-manager")
	tagged := repo + "/manager:" + version
	if got := containerImage(t, mgr, "manager"); got != tagged {
		t.Errorf("the pulled chart's manager image is %q, want the release's tag %q", got, tagged)
	}
	if !slices.Contains(argsOf(t, mgr, "manager"), "--loop-image="+repo+"/loop:"+version) {
		t.Errorf("the pulled chart's --loop-image is not %s/loop:%s: %v", repo, version, argsOf(t, mgr, "manager"))
	}
	// With the trial on, its simulators are the release's too.
	trial, err := exec.CommandContext(ctx, helm, "template", "clawfarm", res.ChartRef, "--version", res.ChartVersion,
		"--plain-http", "--namespace", ReleaseNamespace, "--set", "trial.enabled=true", "--set", "trial.nodeName=node-1").Output()
	if err != nil {
		t.Fatalf("helm template %s with the trial: %v", res.ChartRef, stderrOf(err))
	}
	for _, n := range []string{"rigsim", "modelsim"} {
		if got, want := imagesOf(decode(t, trial), n), repo+"/"+n+":"+version; len(got) == 0 || slices.ContainsFunc(got, func(s string) bool { return s != want }) {
			t.Errorf("the pulled chart's trial runs %s as %v, want %s", n, got, want)
		}
	}
	for _, n := range []string{"manager", "loop", "clawfarm-server", "rigsim", "modelsim"} {
		ref, err := name.NewTag(repo + "/" + n + ":" + version)
		if err != nil {
			t.Fatal(err)
		}
		d, err := remote.Head(ref, remote.WithContext(ctx))
		if err != nil {
			t.Errorf("the registry has no %s: %v", ref, err)
			continue
		}
		if want := strings.SplitN(res.Images[n], "@", 2)[1]; d.Digest.String() != want {
			t.Errorf("%s is %s in the registry, the release built %s", ref, d.Digest, want)
		}
	}

	// install.yaml: namespaces first, every namespaced object placed, every
	// image by digest.
	install, err := os.ReadFile(filepath.Join(out, InstallFile))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, install)
	if objs[0]["kind"] != "Namespace" || objs[1]["kind"] != "Namespace" {
		t.Errorf("install.yaml must start with its namespaces: %v, %v", objs[0]["kind"], objs[1]["kind"])
	}
	crds := 0
	for _, o := range objs {
		kind, md := o["kind"].(string), o["metadata"].(map[string]any)
		switch kind {
		case "CustomResourceDefinition":
			crds++
		case "Deployment", "ServiceAccount", "Service", "Role", "RoleBinding", "ConfigMap", "Secret", "PersistentVolumeClaim":
			if ns, _ := md["namespace"].(string); ns != ReleaseNamespace && ns != RunNamespace {
				t.Errorf("install.yaml: %s %v has namespace %q", kind, md["name"], ns)
			}
		}
	}
	if crds != 3 {
		t.Errorf("install.yaml has %d CRDs, want 3", crds)
	}
	mgr = deployment(t, objs, "clawfarm-manager")
	if got := containerImage(t, mgr, "manager"); got != res.Images["manager"] {
		t.Errorf("install.yaml's manager image %q, want %q", got, res.Images["manager"])
	}
	if !slices.Contains(argsOf(t, mgr, "manager"), "--loop-image="+res.Images["loop"]) {
		t.Errorf("install.yaml's --loop-image is not %s", res.Images["loop"])
	}
	if got := containerImage(t, deployment(t, objs, "clawfarm-server"), "server"); got != res.Images["clawfarm-server"] {
		t.Errorf("install.yaml's trace server image %q, want %q", got, res.Images["clawfarm-server"])
	}

	applyKustomizeBase(t, ctx, filepath.Join(out, KustomizeDir))

	// krew: the manifest names the archive by its sum, and the archive's
	// kubectl-claw is this release's.
	var krew struct {
		Spec struct {
			Version   string
			Platforms []struct {
				URI, Sha256 string
				Bin         string
			}
		}
	}
	readYAML(t, filepath.Join(out, KrewManifest), &krew)
	archive := KrewArchive(version, host)
	if krew.Spec.Version != version || len(krew.Spec.Platforms) != 1 {
		t.Fatalf("krew manifest: %+v", krew.Spec)
	}
	p := krew.Spec.Platforms[0]
	sum, err := fileSum(filepath.Join(out, archive))
	if err != nil {
		t.Fatal(err)
	}
	if p.Sha256 != sum || !strings.HasSuffix(p.URI, "/releases/download/"+version+"/"+archive) || p.Bin != "kubectl-claw" {
		t.Errorf("krew platform %+v, want the sum %s of %s", p, sum, archive)
	}
	files := untar(t, filepath.Join(out, archive), filepath.Join(dir, "krew"))
	if want := []string{"LICENSE", "kubectl-claw", "kubectl_complete-claw"}; !slices.Equal(files, want) {
		t.Errorf("%s holds %v, want %v", archive, files, want)
	}
	v, err := exec.Command(filepath.Join(dir, "krew", "kubectl-claw"), "version", "--client").Output()
	if err != nil || !strings.Contains(string(v), version) {
		t.Errorf("kubectl-claw version --client: %v: %s", err, v)
	}
	files = untar(t, filepath.Join(out, RigHostArchive(version, host)), filepath.Join(dir, "rig-host"))
	for _, want := range []string{"LICENSE", "loop", "rignode"} {
		if !slices.Contains(files, want) {
			t.Errorf("the rig-host archive holds %v, no %s", files, want)
		}
	}

	// An SBOM of every binary and image, each an SPDX document of it.
	for _, n := range append(append([]string{}, images.Default...), "kubectl-claw", "rignode") {
		var doc struct {
			SPDXVersion string `json:"spdxVersion"`
			Packages    []struct{ Name, VersionInfo string }
		}
		b, err := os.ReadFile(filepath.Join(out, SBOMDir, n+"_"+host.OS+"_"+host.Architecture+".spdx.json"))
		if err == nil {
			err = json.Unmarshal(b, &doc)
		}
		if err != nil || doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 3 || doc.Packages[0].Name != n || doc.Packages[0].VersionInfo != version {
			t.Errorf("SBOM of %s: %v %+v", n, err, doc.Packages[:min(1, len(doc.Packages))])
		}
	}
}

// checkSums checks SHA256SUMS as sha256sum -c would, and that it lists every
// file but the image layout.
func checkSums(t *testing.T, out string, files []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for line := range strings.Lines(string(b)) {
		sum, file, ok := strings.Cut(strings.TrimSpace(line), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		got, err := fileSum(filepath.Join(out, file))
		if err != nil || got != sum {
			t.Errorf("SHA256SUMS: %s: %v, sum %s, listed %s", file, err, got, sum)
		}
		listed = append(listed, file)
	}
	if !slices.Equal(listed, files) {
		t.Errorf("SHA256SUMS lists %v, the release has %v", listed, files)
	}
	for _, want := range []string{InstallFile, KrewManifest, "kustomize/kustomization.yaml", ChartName + "-0.3.0-rc.1.tgz"} {
		if !slices.Contains(listed, want) {
			t.Errorf("SHA256SUMS does not list %s", want)
		}
	}
}

// applyKustomizeBase applies the base with kubectl's own kustomize to an API
// server, server-side, as docs/install.md says to.
func applyKustomizeBase(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	env, err := testenv.Start("../../config/crd/bases")
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	kc, err := env.Kubeconfig("release-test")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(os.Getenv(testenv.Assets), "kubectl")
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "-k", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --server-side -k %s: %v\n%s", dir, err, out)
	}
	if !strings.Contains(string(out), "deployment.apps/clawfarm-manager serverside-applied") {
		t.Errorf("kubectl apply -k did not apply the manager:\n%s", out)
	}
}

// statSources stats every file the release is built from. go build and helm
// read them in processes of their own, out of go test's sight; a stat here
// makes a cached result of this test go with a change to any of them.
func statSources(t *testing.T) {
	t.Helper()
	for _, p := range []string{"api", "cmd", "controllers", "internal", "charts", "hack/krew", rigHostUnits, "LICENSE", "go.mod", "go.sum"} {
		err := filepath.WalkDir(filepath.Join("../..", p), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				_, err = os.Stat(path)
			}
			return err
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return fmt.Sprintf("%v: %s", err, ee.Stderr)
	}
	return err.Error()
}

func decode(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var objs []map[string]any
	d := apiyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var o map[string]any
		if err := d.Decode(&o); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func deployment(t *testing.T, objs []map[string]any, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == "Deployment" && o["metadata"].(map[string]any)["name"] == name {
			return o
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

func container(t *testing.T, d map[string]any, name string) map[string]any {
	t.Helper()
	spec := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	for _, c := range spec["containers"].([]any) {
		if c := c.(map[string]any); c["name"] == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// imagesOf is the image of every container named name in the Deployments.
func imagesOf(objs []map[string]any, name string) []string {
	var out []string
	for _, o := range objs {
		if o["kind"] != "Deployment" {
			continue
		}
		spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		for _, c := range spec["containers"].([]any) {
			if c := c.(map[string]any); c["name"] == name {
				out = append(out, c["image"].(string))
			}
		}
	}
	return out
}

func containerImage(t *testing.T, d map[string]any, name string) string {
	s, _ := container(t, d, name)["image"].(string)
	return s
}

func argsOf(t *testing.T, d map[string]any, name string) []string {
	var out []string
	for _, a := range container(t, d, name)["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// untar unpacks a .tar.gz into dir and returns its top-level names, sorted.
func untar(t *testing.T, path, dir string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		top, _, _ := strings.Cut(h.Name, "/")
		if !slices.Contains(names, top) {
			names = append(names, top)
		}
		p := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	return names
}
