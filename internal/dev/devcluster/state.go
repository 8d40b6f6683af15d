package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/clawfarm/clawfarm/internal/rignode"
)

// state is what state.json keeps for `down` and `status`.
type state struct {
	Root       string    `json:"root"`
	BasePort   int       `json:"basePort"`
	Rigs       int       `json:"rigs"`
	Manager    Manager   `json:"manager"`
	Kubeconfig string    `json:"kubeconfig"`
	K8sDir     string    `json:"k8sDir"`
	Started    time.Time `json:"started"`
	Procs      []*Proc   `json:"procs"`
	// Images are the project's images in the cluster's registry, by digest.
	Images map[string]string `json:"images,omitempty"`
}

// Down stops every process, newest first: the operator and the nodes (and
// with them every pod) before the control plane, etcd last.
func (c *Cluster) Down() {
	c.mu.Lock()
	procs := append([]*Proc(nil), c.procs...)
	c.mu.Unlock()
	stopAll(procs, c.Log)
	_ = os.Remove(filepath.Join(c.Dir, "state.json"))
}

func stopAll(procs []*Proc, log func(string, ...any)) {
	order := func(name string) int {
		switch {
		case name == "manager":
			return 0
		case strings.HasPrefix(name, "rignode"), strings.HasPrefix(name, "kubelet-"):
			return 1
		case name == "etcd":
			return 4
		case name == "kube-apiserver":
			return 3
		}
		return 2
	}
	for stage := 0; stage <= 4; stage++ {
		var wg sync.WaitGroup
		for _, p := range procs {
			if order(p.Name) != stage {
				continue
			}
			wg.Add(1)
			go func(p *Proc) {
				defer wg.Done()
				grace := 10 * time.Second
				if strings.HasPrefix(p.Name, "rignode") {
					grace = 40 * time.Second // its pods get their grace period
				}
				if strings.HasPrefix(p.Name, "containerd-") {
					stopContainerd(p, grace, log)
					return
				}
				p.Stop(grace)
				if root := flagValue(p.Args, "--root-dir"); strings.HasPrefix(p.Name, "rignode") && root != "" {
					// A node agent that stops leaves its pods' processes
					// running, as a kubelet does; the cluster going away
					// takes them with it.
					if n := rignode.StopLeftovers(root, grace); n > 0 && log != nil {
						log("stopped %d pod process(es) %s left running", n, p.Name)
					}
				}
			}(p)
		}
		wg.Wait()
	}
	if log != nil {
		log("stopped %d processes", len(procs))
	}
}

func (c *Cluster) saveState() error {
	c.mu.Lock()
	st := state{Root: c.Root, BasePort: c.BasePort, Rigs: c.Rigs, Manager: c.Manager, Kubeconfig: c.Kubeconfig,
		K8sDir: c.k8s, Started: c.started, Procs: c.procs, Images: c.images}
	b, err := json.MarshalIndent(st, "", "  ")
	c.mu.Unlock()
	if err != nil {
		return err
	}
	path := filepath.Join(c.Dir, "state.json")
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "state.json"), err)
	}
	return &st, nil
}

func (s *state) anyAlive() bool {
	for _, p := range s.Procs {
		if len(p.Args) > 0 && alive(p.PID, p.Args[0]) {
			return true
		}
	}
	return false
}

// Running reports whether a dev cluster runs in dir.
func Running(dir string) bool {
	st, err := readState(dir)
	return err == nil && st.anyAlive()
}

// Stop stops the cluster recorded in dir (by `devcluster up` in another
// process). It is not an error when nothing runs.
func Stop(dir string, log func(string, ...any)) error {
	st, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		log("no dev cluster in %s", dir)
		return nil
	}
	if err != nil {
		return err
	}
	var live []*Proc
	for _, p := range st.Procs {
		if len(p.Args) > 0 && alive(p.PID, p.Args[0]) {
			live = append(live, p)
		}
	}
	stopAll(live, log)
	return os.Remove(filepath.Join(dir, "state.json"))
}

// Status describes the cluster recorded in dir: one line per process.
func Status(dir string) (string, bool, error) {
	st, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("no dev cluster in %s\n", dir), false, nil
	}
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	up := true
	fmt.Fprintf(&b, "dev cluster in %s (started %s, base port %d, %d rigs, manager: %s)\n",
		dir, st.Started.Local().Format(time.Kitchen), st.BasePort, st.Rigs, st.Manager)
	for _, p := range st.Procs {
		s := "running"
		if len(p.Args) == 0 || !alive(p.PID, p.Args[0]) {
			s, up = "STOPPED", false
		}
		fmt.Fprintf(&b, "  %-28s pid %-8d %-8s %s\n", p.Name, p.PID, s, p.Log)
	}
	fmt.Fprintf(&b, "export KUBECONFIG=%s\n", st.Kubeconfig)
	return b.String(), up, nil
}

// flagValue is the value of a --name=value argument, "" when absent.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
