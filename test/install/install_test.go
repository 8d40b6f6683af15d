//go:build e2e

package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
	"github.com/clawfarm/clawfarm/internal/trace"
)

// The page's sections the test runs, in order, by their headings.
const (
	stepRelease   = "1. Build and push a release"
	stepInstall   = "2. Install the chart"
	stepRun       = "4. Run something"
	stepUpgrade   = "Upgrading"
	stepUninstall = "Uninstalling"
)

// TestInstallPage follows docs/install.md from the release to the
// uninstall with the page's own commands.
func TestInstallPage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	p := newPage(t)

	p.runSection(ctx, stepRelease)
	p.runSection(ctx, stepInstall)
	// Step 3, the rig hosts, is the dev cluster's: its rig gateway in front
	// of rigsim's phones and a DeviceRig each in the run namespace.
	if err := cluster.AddRigs(ctx); err != nil {
		t.Fatalf("the dev cluster's rigs, once the chart is installed: %v", err)
	}
	p.runSection(ctx, stepRun)
	p.wantDone(ctx, p.sample.Name)
	// The chart's trace server, from the release's image, holds its trace.
	p.wantTrace(ctx, p.sample.Name)

	// A second release, built and pushed with step 1's command, to upgrade to.
	p.runCommand(ctx, stepRelease+", as v0.4.0", p.versioned(stepRelease, "v0.3.0", "v0.4.0"))
	p.runSection(ctx, stepUpgrade)
	p.wantManagerImage(ctx, ":v0.4.0")
	second := p.sample.DeepCopy()
	second.Name += "-after-upgrade"
	// The other phone: the scripted model's timer scenario starts from the
	// home screen, where the first run left rig-0 in the Clock app.
	second.Spec.RigRef.Name = cluster.DeviceRig(1).Name
	if err := cluster.Client.Create(ctx, second); err != nil {
		t.Fatalf("create %s: %v", second.Name, err)
	}
	p.wantDone(ctx, second.Name)

	p.runSection(ctx, stepUninstall)
	p.wantNothingLeft(ctx)
	p.checkRewrites()
}

// page is docs/install.md, its sh blocks by section, and what running them
// on the dev cluster takes.
type page struct {
	t        *testing.T
	root     string
	helm     string
	sections map[string][][]string
	env      []string
	rewrites []*rewrite
	// sample is the page's sample run as step 4 says to edit it.
	sample *farmv1.AgentRun
}

// rewrite is one change a command needs on the dev cluster (the page's
// last section lists them). Each must apply somewhere, or the page has
// moved on without the test.
type rewrite struct {
	what    string
	applies func(cmd string) bool
	apply   func(cmd string) string
	used    int
}

func newPage(t *testing.T) *page {
	t.Helper()
	root := cluster.Root
	md, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	helm := testenv.BuiltTool(t, "HELM", "build-helm.sh", "helm")
	values := filepath.Join(work, "dev-cluster-values.yaml")
	if err := cluster.WriteChartValues(values); err != nil {
		t.Fatal(err)
	}
	p := &page{t: t, root: root, helm: helm, sections: shBlocks(string(md))}
	p.sample = editedSample(t, root)
	sample := filepath.Join(work, "agentrun.yaml")
	b, err := yaml.Marshal(p.sample)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sample, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// helm and docker configuration of the test's own, kubectl and helm of
	// the dev cluster on PATH.
	p.env = append(os.Environ(),
		"KUBECONFIG="+cluster.Kubeconfig,
		"PATH="+cluster.K8sDir+string(os.PathListSeparator)+filepath.Dir(helm)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HELM_CONFIG_HOME="+filepath.Join(work, "helm", "config"), "HELM_CACHE_HOME="+filepath.Join(work, "helm", "cache"),
		"HELM_DATA_HOME="+filepath.Join(work, "helm", "data"), "DOCKER_CONFIG="+filepath.Join(work, "docker"),
	)
	platform := "linux/" + runtime.GOARCH
	startsWith := func(prefix string) func(string) bool {
		return func(cmd string) bool { return strings.HasPrefix(cmd, prefix) }
	}
	p.rewrites = []*rewrite{
		{what: "registry.example.com is the dev cluster's registry",
			applies: func(cmd string) bool { return strings.Contains(cmd, "registry.example.com") },
			apply: func(cmd string) string {
				return strings.ReplaceAll(cmd, "registry.example.com", cluster.RegistryHost())
			}},
		{what: "make release builds for this machine only, into the test's directory",
			applies: startsWith("make release "),
			apply: func(cmd string) string {
				return fmt.Sprintf("%s PLATFORMS=%s BINARIES=%s DIST=%s", cmd, platform, platform, filepath.Join(work, "dist"))
			}},
		{what: "helm speaks plain HTTP to a registry on loopback",
			applies: func(cmd string) bool { return strings.HasPrefix(cmd, "helm ") && strings.Contains(cmd, "oci://") },
			apply:   func(cmd string) string { return cmd + " --plain-http" }},
		{what: "helm install and upgrade get the dev cluster's values",
			applies: func(cmd string) bool {
				return strings.HasPrefix(cmd, "helm install ") || strings.HasPrefix(cmd, "helm upgrade ")
			},
			apply: func(cmd string) string { return cmd + " --values " + values }},
		{what: "the sample run, edited as step 4 says, for a simulated rig and the scripted model",
			applies: func(cmd string) bool { return strings.Contains(cmd, "config/samples/farm_v1alpha1_agentrun.yaml") },
			apply: func(cmd string) string {
				return strings.ReplaceAll(cmd, "config/samples/farm_v1alpha1_agentrun.yaml", sample)
			}},
		{what: "the upgrade's chart is pulled into the test's directory",
			applies: func(cmd string) bool { return strings.Contains(cmd, "/tmp/clawfarm-0.4.0") },
			apply: func(cmd string) string {
				return strings.ReplaceAll(cmd, "/tmp/clawfarm-0.4.0", filepath.Join(work, "clawfarm-0.4.0"))
			}},
	}
	return p
}

