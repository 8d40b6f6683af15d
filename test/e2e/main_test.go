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
	"testing"

	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// cluster is the suite's dev cluster.
var cluster *devcluster.Cluster

func TestMain(m *testing.M) {
	mgr := devcluster.ManagerChart
	if os.Getenv("E2E_MANAGER") == string(devcluster.ManagerHost) {
		mgr = devcluster.ManagerHost
	}
	var images *imageWatch
	os.Exit(devcluster.Suite{
		Name: "e2e", Dir: ".e2e", PortEnv: "E2E_BASE_PORT", BasePort: 27400,
		Config: devcluster.Config{
			Rigs: rigCount, Manager: mgr, RigsimArgs: []string{"--reply-after=30s"},
			// The rignode tests kill and pause their rig's node agent: on nodes of
			// their own, the other tests' sessions run on meanwhile.
			OwnHosts:    []int{rigHostKill, rigHostPause},
			KubeletRigs: kubeletRigs,
			// The manager (chart mode) and the trace server run as containers
			// on a kubelet node of their own, as on a farm's own nodes.
			KubeletSystem: true,
		},
		Started: func(ctx context.Context, c *devcluster.Cluster) {
			cluster = c
			images = watchImages(ctx)
		},
		Passed: func(context.Context) error {
			if err := images.check(); err != nil {
				return fmt.Errorf("every operator pod runs an image from the dev cluster's registry: %w", err)
			}
			fmt.Fprintln(os.Stderr, "e2e: every operator pod ran from the registry:", images.summary(nodeRuntimes()))
			return nil
		},
		DumpKinds: "ar,pods,cronjobs,jobs,rig",
	}.Run(m))
}
