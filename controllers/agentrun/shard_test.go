package agentrun

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

func inPool(name, pool string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: "ns", Name: name}
	if pool != "" {
		m.Labels = map[string]string{farmv1.LabelPool: pool}
	}
	return m
}

// A sharded manager lets a run use only a rig of its own pool, and never
// hands a rig straight to a run of another pool (that run then meets
// candidates, which fails it InvalidConfig). Without --shard there are no
// pools.
func TestPoolsOfAShardedManager(t *testing.T) {
	t.Parallel()
	shard, err := ParseShard(farmv1.LabelPool + " in (b,c)")
	if err != nil {
		t.Fatal(err)
	}
	rigC := &farmv1.DeviceRig{ObjectMeta: inPool("c-rig", "c")}
	runB := &farmv1.AgentRun{ObjectMeta: inPool("b-run", "b")}
	runC := &farmv1.AgentRun{ObjectMeta: inPool("c-run", "c")}

	sharded := &Reconciler{Config: Config{Shard: shard}}
	if why := sharded.otherPool(runB, rigC); !strings.Contains(why, "rig c-rig is in pool c but run b-run is in pool b") {
		t.Errorf("a run of pool b on a rig of pool c: %q", why)
	}
	if why := sharded.otherPool(runB, &farmv1.DeviceRig{ObjectMeta: inPool("none", "")}); !strings.Contains(why, "rig none is in no pool") {
		t.Errorf("a rig without a pool: %q", why)
	}
	if why := sharded.otherPool(runC, rigC); why != "" {
		t.Errorf("a run of the rig's own pool: %q", why)
	}
	w := world{held: "c-rig", rig: rigC}
	if sharded.mayHandTo(runC, w, runB) || !sharded.mayHandTo(runC, w, runC) {
		t.Errorf("hand c-rig to b-run: %v, to another run of pool c: %v; want false, true", sharded.mayHandTo(runC, w, runB), sharded.mayHandTo(runC, w, runC))
	}
	w.rig = nil // the rig deleted meanwhile: the holder's pool stands for it
	if sharded.mayHandTo(runC, w, runB) || !sharded.mayHandTo(runC, w, runC) {
		t.Error("without the rig, the holder's pool must decide")
	}

	for _, r := range []*Reconciler{{}, {Config: Config{Shard: labels.NewSelector()}}} {
		if why := r.otherPool(runB, rigC); why != "" {
			t.Errorf("unsharded: %q", why)
		}
		if !r.mayHandTo(runC, world{held: "c-rig", rig: rigC}, runB) {
			t.Error("unsharded: a rig passes to whichever run is next")
		}
	}
}