// editedSample is config/samples/farm_v1alpha1_agentrun.yaml with the edits
// step 4 asks for: one of the cluster's rigs, and its scripted model for
// the sample's task (modelsim's "timer" scenario ends DONE).
func editedSample(t *testing.T, root string) *farmv1.AgentRun {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "config", "samples", "farm_v1alpha1_agentrun.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var run farmv1.AgentRun
	if err := yaml.UnmarshalStrict(b, &run); err != nil {
		t.Fatalf("the sample run: %v", err)
	}
	if run.Spec.RigRef == nil || run.Spec.Model.APIKeySecretRef == nil {
		t.Fatalf("the sample run names no rig or no key Secret: %+v", run.Spec)
	}
	run.Namespace = runNamespace
	run.Spec.RigRef.Name = cluster.DeviceRig(0).Name
	run.Spec.Model.Provider, run.Spec.Model.Name, run.Spec.Model.BaseURL = "openai-compatible", "sim/timer", cluster.ModelBaseURL()
	return &run
}

// shBlocks returns the commands of each ```sh block of a Markdown page, by
// the "## " heading above them: a line ending in a backslash goes on with
// the next, blank lines and comments are dropped.
func shBlocks(md string) map[string][][]string {
	out := map[string][][]string{}
	section := ""
	var block []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case !in && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case !in && strings.TrimSpace(line) == "```sh":
			in, block = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			out[section] = append(out[section], commands(block))
		case in:
			block = append(block, line)
		}
	}
	return out
}

func commands(lines []string) []string {
	var out []string
	cur := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\")
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// runSection runs every command of a section's sh blocks, in order.
func (p *page) runSection(ctx context.Context, section string) {
	p.t.Helper()
	blocks := p.sections[section]
	if len(blocks) == 0 {
		p.t.Fatalf("docs/install.md has no sh block under %q (sections with one: %v)", section, p.sectionNames())
	}
	for _, block := range blocks {
		for _, cmd := range block {
			p.runCommand(ctx, section, cmd)
		}
	}
}

// versioned is a section's only command with one version for another.
func (p *page) versioned(section, from, to string) string {
	p.t.Helper()
	blocks := p.sections[section]
	if len(blocks) != 1 || len(blocks[0]) != 1 || !strings.Contains(blocks[0][0], from) {
		p.t.Fatalf("docs/install.md, %q: want one command naming %s, have %q", section, from, blocks)
	}
	return strings.ReplaceAll(blocks[0][0], from, to)
}

func (p *page) sectionNames() []string {
	var names []string
	for n := range p.sections {
		names = append(names, n)
	}
	return names
}

// runCommand runs one of the page's commands with bash, rewritten for the
// dev cluster. `kubectl … get ar -w` watches until the sample run has finished.
func (p *page) runCommand(ctx context.Context, section, cmd string) {
	p.t.Helper()
	run := cmd
	for _, r := range p.rewrites {
		if r.applies(run) {
			run = r.apply(run)
			r.used++
		}
	}
	watch := strings.HasSuffix(run, " get ar -w")
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	c := exec.CommandContext(cctx, "bash", "-euo", "pipefail", "-c", run)
	c.Dir, c.Env = p.root, p.env
	var out testenv.SyncBuffer
	c.Stdout, c.Stderr = &out, &out
	begin := time.Now()
	if err := c.Start(); err != nil {
		p.t.Fatal(err)
	}
	var err error
	if watch {
		waitErr := p.waitFinished(ctx, p.sample.Name, 5*time.Minute)
		cancel()
		_ = c.Wait()
		if waitErr != nil {
			err = waitErr
		} else if !watchShows(out.String(), p.sample.Name, string(farmv1.RunSucceeded)) {
			err = fmt.Errorf("the watch never showed %s %s", p.sample.Name, farmv1.RunSucceeded)
		}
	} else {
		err = c.Wait()
	}
	p.t.Logf("docs/install.md, %s: %s (%.1fs)\n%s", section, cmd, time.Since(begin).Seconds(), indent(out.String()))
	if err != nil {
		p.t.Fatalf("docs/install.md, %s: `%s` failed (run as `%s`): %v", section, cmd, run, err)
	}
}

// watchShows reports whether a `kubectl get -w` output has a row for name in phase.
func watchShows(out, name, phase string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == name && strings.Contains(line, " "+phase+" ") {
			return true
		}
	}
	return false
}

