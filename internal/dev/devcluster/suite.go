package devcluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Suite is a test binary that runs on a dev cluster of its own (test/e2e,
// test/install): its TestMain brings the cluster up, runs the tests on it,
// prints what a failure needs, and stops it, checking that the kubelet
// nodes left nothing behind. E2E_BUILD=0 uses bin/ as it is, E2E_KEEP=1
// leaves the cluster up afterwards.
type Suite struct {
	// Name starts the suite's messages ("e2e").
	Name string
	// Dir is the cluster's directory in the checkout (".e2e").
	Dir string
	// PortEnv names the variable that moves the cluster's ports from BasePort.
	PortEnv  string
	BasePort int
	// Config is the cluster's shape; Run sets its Root, Dir, BasePort, Build
	// and K8sDir (KUBEBUILDER_ASSETS).
	Config Config
	// Started runs once the cluster is up, before the tests.
	Started func(ctx context.Context, c *Cluster)
	// Passed, when set, checks more once every test has passed; an error
	// fails the suite.
	Passed func(ctx context.Context) error
	// DumpKinds are the kinds `kubectl get -A` prints on a failure, beside
	// the events.
	DumpKinds string
}

// Tests is what Suite.Run runs: a *testing.M.
type Tests interface{ Run() int }

// Run runs the tests on the suite's cluster and returns the exit code.
func (s Suite) Run(m Tests) int {
	root, err := FindRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
		return 1
	}
	base := s.BasePort
	if v := os.Getenv(s.PortEnv); v != "" {
		if base, err = strconv.Atoi(v); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s=%q: %v\n", s.Name, s.PortEnv, v, err)
			return 2
		}
	}
	dir := filepath.Join(root, s.Dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := s.Config
	cfg.Root, cfg.Dir, cfg.BasePort = root, dir, base
	cfg.Build, cfg.K8sDir = os.Getenv("E2E_BUILD") != "0", os.Getenv("KUBEBUILDER_ASSETS")
	begin := time.Now()
	c, err := Up(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: dev cluster: %v\n", s.Name, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "%s: dev cluster up in %.0fs (%s)\n", s.Name, time.Since(begin).Seconds(), dir)
	s.Started(ctx, c)
	done := make(chan int, 1)
	go func() { done <- m.Run() }()
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "%s: interrupted; stopping the dev cluster\n", s.Name)
		code = 1
	}
	if code == 0 && ctx.Err() == nil && s.Passed != nil {
		if err := s.Passed(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "--- FAIL:", err)
			code = 1
		}
	}
	if code != 0 {
		c.dump(s.DumpKinds)
	}
	if os.Getenv("E2E_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "%s: leaving the cluster up: export KUBECONFIG=%s; stop it with go run ./cmd/devcluster down --dir %s\n", s.Name, c.Kubeconfig, dir)
		return code
	}
	c.Down()
	if left := KubeletLeftovers(dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "--- FAIL: the stopped kubelet nodes left %s\n", strings.Join(left, "; "))
		return 1
	}
	fmt.Fprintf(os.Stderr, "%s: the stopped kubelet nodes left no container, process, mount, cgroup, bridge or log link\n", s.Name)
	return code
}

// dump prints what a failure needs: kubectl get of kinds in every
// namespace, the events, and where the component logs are.
func (c *Cluster) dump(kinds string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"get", kinds, "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := c.Kubectl(ctx, nil, args...)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		fmt.Fprintf(os.Stderr, "---- kubectl %v\n%s%s\n", args, out, msg)
	}
	fmt.Fprintf(os.Stderr, "---- component logs: %s/logs/\n", c.Dir)
}
