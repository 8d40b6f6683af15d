package devcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stopping a kubelet node and finding what it left: its containers and
// shims, the mounts under its directory, its cgroups, its pod bridge and
// the log links a kubelet writes in fixed places.

// mountinfo is /proc/self/mountinfo, each line split into its fields.
func mountinfo() [][]string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out [][]string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 5 {
			out = append(out, f)
		}
	}
	return out
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers and
// named hierarchies, and a v2 mount if there is one).
func cgroupHierarchies() []string {
	var out []string
	for _, fields := range mountinfo() {
		// The file system type follows the "-" that ends the optional fields.
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out
}

// mountsUnder are the mount points at or under dir, deepest first.
func mountsUnder(dir string) []string {
	var out []string
	for _, fields := range mountinfo() {
		if mp := unescapeMount(fields[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// stopContainerd stops a kubelet node's containerd (its kubelet has
// stopped already): first its containers through containerd — a kubelet
// that stops leaves them running — so their shims exit and remove their
// sockets, then containerd, then whatever is left (stopKubeletNode).
func stopContainerd(p *Proc, grace time.Duration, log func(string, ...any)) {
	nodeDir := filepath.Dir(flagValue(p.Args, "--config"))
	ctr := filepath.Join(filepath.Dir(p.Args[0]), "ctr")
	sock := filepath.Join(nodeDir, "containerd.sock")
	if gone, _ := p.Exited(); !gone && exists(ctr) {
		c := func(args ...string) []string {
			out, _ := exec.Command(ctr, append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).Output()
			return strings.Fields(string(out))
		}
		tasks := c("tasks", "ls", "-q")
		for _, id := range tasks {
			c("tasks", "kill", "--signal", "SIGKILL", id)
		}
		for _, id := range tasks {
			for i := 0; i < 50 && len(c("tasks", "delete", id)) == 0 && slices.Contains(c("tasks", "ls", "-q"), id); i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	p.Stop(grace)
	runc, _ := exec.LookPath("runc")
	if n := stopKubeletNode(nodeDir, runc, log); n > 0 && log != nil {
		log("stopped %d container(s) %s left running", n, p.Name)
	}
}

// stopKubeletNode removes what a stopped kubelet node leaves, as a machine
// that powers off would lose it: its containers, their shims, every mount
// under its directory, its cgroups, its pod bridge, and what the kubelet
// writes in fixed places. It returns how many containers it stopped.
func stopKubeletNode(nodeDir, runc string, log func(string, ...any)) int {
	root := runcRoot(nodeDir)
	ids := runcContainers(runc, root)
	for _, id := range ids {
		_ = exec.Command(runc, "--root", root, "kill", id, "KILL").Run()
	}
	// The shims (and anything else started for this node) name its socket
	// or directory on their command line.
	killMatching(nodeDir, 10*time.Second)
	for _, id := range ids {
		_ = exec.Command(runc, "--root", root, "delete", "--force", id).Run()
	}
	for _, m := range mountsUnder(nodeDir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && log != nil {
			log("unmount %s: %v", m, err)
		}
	}
	cg := cgroupRootOf(nodeDir)
	for _, h := range cgroupHierarchies() {
		removeCgroupTree(filepath.Join(h, cg))
	}
	_ = exec.Command("ip", "link", "delete", bridgeOf(nodeDir)).Run()
	for _, l := range linksInto("/var/log/containers", nodeDir) {
		_ = os.Remove(l)
	}
	_ = os.Remove("/var/lib/kubelet/device-plugins/kubelet.sock")
	for _, d := range []string{"/var/log/containers", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/run/containerd/s", "/run/containerd"} {
		_ = os.Remove(d) // only when empty: another node may use it
	}
	return len(ids)
}

// runcContainers lists the containers runc keeps under root.
func runcContainers(runc, root string) []string {
	if runc == "" {
		return nil
	}
	out, err := exec.Command(runc, "--root", root, "list", "-q").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// killMatching SIGKILLs every process whose command line names dir, and
// waits up to grace for them to go.
func killMatching(dir string, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for {
		pids := processesNaming(dir)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func processesNaming(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.Contains(string(b), dir+"/") || strings.Contains(string(b), dir+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// removeCgroupTree removes a cgroup and its children, deepest first (a
// cgroup directory goes with rmdir once it has no processes and no children).
func removeCgroupTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// linksInto are the symbolic links in dir that point under target.
func linksInto(dir, target string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if dest, err := os.Readlink(p); err == nil && strings.HasPrefix(dest, target+"/") {
			out = append(out, p)
		}
	}
	return out
}

// KubeletLeftovers says what the kubelet nodes of the cluster in dir left
// after Down: nothing, when they cleaned up as they should.
func KubeletLeftovers(dir string) []string {
	runc, _ := exec.LookPath("runc")
	var out []string
	for _, n := range []string{KubeletNode, KubeletSystemNode} {
		for _, l := range nodeLeftovers(filepath.Join(dir, "nodes", n), runc) {
			out = append(out, n+": "+l)
		}
	}
	return out
}

// nodeLeftovers says what of a stopped kubelet node is still there: its
// containers' processes, mounts, cgroups, bridge, log links. Empty: nothing.
func nodeLeftovers(nodeDir, runc string) []string {
	var out []string
	if ids := runcContainers(runc, runcRoot(nodeDir)); len(ids) > 0 {
		out = append(out, fmt.Sprintf("runc containers %v", ids))
	}
	if pids := processesNaming(nodeDir); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes %v", pids))
	}
	if m := mountsUnder(nodeDir); len(m) > 0 {
		out = append(out, fmt.Sprintf("mounts %v", m))
	}
	for _, h := range cgroupHierarchies() {
		if exists(filepath.Join(h, cgroupRootOf(nodeDir))) {
			out = append(out, "cgroup "+filepath.Join(h, cgroupRootOf(nodeDir)))
		}
	}
	if exists(filepath.Join("/sys/class/net", bridgeOf(nodeDir))) {
		out = append(out, "bridge "+bridgeOf(nodeDir))
	}
	for _, l := range linksInto("/var/log/containers", nodeDir) {
		out = append(out, "log link "+l)
	}
	return out
}
