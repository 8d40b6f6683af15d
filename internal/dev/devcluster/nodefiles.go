package devcluster

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A kubelet node's configuration files: containerd's, the kubelet's, the
// CNI network's and the registry's hosts.toml, all under its directory.

// nodeFiles is what a kubelet node's configuration is made of.
type nodeFiles struct {
	Dir, Bins, Runc, Pause, Registry string
	Port                             int
	// Taint is the one taint the node registers with, key=value:Effect.
	Taint         string
	CA, Cert, Key string
	// Written: the files' paths.
	containerd, kubelet, socket string
}

// writeNodeFiles writes containerd's and the kubelet's configuration, the
// registry's hosts.toml and the CNI network.
func writeNodeFiles(f nodeFiles) (nodeFiles, error) {
	if err := os.RemoveAll(f.Dir); err != nil {
		return f, err
	}
	reg := filepath.Join(f.Dir, "certs.d", f.Registry)
	for _, d := range []string{reg, filepath.Join(f.Dir, "cni", "net.d"), filepath.Join(f.Dir, "kubelet"), filepath.Join(f.Dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return f, err
		}
	}
	f.socket = filepath.Join(f.Dir, "containerd.sock")
	f.containerd = filepath.Join(f.Dir, "containerd.toml")
	f.kubelet = filepath.Join(f.Dir, "kubelet.yaml")
	cgroupRoot := cgroupRootOf(f.Dir)
	writes := map[string]string{
		f.containerd:                     containerdConfig(f),
		filepath.Join(reg, "hosts.toml"): fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", f.Registry),
		filepath.Join(f.Dir, "cni", "net.d", "10-clawfarm-dev.conflist"): cniConfig(f.Dir),
		f.kubelet: kubeletConfig(f, cgroupRoot),
	}
	for path, body := range writes {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return f, err
		}
	}
	return f, nil
}

// containerdConfig keeps containerd's root, state, socket, runc's state and
// the sandboxes' network namespaces under the node's directory.
// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and without it
// every sandbox fails ("can't get final child's PID from pipe: EOF").
func containerdConfig(f nodeFiles) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %[7]q
      Root = %[8]q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[9]q]
    conf_dir = %[10]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
`, filepath.Join(f.Dir, "containerd", "root"), filepath.Join(f.Dir, "containerd", "state"),
		f.socket, f.socket+".ttrpc", f.Pause, filepath.Join(f.Dir, "certs.d"),
		f.Runc, filepath.Join(f.Dir, "runc"), filepath.Join(f.Bins, "cni"), filepath.Join(f.Dir, "cni", "net.d"))
}

// cniConfig is the pod network of the node's own-network pods: a bridge the
// node makes, with no gateway, no route and no masquerade, so such a pod
// reaches its neighbours on the bridge and nothing else — nothing it sends
// can leave the machine. The project's pods here share the host's network.
func cniConfig(nodeDir string) string {
	sum := sha256.Sum256([]byte(nodeDir))
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "clawfarm-dev",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": false, "isDefaultGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.%d.0/24"}]], "dataDir": %q}},
    {"type": "loopback"}
  ]
}
`, bridgeOf(nodeDir), sum[4], filepath.Join(nodeDir, "cni", "ipam"))
}

// kubeletConfig: on loopback, webhook authentication and authorization,
// the cgroupfs driver on this machine's cgroup v1 hierarchy (failCgroupV1:
// false), no DNS of the host's for pods, eviction only when the disk is
// nearly full, and the pods' logs under the node's directory.
func kubeletConfig(f nodeFiles, cgroupRoot string) string {
	key, rest, _ := strings.Cut(f.Taint, "=")
	value, effect, _ := strings.Cut(rest, ":")
	var x509, serving string
	if f.CA != "" {
		x509 = fmt.Sprintf("  x509: {clientCAFile: %q}\n", f.CA)
	}
	if f.Cert != "" {
		serving = fmt.Sprintf("tlsCertFile: %q\ntlsPrivateKeyFile: %q\n", f.Cert, f.Key)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
%sauthorization: {mode: Webhook}
%scontainerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: ""
podLogsDir: %q
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
registerWithTaints:
- {key: %s, value: %q, effect: %s}
`, f.Port, x509, serving, f.socket, cgroupRoot, filepath.Join(f.Dir, "pod-logs"), key, value, effect)
}