func (p *page) waitFinished(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var run farmv1.AgentRun
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: runNamespace, Name: name}, &run)
		if err == nil && run.Status.Phase.Finished() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s not finished after %s (phase %q, get: %v)", name, timeout, run.Status.Phase, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// wantDone waits for a run to finish and wants it Succeeded with DONE.
func (p *page) wantDone(ctx context.Context, name string) {
	p.t.Helper()
	if err := p.waitFinished(ctx, name, 5*time.Minute); err != nil {
		p.t.Fatal(err)
	}
	var run farmv1.AgentRun
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: runNamespace, Name: name}, &run); err != nil {
		p.t.Fatal(err)
	}
	if run.Status.Phase != farmv1.RunSucceeded || run.Status.Sentinel != "DONE" {
		p.t.Fatalf("run %s: phase %s, sentinel %q, want Succeeded with DONE; conditions %+v", name, run.Status.Phase, run.Status.Sentinel, run.Status.Conditions)
	}
}

// wantTrace waits for a finished run's trace on the trace server the
// chart installed, read as the cluster's admin: one attempt.
func (p *page) wantTrace(ctx context.Context, name string) {
	p.t.Helper()
	tok, err := cluster.AdminToken()
	if err != nil {
		p.t.Fatal(err)
	}
	url := cluster.TraceServerURL() + "/api/v1/runs/" + runNamespace + "/" + name
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, err := get(ctx, url, tok)
		var detail trace.RunDetail
		if err == nil && code == http.StatusOK && json.Unmarshal(body, &detail) == nil && len(detail.Attempts) == 1 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the trace server's run %s: %d %s (%v), want one attempt", name, code, body, err)
		}
		time.Sleep(time.Second)
	}
}

func get(ctx context.Context, url, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// wantManagerImage waits until the manager's Deployment has rolled out an
// image whose reference contains tag.
func (p *page) wantManagerImage(ctx context.Context, tag string) {
	p.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var d appsv1.Deployment
		err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "clawfarm-system", Name: "clawfarm-manager"}, &d)
		image := ""
		if err == nil && len(d.Spec.Template.Spec.Containers) > 0 {
			image = d.Spec.Template.Spec.Containers[0].Image
			rolled := d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
				d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas
			if strings.Contains(image, tag) && rolled {
				p.t.Logf("the manager runs %s", image)
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the manager's Deployment: image %q, want one tagged %s rolled out (get: %v)", image, tag, err)
		}
		time.Sleep(time.Second)
	}
}

// wantNothingLeft checks that the uninstall removed the CRDs, the Helm
// release and the manager.
func (p *page) wantNothingLeft(ctx context.Context) {
	p.t.Helper()
	for _, crd := range []string{"agentruns", "devicerigs", "toolpolicies"} {
		err := cluster.Client.Get(ctx, client.ObjectKey{Name: crd + "." + farmv1.GroupVersion.Group}, &apiextv1.CustomResourceDefinition{})
		if !apierrors.IsNotFound(err) {
			p.t.Errorf("CRD %s after the uninstall: %v, want not found", crd, err)
		}
	}
	err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: "clawfarm-system", Name: "clawfarm-manager"}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		p.t.Errorf("the manager's Deployment after the uninstall: %v, want not found", err)
	}
	c := exec.CommandContext(ctx, p.helm, "list", "-A", "-q")
	c.Env = p.env
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		p.t.Errorf("helm list -A after the uninstall: %q (%v), want no release", out, err)
	}
}

// checkRewrites fails for a change the page no longer needs: the page has
// moved on, and the test with its last section should follow.
func (p *page) checkRewrites() {
	p.t.Helper()
	for _, r := range p.rewrites {
		if r.used == 0 {
			p.t.Errorf("no command of docs/install.md needed %q: update the test and the page's last section", r.what)
		}
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
