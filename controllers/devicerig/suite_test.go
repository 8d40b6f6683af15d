package devicerig_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/controllers/devicerig"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// env is the suite's API server; only the DeviceRig controller runs on it, so
// what a test sees in a rig's status is that controller's doing.
var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.MainNeeds(testenv.Assets)
	var err error
	if env, err = testenv.Start("../../config/crd/bases"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stop, err := env.RunManager(ctrl.Options{
		Cache: agentrun.CacheOptions(nil, nil), // the manager's: only the objects the operator labels
	}, func(mgr ctrl.Manager) error {
		return (&devicerig.Reconciler{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("devicerig-controller"),
			Config: devicerig.Config{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: time.Second, MaxConcurrentReconciles: 4},
		}).SetupWithManager(mgr)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	env.Stop()
	os.Exit(code)
}
