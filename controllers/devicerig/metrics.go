package devicerig

import (
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
	probeFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "clawfarm_rig_probe_failures_total",
		Help: "Rig health probes that failed.",
	})
	rigsByPhase = &phaseBook{phases: map[string]farmv1.RigPhase{}}
)

func init() {
	metrics.Registry.MustRegister(rigsGauge, probeFailures)
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

// forget drops a deleted rig from the gauge.
func (b *phaseBook) forget(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.phases[key]; ok {
		rigsGauge.WithLabelValues(string(old)).Dec()
		delete(b.phases, key)
	}
}
