package devcluster

import (
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfigName names the cluster, context and current context of every
// kubeconfig the dev cluster writes.
const kubeconfigName = "clawfarm-dev"

// writeKubeconfig writes a kubeconfig for one client identity of the PKI:
// the identity's certificate and key, and the CA, referred to by path; and
// a bearer token for the same user when token is set (what the trace
// server needs of a reader: it cannot see a client certificate).
func writeKubeconfig(path, server string, p PKI, identity, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigName] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.File("ca.crt")}
	cfg.AuthInfos[identity] = &clientcmdapi.AuthInfo{ClientCertificate: p.File(identity + ".crt"), ClientKey: p.File(identity + ".key"), Token: token}
	cfg.Contexts[kubeconfigName] = &clientcmdapi.Context{Cluster: kubeconfigName, AuthInfo: identity, Namespace: RunNamespace}
	cfg.CurrentContext = kubeconfigName
	body, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	// Written aside and renamed, so a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
