package version

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// clawfarm_build_info is one series, value 1, labelled with the stamped
// version and revision and the Go version.
func TestBuildInfo(t *testing.T) {
	defer func(v, r string) { Version, Revision = v, r }(Version, Revision)
	Version, Revision = "v0.3.0", "0123456789abcdef0123"
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(BuildInfo())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "clawfarm_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one clawfarm_build_info series", mfs)
	}
	m := mfs[0].GetMetric()[0]
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v0.3.0", "revision": "0123456789ab", "goversion": runtime.Version()}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s=%q, want %q (all: %v)", k, labels[k], v, labels)
		}
	}
}
