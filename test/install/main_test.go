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
	"os"
	"testing"

	"github.com/clawfarm/clawfarm/internal/dev/devcluster"
)

// runNamespace is the page's run namespace.
const runNamespace = "farm"

// cluster is the test's dev cluster, without the operator until the page
// installs it.
var cluster *devcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(devcluster.Suite{
		Name: "install", Dir: ".e2e-install", PortEnv: "INSTALL_BASE_PORT", BasePort: 27600,
		Config: devcluster.Config{
			Rigs: 2, Manager: devcluster.ManagerNone, Namespace: runNamespace,
			// The manager and the trace server run as containers pulled from
			// the registry by a real kubelet, as on a farm's own nodes.
			KubeletSystem: true,
		},
		Started:   func(_ context.Context, c *devcluster.Cluster) { cluster = c },
		DumpKinds: "crd,ar,rig,pods,deploy",
	}.Run(m))
}
