package attempt

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// An attempt pod carries its run's pool, so a sharded manager's cache holds
// it (docs/sharding.md).
func TestAttemptPodCarriesTheRunsPool(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", Labels: map[string]string{farmv1.LabelPool: "b"}}}
	if got := podSpecFor(run, Defaults{}).Labels[farmv1.LabelPool]; got != "b" {
		t.Errorf("pod pool %q, want b", got)
	}
	run.Labels = nil
	if _, ok := podSpecFor(run, Defaults{}).Labels[farmv1.LabelPool]; ok {
		t.Error("a run with no pool gave its pod one")
	}
}
