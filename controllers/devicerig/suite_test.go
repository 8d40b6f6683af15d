package devicerig_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

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
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      agentrun.CacheOptions(nil, nil), // the manager's: only the objects the operator labels
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := (&devicerig.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("devicerig-controller"),
		Config: devicerig.Config{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: time.Second, MaxConcurrentReconciles: 4},
	}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	code := m.Run()
	cancel()
	<-done
	env.Stop()
	os.Exit(code)
}
