package devcluster

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func TestKubeconfigLoadsBack(t *testing.T) {
	dir := t.TempDir()
	p, err := EnsurePKI(filepath.Join(dir, "pki"), []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kube-scheduler.kubeconfig")
	const server = "https://127.0.0.1:16443"
	if err := writeKubeconfig(path, server, p, "kube-scheduler", ""); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file: %v %v", fi, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}

	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "clawfarm-dev" || len(cfg.Contexts) != 1 || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 {
		t.Fatalf("config %+v", cfg)
	}
	ctx := cfg.Contexts["clawfarm-dev"]
	if ctx == nil || ctx.Cluster != "clawfarm-dev" || ctx.AuthInfo != "kube-scheduler" || ctx.Namespace != RunNamespace {
		t.Errorf("context %+v", ctx)
	}
	if c := cfg.Clusters["clawfarm-dev"]; c == nil || c.Server != server || c.CertificateAuthority != p.File("ca.crt") {
		t.Errorf("cluster %+v", c)
	}
	if u := cfg.AuthInfos["kube-scheduler"]; u == nil || u.ClientCertificate != p.File("kube-scheduler.crt") || u.ClientKey != p.File("kube-scheduler.key") ||
		u.Token != "" || u.Username != "" {
		t.Errorf("user %+v", u)
	}

	// What a client builds from it: the server, and a TLS setup that loads
	// the CA and the identity's key pair.
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != server || rc.CAFile != p.File("ca.crt") || rc.CertFile != p.File("kube-scheduler.crt") || rc.KeyFile != p.File("kube-scheduler.key") {
		t.Errorf("rest config host %s ca %s cert %s key %s", rc.Host, rc.CAFile, rc.CertFile, rc.KeyFile)
	}
	tc, err := rest.TLSConfigFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || tc.GetClientCertificate == nil {
		t.Fatalf("tls config without a CA or a client certificate: %+v", tc)
	}
	if cert, err := tc.GetClientCertificate(nil); err != nil || len(cert.Certificate) == 0 {
		t.Errorf("client certificate %v", err)
	}
	if ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, nil).Namespace(); err != nil || ns != RunNamespace {
		t.Errorf("namespace %q %v", ns, err)
	}
}
