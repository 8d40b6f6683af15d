package agentrun_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/controllers/agentrun"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The metrics: counters move when runs finish, and the phase gauge reads the cache.
func TestMetricsCountRunsAndPhases(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	type sample struct {
		name   string
		labels []string
	}
	samples := []sample{
		{"clawfarm_agentruns_finished_total", []string{"phase", "Succeeded", "sentinel", "DONE"}},
		{"clawfarm_attempts_total", []string{"outcome", string(farmv1.OutcomeDone)}},
		{"clawfarm_queue_wait_seconds", nil}, // histograms: their sample counts
		{"clawfarm_time_to_pod_seconds", nil},
	}
	before := map[string]float64{}
	for _, m := range samples {
		before[m.name] = testenv.MetricValue(t, metrics.Registry, m.name, m.labels...)
	}
	scripts.set(ns, "counted", byPod(nil, ends(contract.Done, true, "ok", 50*time.Millisecond)))
	create(t, newRun(ns, "counted", "rig"))
	waitPhase(t, ns, "counted", farmv1.RunSucceeded)
	// The metrics are process-wide and other tests finish runs in parallel:
	// at least this one. They are counted once the status write has been
	// answered, which can be after this test sees the phase.
	for _, m := range samples {
		eventually(t, fmt.Sprintf("%s%v up by at least 1 from %v", m.name, m.labels, before[m.name]), func() bool {
			return testenv.MetricValue(t, metrics.Registry, m.name, m.labels...) >= before[m.name]+1
		})
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(agentrun.NewRunPhaseCollector(client.NewNamespacedClient(k8s, ns)))
	for phase, want := range map[string]float64{"Succeeded": 1, "Queued": 0, "Running": 0, "Failed": 0, "Pending": 0} {
		if got := testenv.MetricValue(t, reg, "clawfarm_agentruns", "phase", phase); got != want {
			t.Errorf("clawfarm_agentruns{phase=%q} = %v, want %v", phase, got, want)
		}
	}
	if got := testenv.MetricValue(t, reg, "clawfarm_rig_leases_held"); got != 1 && got != 0 {
		t.Errorf("clawfarm_rig_leases_held = %v with one run in the namespace", got)
	}
	// The run's RigLeased condition turns False when the rig is released,
	// which can be a reconcile after the one that recorded DONE (when the
	// cache did not show the run's Lease yet): the gauge follows it.
	eventually(t, "clawfarm_rig_leases_held back to 0", func() bool {
		return testenv.MetricValue(t, reg, "clawfarm_rig_leases_held") == 0
	})
}
