package devcluster

import (
	"fmt"
	"os"
)

// writeKubeconfig writes a kubeconfig for one client identity of the PKI.
func writeKubeconfig(path, server string, p PKI, identity string) error {
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: clawfarm-dev
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: clawfarm-dev
  context:
    cluster: clawfarm-dev
    user: %s
    namespace: %s
current-context: clawfarm-dev
`, server, p.File("ca.crt"), identity, p.File(identity+".crt"), p.File(identity+".key"), identity, RunNamespace)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
