package main

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// --shard narrows the cache to the shard's runs and rigs and to what the
// operator made for them (which carries the run's pool), keeping the
// per-kind filters; without it the cache is today's.
func TestShardCache(t *testing.T) {
	f := newManagerFlags()
	if err := f.parse([]string{"--shard=" + farmv1.LabelPool + " in (a,b)", "--shard-name=ab"}); err != nil {
		t.Fatal(err)
	}
	o := f.cacheOptions()
	pool := func(p string, set labels.Set) labels.Set {
		set = labels.Merge(set, nil)
		if p != "" {
			set[farmv1.LabelPool] = p
		}
		return set
	}
	mine := map[string]labels.Set{
		"pod":       {farmv1.LabelRun: "r", farmv1.LabelKind: "attempt"},
		"lease":     {farmv1.LabelRig: "rig", farmv1.LabelRun: "r"},
		"cronjob":   {farmv1.LabelKind: farmv1.KindFollowUp},
		"agentrun":  {},
		"devicerig": {},
	}
	seen := 0
	for obj, by := range o.ByObject {
		var kind string
		switch obj.(type) {
		case *corev1.Pod:
			kind = "pod"
		case *coordinationv1.Lease:
			kind = "lease"
		case *batchv1.CronJob:
			kind = "cronjob"
		case *farmv1.AgentRun:
			kind = "agentrun"
		case *farmv1.DeviceRig:
			kind = "devicerig"
		default:
			t.Errorf("unexpected kind %T in the cache options", obj)
			continue
		}
		seen++
		for _, p := range []string{"a", "b"} {
			if !by.Label.Matches(pool(p, mine[kind])) {
				t.Errorf("%s cache selector %v does not match the shard's pool %s", kind, by.Label, p)
			}
		}
		for _, p := range []string{"c", ""} {
			if by.Label.Matches(pool(p, mine[kind])) {
				t.Errorf("%s cache selector %v matches pool %q, another shard's", kind, by.Label, p)
			}
		}
		if kind != "agentrun" && kind != "devicerig" && by.Label.Matches(labels.Set{farmv1.LabelPool: "a", "app": "other"}) {
			t.Errorf("%s cache selector %v: want the manager's own %ss only", kind, by.Label, kind)
		}
	}
	if seen != 5 {
		t.Errorf("%d selected kinds, want pods, Leases, CronJobs, AgentRuns and DeviceRigs", seen)
	}
	if got := f.leaderElectionID(); got != "clawfarm-manager-ab.farm.clawfarm.dev" {
		t.Errorf("leader election id %q", got)
	}

	none := newManagerFlags()
	if err := none.parse(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(none.cacheOptions().ByObject); n != 3 {
		t.Errorf("without --shard: %d selected kinds, want 3 (today's)", n)
	}
	if got := none.leaderElectionID(); got != "clawfarm-manager.farm.clawfarm.dev" {
		t.Errorf("without --shard: leader election id %q, want today's", got)
	}
}

// Each shard elects its own leader: two shards never share a Lease name,
// and a shard without a name gets one derived from its selector.
func TestShardLeaderElectionIDs(t *testing.T) {
	id := func(args ...string) string {
		t.Helper()
		f := newManagerFlags()
		if err := f.parse(args); err != nil {
			t.Fatal(err)
		}
		return f.leaderElectionID()
	}
	a, b := id("--shard="+farmv1.LabelPool+"=a"), id("--shard="+farmv1.LabelPool+" in (b,c)")
	if a == b || !strings.HasPrefix(a, "clawfarm-manager-shard-") {
		t.Errorf("derived names %q and %q: want two distinct shard names", a, b)
	}
	if again := id("--shard=" + farmv1.LabelPool + " in (c, b)"); again != b {
		t.Errorf("the same shard written differently: %q, want %q", again, b)
	}
	if ns := id("--watch-namespaces=team-a", "--shard-name=team-a"); ns != "clawfarm-manager-team-a.farm.clawfarm.dev" {
		t.Errorf("a shard by namespace: leader election id %q", ns)
	}
}

func TestShardFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard=" + farmv1.LabelPool + " in (a"}, "invalid value"},
		{[]string{"--shard=team=a"}, "a shard selects by " + farmv1.LabelPool + " only"},
		{[]string{"--shard=" + farmv1.LabelPool + "=a,team=x"}, "requirement \"team=x\""},
		{[]string{"--shard=" + farmv1.LabelPool + "=a", "--shard-name=A_b"}, "want a DNS label"},
	} {
		f := newManagerFlags()
		f.fs.SetOutput(new(strings.Builder))
		err := f.parse(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}
