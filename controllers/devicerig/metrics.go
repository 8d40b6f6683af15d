package devicerig

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Every metric of the DeviceRig controller, declared once.
var (
	rigsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "clawfarm_rigs",
		Help: "DeviceRigs by phase.",
	}, []string{"phase"})
	// probeFailures names the rig, so an alert can say which phone's
	// server stopped answering; a deleted rig's series goes with it.
	probeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clawfarm_rig_probe_failures_total",
		Help: "Rig health probes that failed, by rig.",
	}, []string{"namespace", "rig"})
	// wakeUps counts the phone's wake-ups by what came of them: started (a
	// wake-up run was created) or failed (its creation was refused).
	wakeUps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clawfarm_rig_wakeups_total",
		Help: "Rig wake-ups that started a run (result=started) or could not (result=failed), by rig.",
	}, []string{"namespace", "rig", "result"})
	rigsByPhase = &phaseBook{phases: map[string]farmv1.RigPhase{}}
)

func init() {
	metrics.Registry.MustRegister(rigsGauge, probeFailures, wakeUps)
}

// phaseBook remembers each rig's last phase so the gauge counts rigs, not observations.
type phaseBook struct {
	mu     sync.Mutex
	phases map[string]farmv1.RigPhase
}

func (b *phaseBook) set(rig *farmv1.DeviceRig) {
	key := rig.Namespace + "/" + rig.Name
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.phases[key]; ok {
		if old == rig.Status.Phase {
			return
		}
		rigsGauge.WithLabelValues(string(old)).Dec()
	}
	b.phases[key] = rig.Status.Phase
	rigsGauge.WithLabelValues(string(rig.Status.Phase)).Inc()
}

// forget drops a deleted rig (namespace/name) from the gauge and its probe
// failures' series.
func (b *phaseBook) forget(key string) {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		probeFailures.DeleteLabelValues(ns, name)
		wakeUps.DeletePartialMatch(map[string]string{"namespace": ns, "rig": name})
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.phases[key]; ok {
		rigsGauge.WithLabelValues(string(old)).Dec()
		delete(b.phases, key)
	}
}
