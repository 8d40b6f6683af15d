package followup

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

// requestOf decodes the request a follow-up CronJob's Job carries.
func requestOf(t *testing.T, cj *batchv1.CronJob) Request {
	t.Helper()
	for _, e := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env {
		if e.Name == EnvRequest {
			r, err := DecodeRequest(e.Value)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("CronJob %s carries no request", cj.Name)
	return Request{}
}

// What the operator makes for a run carries the run's pool, so a sharded
// manager caches it and the runs it makes land in the same shard
// (docs/sharding.md); a run with no pool gives none.
func TestFollowUpsCarryTheRunsPool(t *testing.T) {
	for _, pool := range []string{"a", ""} {
		parent := waitingParent("ask", "uid-ask")
		if pool != "" {
			parent.Labels = map[string]string{farmv1.LabelPool: pool, "team": "x"}
		}
		n, _ := NextOf(parent)
		child := ChildRun(parent, n, "t")
		cj, err := WaitCronJob(parent, child, time.Now().Add(time.Minute), JobDefaults{Image: "m"})
		if err != nil {
			t.Fatal(err)
		}
		job := contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *"}
		ajc, err := AgentJobCronJob(parent, testRig("rig-uid"), job, time.Now(), JobDefaults{})
		if err != nil {
			t.Fatal(err)
		}
		for what, l := range map[string]map[string]string{
			"the WAIT follow-up":          child.Labels,
			"its CronJob":                 cj.Labels,
			"the run its CronJob makes":   requestOf(t, cj).Run.Labels,
			"the agent job's CronJob":     ajc.Labels,
			"the run the agent job makes": requestOf(t, ajc).Run.Labels,
		} {
			got, ok := l[farmv1.LabelPool]
			if got != pool || ok != (pool != "") {
				t.Errorf("parent pool %q: %s has pool %q (%v)", pool, what, got, ok)
			}
			if _, ok := l["team"]; ok {
				t.Errorf("%s carries the parent's other labels: %v", what, l)
			}
		}
	}
}
