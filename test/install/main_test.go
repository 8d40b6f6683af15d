//go:build e2e

// Package install runs docs/install.md as written: on a dev cluster that
// starts with no operator (internal/dev/devcluster, ManagerNone), it builds
// and pushes a release to the cluster's registry, installs the pushed chart
// with helm, runs the sample to DONE, upgrades to a second release and
// uninstalls, each with the page's own commands. The page's last section
// says what the test changes in them and why.
//
//	make e2e      (go test -tags e2e ./test/e2e/ ./test/install/)
//
// INSTALL_BASE_PORT moves the cluster's ports (default 27600), E2E_KEEP=1
// leaves the cluster up afterwards, E2E_BUILD=0 uses bin/ as it is.
package install

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

// runNamespace is the page's run namespace.
const runNamespace = "farm"

// cluster is the test's dev cluster, without the operator until the page
// installs it.
var cluster *devcluster.Cluster

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := devcluster.FindRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		return 1
	}
	base := 27600
	if s := os.Getenv("INSTALL_BASE_PORT"); s != "" {
		if base, err = strconv.Atoi(s); err != nil {
			fmt.Fprintf(os.Stderr, "install: INSTALL_BASE_PORT=%q: %v\n", s, err)
			return 2
		}
	}
	dir := filepath.Join(root, ".e2e-install")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	begin := time.Now()
	cluster, err = devcluster.Up(ctx, devcluster.Config{
		Root: root, Dir: dir, Rigs: 2, BasePort: base, Manager: devcluster.ManagerNone,
		Namespace: runNamespace, Build: os.Getenv("E2E_BUILD") != "0", K8sDir: os.Getenv("KUBEBUILDER_ASSETS"),
		// The manager and the trace server run as containers pulled from
		// the registry by a real kubelet, as on a farm's own nodes.
		KubeletSystem: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "install: dev cluster:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "install: dev cluster up in %.0fs (%s)\n", time.Since(begin).Seconds(), dir)
	done := make(chan int, 1)
	go func() { done <- m.Run() }()
	var code int
	select {
	case code = <-done:
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "install: interrupted; stopping the dev cluster")
		code = 1
	}
	if code != 0 {
		dump()
	}
	if os.Getenv("E2E_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "install: leaving the cluster up: export KUBECONFIG=%s; stop it with go run ./cmd/devcluster down --dir %s\n", cluster.Kubeconfig, dir)
		return code
	}
	cluster.Down()
	if left := devcluster.KubeletLeftovers(dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "--- FAIL: the stopped kubelet nodes left %s\n", strings.Join(left, "; "))
		return 1
	}
	return code
}

// dump prints what a failure needs: what is installed, the runs, pods and events.
func dump() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"get", "crd,ar,rig,pods,deploy", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := cluster.Kubectl(ctx, nil, args...)
		fmt.Fprintf(os.Stderr, "---- kubectl %v\n%s%v\n", args, out, err)
	}
	fmt.Fprintf(os.Stderr, "---- component logs: %s/logs/\n", cluster.Dir)
}
