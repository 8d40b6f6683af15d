package devcluster

import (
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func TestPKIChainsAndIdentities(t *testing.T) {
	dir := t.TempDir()
	p, err := EnsurePKI(dir, []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := readCert(p.File("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv, err := readCert(p.File("apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", ServiceIP} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("apiserver certificate for %s: %v", host, err)
		}
	}
	for name, want := range map[string]string{
		"admin": "system:masters", "kube-controller-manager": "", "node-n1": "system:nodes",
	} {
		c, err := readCert(p.File(name + ".crt"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s is not a client certificate of the CA: %v", name, err)
		}
		if want != "" && !contains(c.Subject.Organization, want) {
			t.Errorf("%s: organizations %v, want %s", name, c.Subject.Organization, want)
		}
	}
	if c, _ := readCert(p.File("kube-controller-manager.crt")); c.Subject.CommonName != "system:kube-controller-manager" {
		t.Errorf("controller-manager user %q", c.Subject.CommonName)
	}
	if !exists(p.File("sa.key")) || !exists(p.File("sa.pub")) {
		t.Fatal("no service-account key pair")
	}
	// A second call keeps every file (a kubeconfig handed out stays valid).
	before, _ := os.ReadFile(p.File("admin.crt"))
	if _, err := EnsurePKI(dir, []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(p.File("admin.crt"))
	if string(before) != string(after) {
		t.Fatal("EnsurePKI reissued an existing certificate")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestConfigDefaultsAndErrors(t *testing.T) {
	c := Config{Root: t.TempDir()}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Rigs != 5 || c.BasePort != DefaultBasePort || c.Manager != ManagerChart || c.Dir != filepath.Join(c.Root, ".dev") {
		t.Fatalf("defaults: %+v", c)
	}
	p := c.Ports()
	seen := map[int]bool{}
	for _, port := range []int{p.Etcd, p.EtcdPeer, p.APIServer, p.ControllerManager, p.Scheduler, p.SystemKubelet, p.RigKubelet,
		p.ManagerMetrics, p.ManagerProbes, p.Modelsim, p.Rigsim, p.Registry, p.TraceServer, p.RigGateway} {
		if seen[port] || port < c.BasePort || port >= c.BasePort+PortCount {
			t.Fatalf("port %d repeated or outside [base, base+PortCount)", port)
		}
		seen[port] = true
	}
	for _, bad := range []Config{
		{Root: "/x", Rigs: -1}, {Root: "/x", BasePort: 80}, {Root: "/x", Manager: "docker"},
		{Root: "/x", OwnHosts: []int{5}}, {Root: "/x", OwnHosts: []int{1, 1}},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestCheckPortsNamesTheTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	c := &Cluster{Config: Config{BasePort: port - 2}} // the apiserver's offset
	err = c.checkPorts()
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") || !strings.Contains(err.Error(), "--base-port") {
		t.Fatalf("err = %v, want one naming kube-apiserver and --base-port", err)
	}
}

func TestSplitYAMLAndLoadDemoRuns(t *testing.T) {
	docs := splitYAML("# Source: a\n---\nkind: A\n---\n# only a comment\n---\nkind: B\n")
	if len(docs) != 2 || !strings.Contains(docs[0], "kind: A") || !strings.Contains(docs[1], "kind: B") {
		t.Fatalf("splitYAML: %q", docs)
	}
	root, err := FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	runs, err := LoadRuns(filepath.Join(root, "config", "demo", "runs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scenarios := map[string]bool{}
	for _, r := range runs {
		scenarios[r.Spec.Model.Name] = true
		if r.Spec.RigRef == nil || r.Spec.Model.APIKeySecretRef == nil || r.Spec.Model.APIKeySecretRef.Name != ModelSecret {
			t.Errorf("run %s: needs a rigRef and the %s key", r.Name, ModelSecret)
		}
	}
	for _, s := range []string{"sim/timer", "sim/soldout", "sim/ask-ana", "sim/idle", "sim/shop"} {
		if !scenarios[s] {
			t.Errorf("no demo run plays %s", s)
		}
	}
	for _, s := range []string{"ask-ana", "always-stuck"} {
		if !exists(filepath.Join(root, "config", "demo", "scenarios", s+".yaml")) {
			t.Errorf("scenario %s missing", s)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("kind: AgentRun\nspec:\n  nope: 1\n"), 0o644)
	if _, err := LoadRuns(bad); err == nil || !strings.Contains(err.Error(), "document 1") {
		t.Fatalf("unknown field: err = %v", err)
	}
}

func TestRunTableDone(t *testing.T) {
	now := time.Now()
	run := func(name string, phase farmv1.RunPhase, fire time.Duration) farmv1.AgentRun {
		r := farmv1.AgentRun{}
		r.Name, r.Status.Phase, r.Status.Sentinel = name, phase, "DONE"
		if fire != 0 {
			ft := metav1.NewTime(now.Add(fire))
			r.Status.FollowUp = &farmv1.FollowUpStatus{FireTime: &ft, Run: name + "-f1", CronJob: name + "-fu"}
		}
		return r
	}
	if _, done, _ := RunTable([]farmv1.AgentRun{run("a", farmv1.RunSucceeded, 0), run("b", farmv1.RunRunning, 0)}, now); done {
		t.Fatal("done with a run Running")
	}
	if _, done, _ := RunTable([]farmv1.AgentRun{run("a", farmv1.RunSucceeded, 0), run("w", farmv1.RunWaiting, time.Minute)}, now); done {
		t.Fatal("done while a follow-up a minute away is pending")
	}
	table, done, note := RunTable([]farmv1.AgentRun{run("a", farmv1.RunFailed, 0), run("w", farmv1.RunWaiting, 15*time.Minute)}, now)
	if !done || !strings.Contains(note, "w-f1") || !strings.Contains(table, "NAME") || !strings.Contains(table, "Waiting") {
		t.Fatalf("a far follow-up: done=%t note=%q table:\n%s", done, note, table)
	}
	if _, done, _ := RunTable(nil, now); done {
		t.Fatal("done with no runs")
	}
}

func TestProviderFromEnv(t *testing.T) {
	t.Setenv("MODEL_BASE_URL", "")
	t.Setenv("MODEL_NAME", "")
	t.Setenv("MODEL_API_KEY", "")
	if p, err := ProviderFromEnv(); err != nil || p.Real {
		t.Fatalf("no env: %+v %v", p, err)
	}
	t.Setenv("MODEL_BASE_URL", "https://api.example/v1")
	if _, err := ProviderFromEnv(); err == nil || !strings.Contains(err.Error(), "MODEL_NAME") {
		t.Fatalf("half set: err = %v", err)
	}
	t.Setenv("MODEL_NAME", "gpt-x")
	t.Setenv("MODEL_API_KEY", "k")
	p, err := ProviderFromEnv()
	if err != nil || !p.Real || p.Kind != "openai-compatible" || p.Model != "gpt-x" {
		t.Fatalf("real: %+v %v", p, err)
	}
}

// A stopped process takes its whole process group (its children) with it,
// and a process that ignores SIGTERM is killed after the grace period.
func TestProcStopKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	p, err := start(dir, "sh", "/bin/sh", []string{"-c", "trap '' TERM; sleep 300 & echo $! > " + filepath.Join(dir, "child") + "; wait"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	for i := 0; i < 100 && child == 0; i++ {
		b, _ := os.ReadFile(filepath.Join(dir, "child"))
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(20 * time.Millisecond)
	}
	if child == 0 {
		t.Fatal("the child did not start")
	}
	begin := time.Now()
	p.Stop(300 * time.Millisecond)
	if gone, _ := p.Exited(); !gone {
		t.Fatal("still running after Stop")
	}
	if time.Since(begin) > 5*time.Second {
		t.Fatalf("Stop took %s", time.Since(begin))
	}
	for i := 0; i < 100; i++ {
		if zombieOrGone(child) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !zombieOrGone(child) {
		t.Fatalf("the child %d survived its group's stop", child)
	}
	if !strings.Contains(p.Tail(5), "==== ") {
		t.Fatalf("log has no header: %q", p.Tail(5))
	}
}

func zombieOrGone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestAliveChecksTheProgram(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	exe, _ := exec.LookPath("sleep")
	// Start returns once the child has called execve, but the kernel fills in
	// the new program's argument area a moment later: until then
	// /proc/<pid>/cmdline reads empty. Give it that moment.
	deadline := time.Now().Add(5 * time.Second)
	for !alive(cmd.Process.Pid, "sleep") && !alive(cmd.Process.Pid, exe) {
		if time.Now().After(deadline) {
			t.Fatal("a running sleep is not alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if alive(cmd.Process.Pid, "/bin/something-else") {
		t.Fatal("a pid running another program counts as ours")
	}
}

func TestClipLines(t *testing.T) {
	if got := clipLines("abcdef\nabc\nnamé long\n", 4); got != "abcd\nabc\nnamé\n" {
		t.Fatalf("clipLines = %q", got)
	}
}

// A rig on a host of its own gets a node and a rignode port of its own,
// after the fixed ones; the other rigs stay on the shared rig host.
func TestOwnHosts(t *testing.T) {
	t.Parallel()
	c := Config{Root: t.TempDir(), Rigs: 4, OwnHosts: []int{1, 3}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.RigHost(0) != RigNode || c.RigHost(2) != RigNode || c.RigHost(1) != RigNode+"-1" || c.RigHost(3) != RigNode+"-3" {
		t.Fatalf("rig hosts %s %s %s %s", c.RigHost(0), c.RigHost(1), c.RigHost(2), c.RigHost(3))
	}
	ports := map[int]string{}
	for _, n := range c.nodes() {
		if other, ok := ports[n.port]; ok {
			t.Fatalf("nodes %s and %s share port %d", other, n.name, n.port)
		}
		ports[n.port] = n.name
		if n.name != SystemNode && n.taint == "" {
			t.Errorf("rig host %s is not tainted", n.name)
		}
	}
	if len(ports) != 4 || ports[c.BasePort+PortCount] != RigNode+"-1" || ports[c.BasePort+PortCount+1] != RigNode+"-3" {
		t.Fatalf("node ports %v", ports)
	}
	if cl := (&Cluster{Config: c}); cl.DeviceRig(3).Spec.NodeName != RigNode+"-3" || cl.DeviceRig(0).Spec.NodeName != RigNode {
		t.Fatal("a DeviceRig does not name its rig's host")
	}
}

// The kubelet node's rigs: on KubeletNode, with a port after the rigs' own
// hosts, never one of those, and host-network DeviceRigs.
func TestKubeletRigs(t *testing.T) {
	c := Config{Root: t.TempDir(), Rigs: 5, OwnHosts: []int{1}, KubeletRigs: []int{3, 4}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.RigHost(3) != KubeletNode || !c.OnKubelet(4) || c.OnKubelet(0) || c.RigHost(1) != RigNode+"-1" {
		t.Fatalf("rig hosts %s %s %s", c.RigHost(0), c.RigHost(1), c.RigHost(3))
	}
	if ns := c.kubeletNodes(); c.portCount() != PortCount+2 || len(ns) != 1 || ns[0].name != KubeletNode || ns[0].port != c.BasePort+PortCount+1 {
		t.Fatalf("ports: %d from %d, kubelet nodes %+v", c.portCount(), c.BasePort, ns)
	}
	cl := &Cluster{Config: c}
	if r := cl.DeviceRig(3); r.Spec.NodeName != KubeletNode || !r.Spec.HostNetwork {
		t.Errorf("rig 3: node %s hostNetwork %v", r.Spec.NodeName, r.Spec.HostNetwork)
	}
	if r := cl.DeviceRig(0); r.Spec.HostNetwork {
		t.Error("a rignode rig has host-network pods")
	}
	for _, bad := range [][]int{{1}, {5}, {3, 3}} {
		c := Config{Root: t.TempDir(), Rigs: 5, OwnHosts: []int{1}, KubeletRigs: bad}
		if err := c.defaults(); err == nil || !strings.Contains(err.Error(), "kubelet rigs") {
			t.Errorf("kubelet rigs %v: %v", bad, err)
		}
	}
}

// The operator's kubelet node: after the rigs' kubelet node, on a port of
// its own, tainted so that only the operator's pods (which tolerate it)
// land there, and in the chart's values.
func TestKubeletSystemNode(t *testing.T) {
	c := Config{Root: t.TempDir(), Rigs: 3, OwnHosts: []int{2}, KubeletRigs: []int{0}, KubeletSystem: true}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	ns := c.kubeletNodes()
	if len(ns) != 2 || ns[0].name != KubeletNode || ns[1].name != KubeletSystemNode || ns[1].port != c.BasePort+PortCount+2 || c.portCount() != PortCount+3 {
		t.Fatalf("kubelet nodes %+v, %d ports", ns, c.portCount())
	}
	if ns[1].taint != TaintOperator+"=true:NoSchedule" || strings.Contains(ns[1].labels, farmv1.TaintRig) {
		t.Errorf("the operator's node: taint %q, labels %q; want %s and no rig label", ns[1].taint, ns[1].labels, TaintOperator)
	}
	if c := (Config{Root: t.TempDir(), KubeletSystem: true}); c.defaults() != nil || len(c.kubeletNodes()) != 1 || c.portCount() != PortCount+1 {
		t.Errorf("the operator's node alone: %+v", c.kubeletNodes())
	}
	f, err := writeNodeFiles(nodeFiles{Dir: filepath.Join(t.TempDir(), KubeletSystemNode), Taint: ns[1].taint, Port: ns[1].port})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(f.kubelet); !strings.Contains(string(b), "- {key: "+TaintOperator+`, value: "true", effect: NoSchedule}`) {
		t.Errorf("kubelet.yaml registers other taints:\n%s", b)
	}
}

// The kubelet node's files keep everything under its directory and hold
// what this machine needs: restrict_oom_score_adj, failCgroupV1: false, no
// host DNS for pods, and a pod network with no gateway, route or masquerade.
func TestKubeletNodeFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nodes", KubeletNode)
	f, err := writeNodeFiles(nodeFiles{Dir: dir, Bins: "/cache/node", Runc: "/usr/sbin/runc", Pause: "127.0.0.1:5000/clawfarm/pause@sha256:ab",
		Registry: "127.0.0.1:5000", Port: 17413, Taint: farmv1.TaintRig + "=true:NoSchedule", CA: "/pki/ca.crt", Cert: "/pki/n.crt", Key: "/pki/n.key"})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ctrd := read(f.containerd)
	for _, want := range []string{`root = "` + dir + `/containerd/root"`, `state = "` + dir + `/containerd/state"`, `address = "` + dir + `/containerd.sock"`,
		"restrict_oom_score_adj = true", "netns_mounts_under_state_dir = true", `Root = "` + dir + `/runc"`,
		`sandbox = "127.0.0.1:5000/clawfarm/pause@sha256:ab"`, `config_path = "` + dir + `/certs.d"`, `bin_dirs = ["/cache/node/cni"]`} {
		if !strings.Contains(ctrd, want) {
			t.Errorf("containerd.toml lacks %s:\n%s", want, ctrd)
		}
	}
	if h := read(filepath.Join(dir, "certs.d", "127.0.0.1:5000", "hosts.toml")); !strings.Contains(h, `server = "http://127.0.0.1:5000"`) {
		t.Errorf("hosts.toml: %s", h)
	}
	var cni struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(read(filepath.Join(dir, "cni", "net.d", "10-clawfarm-dev.conflist"))), &cni); err != nil {
		t.Fatal(err)
	}
	br := cni.Plugins[0]
	if br["type"] != "bridge" || br["isGateway"] != false || br["ipMasq"] != false || br["isDefaultGateway"] != false || len(br["bridge"].(string)) > 15 {
		t.Errorf("bridge %v", br)
	}
	if _, ok := br["ipam"].(map[string]any)["routes"]; ok {
		t.Errorf("the pod network has routes: %v", br["ipam"])
	}
	kl := read(f.kubelet)
	for _, want := range []string{"address: 127.0.0.1\n", "port: 17413\n", "readOnlyPort: 0\n", "failCgroupV1: false\n", `resolvConf: ""`,
		"cgroupRoot: /" + cgroupRootOf(dir) + "\n", "containerRuntimeEndpoint: unix://" + dir + "/containerd.sock\n", `podLogsDir: "` + dir + `/pod-logs"`,
		"anonymous: {enabled: false}", "- {key: " + farmv1.TaintRig + `, value: "true", effect: NoSchedule}`,
		`x509: {clientCAFile: "/pki/ca.crt"}`, `tlsCertFile: "/pki/n.crt"`, `tlsPrivateKeyFile: "/pki/n.key"`} {
		if !strings.Contains(kl, want) {
			t.Errorf("kubelet.yaml lacks %q:\n%s", want, kl)
		}
	}
	// Without certificates (a node beside another API server, as the chaos
	// benchmark starts): no client CA, and the kubelet signs its own.
	own, err := writeNodeFiles(nodeFiles{Dir: dir + "-own", Taint: farmv1.TaintRig + "=true:NoSchedule", Port: 17414})
	if err != nil {
		t.Fatal(err)
	}
	for path, file := range map[string]string{"with certificates": f.kubelet, "without": own.kubelet} {
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(read(file)), &cfg); err != nil {
			t.Fatalf("kubelet.yaml %s is not YAML: %v", path, err)
		}
		_, hasCA := cfg["authentication"].(map[string]any)["x509"]
		_, tls := cfg["tlsCertFile"]
		if want := path == "with certificates"; hasCA != want || tls != want || cfg["authorization"].(map[string]any)["mode"] != "Webhook" {
			t.Errorf("kubelet.yaml %s: x509 %v, tlsCertFile %v, authorization %v", path, hasCA, tls, cfg["authorization"])
		}
	}
	if cgroupRootOf(dir) == cgroupRootOf(dir+"x") || bridgeOf(dir) == bridgeOf(dir+"x") {
		t.Error("two nodes' directories share a cgroup root or a bridge")
	}
}

// The kubelet node's certificate is a node's alone (the Node authorizer and
// NodeRestriction hold it); rignode's stay system:masters.
func TestKubeletNodeIsOnlyANode(t *testing.T) {
	p, err := EnsurePKI(t.TempDir(), []string{RigNode, KubeletNode, KubeletSystemNode})
	if err != nil {
		t.Fatal(err)
	}
	for node, masters := range map[string]bool{RigNode: true, KubeletNode: false, KubeletSystemNode: false} {
		cert, err := readCert(p.File("node-" + node + ".crt"))
		if err != nil {
			t.Fatal(err)
		}
		orgs := cert.Subject.Organization
		if cert.Subject.CommonName != "system:node:"+node || !contains(orgs, "system:nodes") || contains(orgs, "system:masters") != masters {
			t.Errorf("%s: CN %s O %v, want system:node:%s in system:nodes, system:masters %v", node, cert.Subject.CommonName, orgs, node, masters)
		}
	}
}

// What down unmounts and cleans is read from this process's mountinfo.
func TestMountinfo(t *testing.T) {
	if m := mountsUnder("/proc"); len(m) == 0 || m[len(m)-1] != "/proc" {
		t.Errorf("mounts under /proc %v, want /proc last (deepest first)", m)
	}
	for _, h := range cgroupHierarchies() {
		if !strings.HasPrefix(h, "/sys/fs/cgroup") {
			t.Errorf("cgroup hierarchy %s outside /sys/fs/cgroup", h)
		}
	}
	if len(cgroupHierarchies()) == 0 {
		t.Error("no cgroup hierarchy mounted")
	}
}

// The demo's place table names each of the operator's pods with its node's
// runtime, and nothing that is not the operator's.
func TestPlaceTable(t *testing.T) {
	pod := func(ns, name, node string, labels map[string]string) corev1.Pod {
		p := corev1.Pod{}
		p.Namespace, p.Name, p.Labels, p.Spec.NodeName, p.Status.Phase = ns, name, labels, node, corev1.PodRunning
		return p
	}
	table := PlaceTable([]corev1.Pod{
		pod(OperatorNamespace, "clawfarm-manager-1", KubeletSystemNode, nil),
		pod(RunNamespace, "order-coffee-a1", KubeletNode, map[string]string{farmv1.LabelRun: "order-coffee"}),
		pod(RunNamespace, "ask-ana-x", SystemNode, map[string]string{"batch.kubernetes.io/job-name": "ask-ana"}),
		pod(RunNamespace, "someone-elses", SystemNode, nil),
		pod(OperatorNamespace, "pending", "", nil),
	}, map[string]string{KubeletSystemNode: "containerd://2.4.2", KubeletNode: "containerd://2.4.2", SystemNode: "rignode://v0"})
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "POD") {
		t.Fatalf("table:\n%s", table)
	}
	for _, want := range [][]string{
		{OperatorNamespace + "/clawfarm-manager-1", KubeletSystemNode, "containerd://2.4.2"},
		{OperatorNamespace + "/pending", "-", "-"},
		{RunNamespace + "/ask-ana-x", SystemNode, "rignode://v0"},
		{RunNamespace + "/order-coffee-a1", KubeletNode, "containerd://2.4.2"},
	} {
		found := false
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			found = found || (f[0] == want[0] && f[1] == want[1] && f[2] == want[2])
		}
		if !found {
			t.Errorf("no row %v in\n%s", want, table)
		}
	}
	if strings.Contains(table, "someone-elses") {
		t.Errorf("a pod that is not the operator's is listed:\n%s", table)
	}
}
