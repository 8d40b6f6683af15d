package devcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/admission"
)

// ManagerLabel selects the chart's manager pod.
const ManagerLabel = "app.kubernetes.io/component=manager"

// installOperator renders the chart with `helm template` and applies it: the
// CRDs, the RBAC of the manager, the loop pods and the follow-up Jobs, the
// metrics Service and (chart mode) the manager Deployment, whose pod rignode
// runs on the system node. In host mode the Deployment is left out and the
// manager runs as a host process with a client certificate bound to the
// chart's manager ClusterRole.
func (c *Cluster) installOperator(ctx context.Context) error {
	rendered, err := c.renderChart(ctx)
	if err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, nil, "create", "namespace", OperatorNamespace); err != nil {
		return err
	}
	docs := splitYAML(rendered)
	var keep []string
	for _, d := range docs {
		if c.Manager == ManagerHost && strings.Contains(d, "\nkind: Deployment\n") && strings.Contains(d, "\n  name: clawfarm-manager\n") {
			continue
		}
		keep = append(keep, d)
	}
	if c.Manager == ManagerHost {
		keep = append(keep, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: clawfarm-manager-host-process
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: clawfarm-manager}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %s}
`, HostManagerUser))
	}
	manifest := strings.Join(keep, "\n---\n")
	if err := os.WriteFile(filepath.Join(c.Dir, "operator.yaml"), []byte(manifest), 0o644); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, []byte(manifest), "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		return err
	}
	if err := waitFor(ctx, "the CRDs", 30*time.Second, nil, func() error {
		for _, n := range []string{"agentruns.farm.clawfarm.dev", "devicerigs.farm.clawfarm.dev"} {
			var crd apiextv1.CustomResourceDefinition
			if err := c.Client.Get(ctx, client.ObjectKey{Name: n}, &crd); err != nil {
				return err
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				established = established || (cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue)
			}
			if !established {
				return fmt.Errorf("CRD %s not established", n)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := c.ensureModelSecret(ctx); err != nil {
		return err
	}
	if err := c.waitAdmission(ctx); err != nil {
		return err
	}
	if c.Manager == ManagerHost {
		if err := c.StartHostManager(ctx); err != nil {
			return err
		}
	} else if err := c.waitManagerPod(ctx); err != nil {
		return err
	}
	return waitFor(ctx, "the trace server", 2*time.Minute, nil, func() error {
		return httpOK(ctx, httpClient, c.TraceServerURL()+"/healthz")
	})
}

// ForeignImagePrefix is an image prefix outside the dev registry that the
// admission policy lets through in RunNamespace, so the e2e suite can show
// a node refusing an image from outside its --allowed-images.
const ForeignImagePrefix = "example.com/clawfarm/"

// waitAdmission labels RunNamespace for custom loop pods and waits until
// the admission policies are in force: a policy binding takes effect a
// moment after it is created, and until its parameters are seen the
// AgentRun policy refuses every run. A run with a foreign model URL must be
// refused and one on modelsim admitted (server-side dry runs).
func (c *Cluster) waitAdmission(ctx context.Context) error {
	var ns corev1.Namespace
	if err := c.Client.Get(ctx, client.ObjectKey{Name: c.Namespace}, &ns); err != nil {
		return err
	}
	patch := client.MergeFrom(ns.DeepCopy())
	metav1.SetMetaDataLabel(&ns.ObjectMeta, admission.LabelCustomPods, "true")
	if err := c.Client.Patch(ctx, &ns, patch); err != nil {
		return err
	}
	run := func(name, baseURL string) *farmv1.AgentRun {
		return &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name},
			Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig-0"}, Trigger: "admission check",
				Model: farmv1.ModelSpec{Provider: "openai-compatible", Name: "sim/timer", BaseURL: baseURL}}}
	}
	return waitFor(ctx, "the admission policies", time.Minute, nil, func() error {
		err := c.Client.Create(ctx, run("admission-check-foreign", "https://exfil.example.org/v1"), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "is not an allowed model endpoint") {
			return fmt.Errorf("a run with a foreign model URL: %v, want refused", err)
		}
		return c.Client.Create(ctx, run("admission-check", c.ModelBaseURL()), client.DryRunAll)
	})
}

// TraceServerURL is the trace server's address: its pod shares the
// network of its node, SystemNode or KubeletSystemNode, on loopback.
func (c *Cluster) TraceServerURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d", c.Ports().TraceServer)
}

// renderChart runs `helm template` on charts/clawfarm with the dev cluster's
// values (ChartValues) and its images, by digest.
func (c *Cluster) renderChart(ctx context.Context) (string, error) {
	helm, err := c.hackTool(ctx, "build-helm.sh")
	if err != nil {
		return "", err
	}
	values := filepath.Join(c.Dir, "values.yaml")
	if err := c.WriteChartValues(values); err != nil {
		return "", err
	}
	repo := func(name string) string { r, _, _ := strings.Cut(c.Image(name), "@"); return r }
	digest := func(name string) string { _, d, _ := strings.Cut(c.Image(name), "@"); return d }
	args := []string{"template", "clawfarm", filepath.Join(c.Root, "charts", "clawfarm"),
		"--namespace", OperatorNamespace, "--include-crds", "--values", values,
		"--set", "image.manager.repository=" + repo("manager"), "--set", "image.manager.digest=" + digest("manager"),
		"--set", "image.loop.repository=" + repo("loop"), "--set", "image.loop.digest=" + digest("loop"),
		"--set", "image.server.repository=" + repo("clawfarm-server"), "--set", "image.server.digest=" + digest("clawfarm-server"),
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return string(out), nil
}

// ChartValues are the chart values a dev cluster needs, images aside: one
// replica, loopback ports, a fast rig probe, runs in c.Namespace, the API
// server where it listens, the admission policies told what the cluster is
// made of, and (KubeletSystem) the manager and the trace server on
// KubeletSystemNode.
func (c *Cluster) ChartValues() map[string]any {
	p := c.Ports()
	v := map[string]any{}
	set := func(key string, val any) {
		m := v
		parts := strings.Split(key, ".")
		for _, k := range parts[:len(parts)-1] {
			sub, ok := m[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[k] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = val
	}
	// The trace server: on loopback like the manager, its traces in an
	// emptyDir (a dev cluster's runs go with it).
	set("server.listenHost", "127.0.0.1")
	set("server.port", p.TraceServer)
	set("server.url", c.TraceServerURL())
	set("server.persistence.enabled", false)
	set("manager.replicas", 1)
	set("metrics.port", p.ManagerMetrics)
	set("manager.probePort", p.ManagerProbes)
	// rignode pods share the host's network: listen on loopback only.
	set("manager.listenHost", "127.0.0.1")
	set("manager.rigProbeInterval", c.RigProbeInterval.String())
	set("runs.namespaces", []string{c.Namespace})
	set("runs.podStartupTimeout", "2m")
	set("runs.nodeLostGrace", "2m")
	// No kube-proxy: the operator's host-network pods on kubelet nodes
	// reach the API server where it listens.
	set("apiServer", fmt.Sprintf("127.0.0.1:%d", p.APIServer))
	// The admission policies (docs/security.md): modelsim on a loopback URL
	// (and a real provider's, when one is configured), rigs' state under
	// the cluster's directory, the registry's images and the foreign one
	// the e2e suite shows a node refusing (the run namespace is labelled
	// for custom loop pods).
	urls := []string{c.ModelBaseURL()}
	if p, err := ProviderFromEnv(); err == nil && p.BaseURL != "" {
		urls = append(urls, p.BaseURL)
	}
	set("admission.model.baseURLPrefixes", urls)
	set("admission.pods.imagePrefixes", []string{c.RegistryHost() + "/", ForeignImagePrefix})
	set("admission.rigs.hostPathPrefix", filepath.Join(c.Dir, "rigs")+"/")
	// The rig gateway runs as a user of its own, bound to the chart's
	// rig-gateway ClusterRole and nothing more.
	set("rigGateway.rbac.create", true)
	set("rigGateway.rbac.subjects", []map[string]string{{"kind": "User", "name": RigGatewayUser}})
	// On KubeletSystemNode the manager and the trace server are containers
	// in the node's network namespace: there is no pod network here that
	// reaches the host's loopback, where the API server, the rigs and
	// modelsim listen (docs/dev-cluster.md, "The kubelet nodes").
	if c.KubeletSystem {
		for _, part := range []string{"manager", "server"} {
			set(part+".hostNetwork", true)
			set(part+".nodeSelector", map[string]string{LabelDevNode: devNodeKubeletSystem})
			set(part+".tolerations", []corev1.Toleration{{Key: TaintOperator, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}})
		}
	}
	return v
}

// WriteChartValues writes ChartValues as a values file for helm --values.
func (c *Cluster) WriteChartValues(path string) error {
	b, err := yaml.Marshal(c.ChartValues())
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func splitYAML(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		d = strings.TrimSpace(d)
		if d == "" || strings.Trim(d, "-\n ") == "" {
			continue
		}
		// drop a leading "# Source:" comment-only document
		body := false
		for _, l := range strings.Split(d, "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				body = true
				break
			}
		}
		if body {
			out = append(out, "\n"+d+"\n")
		}
	}
	return out
}

// ensureModelSecret creates the Secret every dev run's model key points at:
// MODEL_API_KEY when set (a real provider), else a dummy modelsim accepts.
func (c *Cluster) ensureModelSecret(ctx context.Context) error {
	key := os.Getenv("MODEL_API_KEY")
	if key == "" {
		key = "modelsim-needs-no-key"
	}
	s := &corev1.Secret{}
	s.Namespace, s.Name = c.Namespace, ModelSecret
	// Only a Secret labelled as a model key may be one (docs/security.md).
	s.Labels = map[string]string{admission.LabelModelKey: "true"}
	s.StringData = map[string]string{"api-key": key}
	return c.Client.Create(ctx, s)
}

// ManagerArgs are the host-process manager's flags (the chart's, on loopback).
func (c *Cluster) managerArgs() []string {
	p := c.Ports()
	return []string{
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", p.ManagerMetrics),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", p.ManagerProbes),
		"--loop-image=" + c.Image("loop"), "--manager-image=" + c.Image("manager"),
		"--loop-service-account=clawfarm-loop", "--followup-service-account=clawfarm-followup",
		"--watch-namespaces=" + c.Namespace,
		"--rig-probe-interval=" + c.RigProbeInterval.String(),
		"--pod-startup-timeout=2m", "--node-lost-grace=2m",
		"--trace-url=" + c.TraceServerURL(),
	}
}

// StartHostManager starts (or restarts) the manager as a host process and
// waits for its health probe.
func (c *Cluster) StartHostManager(ctx context.Context) error {
	proc, err := c.run("manager", c.bin("manager"), c.managerArgs(), []string{"KUBECONFIG=" + c.kubeconfigOf("manager")})
	if err != nil {
		return err
	}
	return waitFor(ctx, "the manager", time.Minute, []*Proc{proc}, func() error {
		return httpOK(ctx, httpClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.Ports().ManagerProbes))
	})
}

func (c *Cluster) waitManagerPod(ctx context.Context) error {
	watch := c.procsNamed("rignode-" + SystemNode)
	if c.KubeletSystem {
		watch = c.procsNamed("kubelet-"+KubeletSystemNode, "containerd-"+KubeletSystemNode)
	}
	return waitFor(ctx, "the manager pod Running", 2*time.Minute, watch, func() error {
		if _, err := c.ManagerPod(ctx); err != nil {
			return err
		}
		return httpOK(ctx, httpClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.Ports().ManagerProbes))
	})
}

// ManagerPod is the chart's running manager pod (one that is not being
// deleted), or an error saying how many there are and that none runs.
func (c *Cluster) ManagerPod(ctx context.Context) (corev1.Pod, error) {
	var pods corev1.PodList
	sel, err := labelSelector(ManagerLabel)
	if err != nil {
		return corev1.Pod{}, err
	}
	if err := c.Client.List(ctx, &pods, client.InNamespace(OperatorNamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return corev1.Pod{}, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return corev1.Pod{}, fmt.Errorf("%d manager pods, none Running", len(pods.Items))
}

// AdminToken is the bearer token of the cluster's user (the same user as
// its kubeconfig's certificate), which the trace server accepts.
func (c *Cluster) AdminToken() (string, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "pki", "admin.token"))
	return strings.TrimSpace(string(b)), err
}
