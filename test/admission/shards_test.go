package admission_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// installShardPolicies creates the policies of config/admission/shards/
// (the chart's, for shards a: [a] and b: [b, c]), their bindings narrowed
// to ns so that the other tests' runs and rigs, which carry no pool, are
// left alone; they are deleted when the test ends.
func installShardPolicies(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	files, err := filepath.Glob("../../config/admission/shards/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("config/admission/shards holds no policies (%v)", err)
	}
	for _, f := range files {
		objs, err := readObjects(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
				sel := map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}
				if err := unstructured.SetNestedField(o.Object, sel, "spec", "matchResources", "namespaceSelector"); err != nil {
					t.Fatal(err)
				}
			}
			if err := k8s.Create(ctx, o); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, o.GetKind(), o.GetName(), err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
		}
	}
}

func inPool(o client.Object, pool string) {
	if pool != "" {
		o.SetLabels(map[string]string{farmv1.LabelPool: pool})
	}
}

func selecting(run *farmv1.AgentRun, labels map[string]string) *farmv1.AgentRun {
	run.Spec.RigRef, run.Spec.RigSelector = nil, &farmv1.RigSelector{MatchLabels: labels}
	return run
}

// A sharded farm (docs/sharding.md): a rig is in exactly one shard, and a run
// reaches only its own pool's rigs — it carries a served pool, keeps it, and
// a rigSelector pins it. Each refusal says what to change.
func TestShardPolicies(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	admin := "rick-" + ns
	bind(t, ns, "clawfarm-rig-admin", user(admin))
	rick := as(t, identity{user: admin})

	// Admitted before the farm was sharded: it can still be cancelled.
	before := newRun(ns, "before")
	allowed(t, "a run before sharding", alice.Create(ctx, before))

	installShardPolicies(t, ns)
	const noPool = "has no farm.clawfarm.dev/pool label"
	inForce(t, "clawfarm-agentrun-shard", noPool, func() error { return alice.Create(ctx, newRun(ns, "probe")) })
	inForce(t, "clawfarm-devicerig-shard", noPool, func() error { return rick.Create(ctx, newRig(ns, "probe", farmv1.StateVolume{})) })

	// Rigs.
	refused(t, "a rig without a pool", rick.Create(ctx, newRig(ns, "rig-none", farmv1.StateVolume{})),
		"DeviceRig rig-none has no farm.clawfarm.dev/pool label: label the rig farm.clawfarm.dev/pool with the pool of the shard that serves it, one of a, b, c")
	z := newRig(ns, "rig-z", farmv1.StateVolume{})
	inPool(z, "z")
	refused(t, "a rig in a pool no shard serves", rick.Create(ctx, z), "pool z of DeviceRig rig-z is served by no shard")
	a := newRig(ns, "rig-a", farmv1.StateVolume{})
	inPool(a, "a")
	allowed(t, "a rig in pool a", rick.Create(ctx, a))
	c := newRig(ns, "rig-c", farmv1.StateVolume{})
	inPool(c, "c")
	allowed(t, "a rig in pool c, shard b's", rick.Create(ctx, c))
	c.Labels = nil
	refused(t, "taking a rig out of every shard", rick.Update(ctx, c), "DeviceRig rig-c has no farm.clawfarm.dev/pool label")

	// Runs.
	refused(t, "a run without a pool", alice.Create(ctx, newRun(ns, "run-none")),
		"AgentRun run-none has no farm.clawfarm.dev/pool label: label the run farm.clawfarm.dev/pool with one of a, b, c")
	zr := newRun(ns, "run-z")
	inPool(zr, "z")
	refused(t, "a run in a pool no shard serves", alice.Create(ctx, zr), "pool z of AgentRun run-z is served by no shard")

	const crossShard = "could match rigs of another shard: add farm.clawfarm.dev/pool: a (the run's own pool label) to spec.rigSelector.matchLabels"
	for name, sel := range map[string]map[string]string{
		"sel-any":   nil,
		"sel-phone": {"phone": "iphone"},
		"sel-b":     {farmv1.LabelPool: "b"},
	} {
		r := selecting(newRun(ns, name), sel)
		inPool(r, "a")
		refused(t, "a run of pool a whose rigSelector is "+name, alice.Create(ctx, r), "spec.rigSelector of AgentRun "+name+" "+crossShard)
	}
	pinned := selecting(newRun(ns, "sel-pinned"), map[string]string{farmv1.LabelPool: "a", "phone": "iphone"})
	inPool(pinned, "a")
	allowed(t, "a run whose rigSelector pins its own pool", alice.Create(ctx, pinned))
	byName := newRun(ns, "by-name")
	inPool(byName, "b")
	allowed(t, "a rigRef run with a served pool", alice.Create(ctx, byName))

	byName.Labels[farmv1.LabelPool] = "c"
	refused(t, "moving a run to another pool", alice.Update(ctx, byName),
		"farm.clawfarm.dev/pool of AgentRun by-name cannot change (from b to c)")

	if err := alice.Get(ctx, client.ObjectKeyFromObject(before), before); err != nil {
		t.Fatal(err)
	}
	before.Spec.Cancel = true
	allowed(t, "cancelling a run admitted before sharding", alice.Update(ctx, before))

}

// On a sharded farm the runs `manager followup` makes, a WAIT follow-up and
// an agent job's run, pass the shard policy as the follow-up identity: they
// carry their parent's pool (and its pinned selector), so they stay in its
// shard.
func TestShardFollowUpsStayInTheirShard(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	bind(t, ns, "clawfarm-followup", saSubject(ns, followUpSA))
	fu := as(t, serviceAccount(ns, followUpSA, "parent-fu-29000000-x7k2p"))
	installShardPolicies(t, ns)
	inForce(t, "clawfarm-agentrun-shard", "has no farm.clawfarm.dev/pool label", func() error { return k8s.Create(ctx, newRun(ns, "probe")) })

	rig := newRig(ns, "b-rig", farmv1.StateVolume{})
	inPool(rig, "b")
	allowed(t, "a rig of pool b", k8s.Create(ctx, rig))
	parent := selecting(newRun(ns, "parent"), map[string]string{farmv1.LabelPool: "b"})
	inPool(parent, "b")
	allowed(t, "a run of pool b", k8s.Create(ctx, parent))
	parent.Status = farmv1.AgentRunStatus{Phase: farmv1.RunWaiting, Rig: "b-rig", Attempt: 1}
	if err := k8s.Status().Update(ctx, parent); err != nil {
		t.Fatal(err)
	}

	req, jobName := waitFollowUpRequest(t, parent)
	waitRun, err := followup.Create(ctx, fu, req, jobName)
	allowed(t, "manager followup creates a WAIT follow-up of a pool b run", err)

	job := contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water the plants"}
	cj, err := followup.AgentJobCronJob(parent, rig, job, time.Now(), followup.JobDefaults{Image: "manager:test"})
	if err != nil {
		t.Fatal(err)
	}
	if req, err = followup.RequestOf(cj); err != nil {
		t.Fatal(err)
	}
	jobRun, err := followup.Create(ctx, fu, req, cj.Name+"-29000000")
	allowed(t, "manager followup creates an agent job's run of a pool b rig", err)

	for _, name := range []string{waitRun, jobRun} {
		if name == "" {
			continue
		}
		var r farmv1.AgentRun
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Labels[farmv1.LabelPool] != "b" {
			t.Errorf("run %s made by manager followup is in pool %q, want its parent's, b", name, r.Labels[farmv1.LabelPool])
		}
	}
}
