package release

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ChartName is the chart's name, and of its OCI repository.
const ChartName = "clawfarm"

// ReleaseNamespace and RunNamespace are the namespaces install.yaml makes:
// the operator's, and one for runs.
const (
	ReleaseNamespace = "clawfarm-system"
	RunNamespace     = "farm"
)

// chartImages are the images the chart's values name, each
// image.<key>.repository: the operator's, and the trial's simulators.
var chartImages = map[string]string{"manager": "manager", "loop": "loop", "server": "clawfarm-server",
	"rigsim": "rigsim", "modelsim": "modelsim"}

// chart packages the chart with the release's version, its appVersion (the
// images' default tag) the release's tag and its image repositories the
// release's; pushes it with a Registry; and renders install.yaml and the
// kustomize base from it, every image by digest.
func (o *Options) chart(ctx context.Context, res *Result) error {
	work, err := os.MkdirTemp(o.Out, ".chart-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	src := filepath.Join(o.Root, "charts", ChartName)
	dir := filepath.Join(work, ChartName)
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		return fmt.Errorf("copy the chart: %w", err)
	}
	if err := o.stampChart(dir, res.ChartVersion); err != nil {
		return err
	}
	if _, err := o.helm(ctx, "package", dir, "--destination", o.Out); err != nil {
		return err
	}
	res.Chart = filepath.Join(o.Out, ChartName+"-"+res.ChartVersion+".tgz")
	if _, err := os.Stat(res.Chart); err != nil {
		return fmt.Errorf("helm package wrote no %s: %w", filepath.Base(res.Chart), err)
	}
	if o.Registry != "" {
		repo := "oci://" + o.Repository + "/charts"
		args := []string{"push", res.Chart, repo}
		if plainHTTP(o.Registry) {
			args = append(args, "--plain-http")
		}
		if _, err := o.helm(ctx, args...); err != nil {
			return err
		}
		res.ChartRef = repo + "/" + ChartName
		o.Log("pushed %s:%s", res.ChartRef, res.ChartVersion)
	}

	args := []string{"template", ChartName, res.Chart, "--namespace", ReleaseNamespace, "--include-crds",
		"--set", "runs.namespaces={" + RunNamespace + "}"}
	keys := make([]string, 0, len(chartImages))
	for k := range chartImages {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		ref, ok := res.Images[chartImages[key]]
		if !ok {
			return fmt.Errorf("no %s image was built", chartImages[key])
		}
		_, digest, _ := strings.Cut(ref, "@")
		args = append(args, "--set", "image."+key+".digest="+digest)
	}
	rendered, err := o.helm(ctx, args...)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# clawfarm %s: the operator in %s, runs in %s, every image by digest.\n", o.Version, ReleaseNamespace, RunNamespace)
	fmt.Fprintf(&b, "#   kubectl apply --server-side -f %s\n", InstallFile)
	fmt.Fprintf(&b, "# It is `helm template` of the chart %s with runs.namespaces={%s}; docs/install.md.\n", filepath.Base(res.Chart), RunNamespace)
	for _, ns := range []string{ReleaseNamespace, RunNamespace} {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", ns)
	}
	b.Write(rendered)
	if err := os.WriteFile(filepath.Join(o.Out, InstallFile), b.Bytes(), 0o644); err != nil {
		return err
	}
	return o.kustomizeBase(b.Bytes(), res)
}

// stampChart sets the copy's version and appVersion, and points its image
// repositories at the release's.
func (o *Options) stampChart(dir, chartVersion string) error {
	chartFile := filepath.Join(dir, "Chart.yaml")
	c, err := os.ReadFile(chartFile)
	if err != nil {
		return err
	}
	for _, r := range []struct{ key, value string }{{"version", chartVersion}, {"appVersion", fmt.Sprintf("%q", o.Version)}} {
		re := regexp.MustCompile(`(?m)^` + r.key + `:.*$`)
		if len(re.FindAll(c, -1)) != 1 {
			return fmt.Errorf("%s: want one %s: line", chartFile, r.key)
		}
		c = re.ReplaceAll(c, []byte(r.key+": "+r.value))
	}
	if err := os.WriteFile(chartFile, c, 0o644); err != nil {
		return err
	}
	valuesFile := filepath.Join(dir, "values.yaml")
	v, err := os.ReadFile(valuesFile)
	if err != nil {
		return err
	}
	for _, name := range chartImages {
		re := regexp.MustCompile(`(?m)^(\s+repository: )\S+/` + regexp.QuoteMeta(name) + `$`)
		if len(re.FindAll(v, -1)) != 1 {
			return fmt.Errorf("%s: want one repository line for the %s image", valuesFile, name)
		}
		v = re.ReplaceAll(v, []byte("${1}"+o.Repository+"/"+name))
	}
	return os.WriteFile(valuesFile, v, 0o644)
}

// kustomizeBase writes kustomize/: install.yaml and a kustomization that
// names each container image by digest, for an overlay to move to a mirror
// (images: newName). The loop image is the manager's --loop-image flag, not a
// container's image: an overlay that mirrors it patches that flag.
func (o *Options) kustomizeBase(install []byte, res *Result) error {
	dir := filepath.Join(o.Out, KustomizeDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, InstallFile), install, 0o644); err != nil {
		return err
	}
	type image struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
	}
	k := struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Images     []image  `json:"images"`
	}{APIVersion: "kustomize.config.k8s.io/v1beta1", Kind: "Kustomization", Resources: []string{InstallFile}}
	for _, name := range []string{"manager", "clawfarm-server"} {
		repo, digest, _ := strings.Cut(res.Images[name], "@")
		k.Images = append(k.Images, image{Name: repo, Digest: digest})
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	head := fmt.Sprintf("# clawfarm %s as a kustomize base: kubectl apply -k, or a resource of an overlay.\n", o.Version)
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), append([]byte(head), b...), 0o644)
}

func (o *Options) helm(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, o.Helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// plainHTTP reports whether a registry is spoken to over HTTP: on loopback
// or a private network, as go-containerregistry does for the images.
func plainHTTP(registry string) bool {
	host, _, err := net.SplitHostPort(registry)
	if err != nil {
		host = registry
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate())
}
