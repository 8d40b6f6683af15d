//go:build e2e

// Package e2e is clawfarm's end-to-end suite: one dev cluster (internal/dev/devcluster)
// with the real scheduler, the real Job and CronJob controllers, rignode running
// the loop as a host process, rigsim and modelsim; each test drives AgentRuns on
// its own rig and checks the operator's record against the phone's ground truth.
//
//	make e2e      (go test -tags e2e ./test/e2e/)
//
// E2E_BASE_PORT moves the cluster's ports (default 27400), E2E_MANAGER=host
// runs the operator as a host process instead of from the Helm chart, and
// E2E_KEEP=1 leaves the cluster up afterwards (stop it with devcluster down --dir),
// E2E_BUILD=0 uses bin/ as it is instead of building the binaries first.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// cluster is the suite's dev cluster.
var cluster *devcluster.Cluster

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := devcluster.FindRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	base := 27400
	if s := os.Getenv("E2E_BASE_PORT"); s != "" {
		if base, err = strconv.Atoi(s); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: E2E_BASE_PORT=%q: %v\n", s, err)
			return 2
		}
	}
	mgr := devcluster.ManagerChart
	if os.Getenv("E2E_MANAGER") == string(devcluster.ManagerHost) {
		mgr = devcluster.ManagerHost
	}
	dir := filepath.Join(root, ".e2e")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	cluster, err = devcluster.Up(ctx, devcluster.Config{
		Root: root, Dir: dir, Rigs: rigCount, BasePort: base, Manager: mgr, Build: os.Getenv("E2E_BUILD") != "0",
		K8sDir: os.Getenv("KUBEBUILDER_ASSETS"), RigsimArgs: []string{"--reply-after=30s"},
		// The rignode tests kill and pause their rig's node agent: on nodes of
		// their own, the other tests' sessions run on meanwhile.
		OwnHosts:    []int{rigHostKill, rigHostPause},
		KubeletRigs: kubeletRigs,
		// The manager (chart mode) and the trace server run as containers
		// on a kubelet node of their own, as on a farm's own nodes.
		KubeletSystem: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: dev cluster:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: dev cluster up in %.0fs (%s)\n", time.Since(begin).Seconds(), dir)
	images := watchImages(ctx)
	done := make(chan int, 1)
	go func() { done <- m.Run() }()
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "e2e: interrupted; stopping the dev cluster")
		code = 1
	}
	if code == 0 && ctx.Err() == nil {
		if err := images.check(); err != nil {
			fmt.Fprintln(os.Stderr, "--- FAIL: every operator pod runs an image from the dev cluster's registry:", err)
			code = 1
		} else {
			fmt.Fprintln(os.Stderr, "e2e: every operator pod ran from the registry:", images.summary(nodeRuntimes()))
		}
	}
	if code != 0 {
		dumpCluster()
	}
	if os.Getenv("E2E_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "e2e: leaving the cluster up: export KUBECONFIG=%s; stop it with go run ./cmd/devcluster down --dir %s\n", cluster.Kubeconfig, dir)
		return code
	}
	cluster.Down()
	if left := devcluster.KubeletLeftovers(dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "--- FAIL: the stopped kubelet nodes left %s\n", strings.Join(left, "; "))
		return 1
	}
	fmt.Fprintln(os.Stderr, "e2e: the stopped kubelet nodes left no container, process, mount, cgroup, bridge or log link")
	return code
}

// dumpCluster prints what a failure needs: runs, pods, rigs, events.
func dumpCluster() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"get", "ar,pods,cronjobs,jobs,rig", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := cluster.Kubectl(ctx, nil, args...)
		fmt.Fprintf(os.Stderr, "---- kubectl %v\n%s%v\n", args, out, errOrEmpty(err))
	}
	fmt.Fprintf(os.Stderr, "---- component logs: %s/logs/\n", cluster.Dir)
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
