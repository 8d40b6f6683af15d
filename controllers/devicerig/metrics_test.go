package devicerig

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The rigs-by-phase gauge counts rigs, not observations: a rig seen again in
// the same phase counts once, a phase change moves it, and a deleted rig
// leaves the gauge.
func TestPhaseBookCountsRigs(t *testing.T) {
	book := &phaseBook{phases: map[string]farmv1.RigPhase{}}
	gauge := func(p farmv1.RigPhase) float64 { return testutil.ToFloat64(rigsGauge.WithLabelValues(string(p))) }
	ready0, inUse0, offline0 := gauge(farmv1.RigReady), gauge(farmv1.RigInUse), gauge(farmv1.RigOffline)
	rig := func(name string, p farmv1.RigPhase) *farmv1.DeviceRig {
		return &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "metrics-test", Name: name}, Status: farmv1.DeviceRigStatus{Phase: p}}
	}
	book.set(rig("a", farmv1.RigReady))
	book.set(rig("a", farmv1.RigReady))
	book.set(rig("b", farmv1.RigReady))
	if got := gauge(farmv1.RigReady) - ready0; got != 2 {
		t.Fatalf("Ready +%v, want +2 (two rigs, one seen twice)", got)
	}
	book.set(rig("a", farmv1.RigInUse))
	if r, u := gauge(farmv1.RigReady)-ready0, gauge(farmv1.RigInUse)-inUse0; r != 1 || u != 1 {
		t.Fatalf("after a phase change: Ready +%v, InUse +%v; want +1, +1", r, u)
	}
	book.set(rig("b", farmv1.RigOffline))
	book.forget("metrics-test/b")
	book.forget("metrics-test/never-seen")
	if r, o := gauge(farmv1.RigReady)-ready0, gauge(farmv1.RigOffline)-offline0; r != 0 || o != 0 {
		t.Fatalf("after deleting b: Ready +%v, Offline +%v; want 0, 0", r, o)
	}
	book.forget("metrics-test/a")
	if u := gauge(farmv1.RigInUse) - inUse0; u != 0 {
		t.Fatalf("after deleting a: InUse +%v, want 0", u)
	}
}

// A rig's probe failures are its own series, and a deleted rig's series
// leaves the registry with it.
func TestProbeFailuresByRig(t *testing.T) {
	book := &phaseBook{phases: map[string]farmv1.RigPhase{}}
	probeFailures.WithLabelValues("metrics-test", "c").Inc()
	probeFailures.WithLabelValues("metrics-test", "c").Inc()
	probeFailures.WithLabelValues("metrics-test", "d").Inc()
	if c, d := testutil.ToFloat64(probeFailures.WithLabelValues("metrics-test", "c")), testutil.ToFloat64(probeFailures.WithLabelValues("metrics-test", "d")); c != 2 || d != 1 {
		t.Fatalf("failures c=%v d=%v, want 2 and 1", c, d)
	}
	book.forget("metrics-test/c")
	if got := seriesOf(t, "metrics-test"); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("series after deleting rig c: %v, want [d]", got)
	}
	book.forget("metrics-test/d")
	if got := seriesOf(t, "metrics-test"); len(got) != 0 {
		t.Fatalf("series after deleting both rigs: %v, want none", got)
	}
}

// seriesOf lists the rigs of namespace ns that have a probe-failures series
// (the package's envtest suite adds its own rigs' series in other namespaces).
func seriesOf(t *testing.T, ns string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(probeFailures)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var rigs []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == ns {
				rigs = append(rigs, l["rig"])
			}
		}
	}
	slices.Sort(rigs)
	return rigs
}
