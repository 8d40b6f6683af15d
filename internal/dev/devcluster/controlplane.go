package devcluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func (c *Cluster) startEtcd(ctx context.Context) error {
	p := c.Ports()
	client := fmt.Sprintf("http://127.0.0.1:%d", p.Etcd)
	peer := fmt.Sprintf("http://127.0.0.1:%d", p.EtcdPeer)
	proc, err := c.run("etcd", filepath.Join(c.k8s, "etcd"), []string{
		"--name=dev", "--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=dev=" + peer, "--unsafe-no-fsync", "--log-level=warn",
	}, nil)
	if err != nil {
		return err
	}
	return waitFor(ctx, "etcd", time.Minute, []*Proc{proc}, func() error {
		return httpOK(ctx, http.DefaultClient, client+"/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	p, f := c.Ports(), c.pki.File
	proc, err := c.run("kube-apiserver", filepath.Join(c.k8s, "kube-apiserver"), []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p.Etcd),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.APIServer),
		"--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
		"--client-ca-file=" + f("ca.crt"), "--token-auth-file=" + f(tokenFile),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// 127.0.0.1 cannot be an Endpoints address; pods reach the apiserver
		// directly (rignode sets KUBERNETES_SERVICE_HOST/PORT).
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true", "--enable-priority-and-fairness=false",
		"--profiling=false", "--v=1",
	}, nil)
	if err != nil {
		return err
	}
	hc, err := c.httpsClient()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "kube-apiserver", 2*time.Minute, []*Proc{proc}, func() error {
		return httpOK(ctx, hc, c.APIServerURL()+"/readyz")
	}); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	c.Client, err = client.New(cfg, client.Options{Scheme: Scheme()})
	return err
}

func (c *Cluster) startControllers(ctx context.Context) error {
	p, f := c.Ports(), c.pki.File
	kcm := c.kubeconfigOf("kube-controller-manager")
	cm, err := c.run("kube-controller-manager", filepath.Join(c.k8s, "kube-controller-manager"), []string{
		"--kubeconfig=" + kcm, "--authentication-kubeconfig=" + kcm, "--authorization-kubeconfig=" + kcm,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.ControllerManager),
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file=" + f("sa.key"), "--root-ca-file=" + f("ca.crt"),
		"--cluster-signing-cert-file=" + f("ca.crt"), "--cluster-signing-key-file=" + f("ca.key"),
		"--controllers=*", "--service-cluster-ip-range=" + ServiceCIDR,
		"--concurrent-cron-job-syncs=5", "--v=1",
	}, nil)
	if err != nil {
		return err
	}
	ks := c.kubeconfigOf("kube-scheduler")
	sch, err := c.run("kube-scheduler", filepath.Join(c.k8s, "kube-scheduler"), []string{
		"--kubeconfig=" + ks, "--authentication-kubeconfig=" + ks, "--authorization-kubeconfig=" + ks,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.Scheduler),
		"--leader-elect=false", "--v=1",
	}, nil)
	if err != nil {
		return err
	}
	// The service-account controller creating `default` in the default
	// namespace is the sign that the controller-manager works.
	if err := waitFor(ctx, "the default ServiceAccount", 90*time.Second, []*Proc{cm, sch}, func() error {
		var sa corev1.ServiceAccount
		return c.Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: "default"}, &sa)
	}); err != nil {
		return err
	}
	hc, err := c.httpsClient(true)
	if err != nil {
		return err
	}
	return waitFor(ctx, "kube-scheduler", time.Minute, []*Proc{sch}, func() error {
		return httpOK(ctx, hc, fmt.Sprintf("https://127.0.0.1:%d/healthz", p.Scheduler))
	})
}
