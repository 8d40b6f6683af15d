package devcluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func (c *Cluster) startSimulators(ctx context.Context) error {
	p := c.Ports()
	rs, err := c.run("rigsim", c.bin("rigsim"), append([]string{
		fmt.Sprintf("--listen=127.0.0.1:%d", p.Rigsim), fmt.Sprintf("--rigs=%d", c.Rigs),
	}, c.RigsimArgs...), nil)
	if err != nil {
		return err
	}
	args := []string{fmt.Sprintf("--listen=127.0.0.1:%d", p.Modelsim)}
	if exists(c.Scenarios) {
		args = append(args, "--scenarios="+c.Scenarios)
	}
	ms, err := c.run("modelsim", c.bin("modelsim"), args, nil)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "rigsim", 30*time.Second, []*Proc{rs}, func() error {
		return httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/rigs", p.Rigsim))
	}); err != nil {
		return err
	}
	return waitFor(ctx, "modelsim", 30*time.Second, []*Proc{ms}, func() error {
		return httpOK(ctx, http.DefaultClient, c.ModelBaseURL()+"/models")
	})
}

// AddRigs starts the rig gateway and registers the DeviceRigs, once the
// operator is installed (ManagerNone): the gateway's identity is bound to
// the chart's ClusterRole, and only the manager finds a rig Ready.
func (c *Cluster) AddRigs(ctx context.Context) error {
	if err := c.startRigGateway(ctx); err != nil {
		return fmt.Errorf("the rig gateway: %w", err)
	}
	return c.registerRigs(ctx)
}

// startRigGateway starts `rignode gateway` in front of rigsim's rigs, as
// a rig host runs it in front of its phones (docs/rig-contract.md, "The rig
// gateway"), with an identity bound to the chart's rig-gateway ClusterRole,
// and waits until a rig's health route answers through it.
func (c *Cluster) startRigGateway(ctx context.Context) error {
	args := []string{"gateway", "--kubeconfig=" + c.kubeconfigOf("rig-gateway"),
		fmt.Sprintf("--listen=127.0.0.1:%d", c.Ports().RigGateway)}
	for i := 0; i < c.Rigs; i++ {
		args = append(args, fmt.Sprintf("--rig=%s/%s=%s", c.Namespace, RigName(i), c.RigURL(i)))
	}
	gw, err := c.run("rig-gateway", c.bin("rignode"), args, nil)
	if err != nil {
		return err
	}
	return waitFor(ctx, "the rig gateway", 30*time.Second, []*Proc{gw}, func() error {
		return httpOK(ctx, http.DefaultClient, c.GatewayURL(0)+"/api/status")
	})
}

// startNodes starts the rignode agents: the untainted system node (the
// manager, follow-up Jobs), the tainted rig host (loop pods) and the rigs'
// own hosts. They pull every image from the cluster's registry.
func (c *Cluster) startNodes(ctx context.Context) error {
	var procs []*Proc
	nodes := c.nodes()
	for _, n := range nodes {
		args := rignodeArgs(rignodeSettings{
			Kubeconfig: c.kubeconfigOf("node-" + n.name), Node: n.name, Port: n.port,
			Cert: c.pki.File("node-" + n.name + ".crt"), Key: c.pki.File("node-" + n.name + ".key"), CA: c.pki.File("ca.crt"),
			Root: filepath.Join(c.Dir, "nodes", n.name), Labels: n.labels, Taint: n.taint,
			AllowedImages: c.RegistryHost() + "/",
		})
		proc, err := c.run("rignode-"+n.name, c.bin("rignode"), args, nil)
		if err != nil {
			return err
		}
		procs = append(procs, proc)
	}
	return waitFor(ctx, "every node Ready", 90*time.Second, procs, func() error {
		for _, n := range nodeNames(nodes) {
			var node corev1.Node
			if err := c.Client.Get(ctx, client.ObjectKey{Name: n}, &node); err != nil {
				return err
			}
			if !nodeReady(&node) {
				return fmt.Errorf("node %s is not Ready", n)
			}
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// registerRigs applies one DeviceRig per simulated rig, on the rig host, and
// waits until the operator has found every one Ready.
func (c *Cluster) registerRigs(ctx context.Context) error {
	for i := 0; i < c.Rigs; i++ {
		rig := c.DeviceRig(i)
		if err := c.Client.Create(ctx, rig); err != nil {
			return fmt.Errorf("create DeviceRig %s: %w", rig.Name, err)
		}
	}
	return waitFor(ctx, "every DeviceRig Ready", 2*time.Minute, c.procsNamed("manager", "rignode-"+SystemNode, "rigsim", "rig-gateway"), func() error {
		var list farmv1.DeviceRigList
		if err := c.Client.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
			return err
		}
		ready := 0
		for _, r := range list.Items {
			if r.Status.Phase == farmv1.RigReady {
				ready++
			}
		}
		if ready < c.Rigs {
			return fmt.Errorf("%d of %d rigs Ready", ready, c.Rigs)
		}
		return nil
	})
}

// DeviceRig is the DeviceRig for simulated rig i.
func (c *Cluster) DeviceRig(i int) *farmv1.DeviceRig {
	rig := &farmv1.DeviceRig{}
	rig.Namespace, rig.Name = c.Namespace, RigName(i)
	rig.Labels = map[string]string{"pool": "sim", "farm.clawfarm.dev/dev-cluster": "true"}
	rig.Spec.NodeName = c.RigHost(i)
	rig.Spec.Endpoint.URL = c.GatewayURL(i) + "/mcp"
	rig.Spec.Endpoint.HealthURL = c.GatewayURL(i) + "/api/status"
	rig.Spec.Phone.Platform, rig.Spec.Phone.Model = "ios", "rigsim"
	rig.Spec.StateVolume.HostPath = filepath.Join(c.Dir, "rigs", rig.Name)
	// The rig gateway listens on the host's loopback, as rigsim does: the
	// kubelet node's loop pods share the host's network.
	rig.Spec.HostNetwork = c.OnKubelet(i)
	return rig
}
