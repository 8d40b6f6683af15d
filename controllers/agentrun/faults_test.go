package agentrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// A configuration error ends the run within the grace (the suite's is 1 s,
// the default 30 s), with the kubelet's own message, and gives the phone back
// — it does not sit out the startup timeout and the free retries.
func TestMissingSecretFailsTheRunFast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ending fakekubelet.Ending
		want   string
	}{
		{"missing Secret", fakekubelet.MissingSecret("model-key"), `secret "model-key" not found`},
		{"image not found", fakekubelet.ImageNotFound("registry.example/loop:v9", time.Second), "not found"},
		{"invalid image name", fakekubelet.InvalidImageName("loop:@@"), "invalid reference format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has a namespace of its own
			ns := namespace(t)
			makeRig(t, ns, "rig", nil)
			scripts.set(ns, "cfg", byPod(nil, tc.ending))
			create(t, newRun(ns, "cfg", "rig"))
			run := waitPhase(t, ns, "cfg", farmv1.RunFailed)
			c := condition(run, farmv1.ConditionSucceeded)
			if c.Reason != farmv1.ReasonInvalidConfig || !strings.Contains(c.Message, tc.want) {
				t.Fatalf("Succeeded %+v: want InvalidConfig with the kubelet's message %q", c, tc.want)
			}
			if len(run.Status.Attempts) != 1 || run.Status.InfraRetries != 0 {
				t.Fatalf("attempts %+v, infra retries %d: a configuration error is not retried", run.Status.Attempts, run.Status.InfraRetries)
			}
			eventually(t, "the rig released and the pod gone", func() bool {
				return leaseHolder(t, ns, "rig") == "" && len(podsOf(t, ns, "cfg")) == 0
			})
		})
	}
}

// A user force-deletes a running attempt's pod while its node is cut off:
// the pod object stays (the outcome is not recorded yet), the attempt counts
// as alive, and no retry starts on the phone until the node is back and its
// kubelet has ended the old process. The kubelet's ledger of real processes
// shows no two on the rig at once.
func TestForceDeletedPodOnAPartitionedNodeHoldsThePhone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	rig := makeRig(t, ns, "rig", nil)
	scripts.set(ns, "cut", byPod(map[string]fakekubelet.Ending{"cut-a1": {Hang: true}}, ends(contract.Done, true, "ok", 100*time.Millisecond)))
	create(t, newRun(ns, "cut", "rig"))
	eventually(t, "cut-a1 running", func() bool {
		p := podsOf(t, ns, "cut")
		return len(p) == 1 && p[0].Status.Phase == corev1.PodRunning
	})
	if err := kubelet.PartitionNode(ctx, rig.Spec.NodeName, 0); err != nil {
		t.Fatal(err)
	}
	pod := podsOf(t, ns, "cut")[0]
	if err := k8s.Delete(ctx, &pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // past the suite's startup timeout and node-lost grace
	run := getRun(t, ns, "cut")
	if len(run.Status.Attempts) != 0 || len(podsOf(t, ns, "cut")) != 1 || leaseHolder(t, ns, "rig") != "cut" {
		t.Fatalf("with its node cut off, the deleted attempt was given up: attempts %+v, pods %d, lease %q",
			run.Status.Attempts, len(podsOf(t, ns, "cut")), leaseHolder(t, ns, "rig"))
	}
	if err := kubelet.HealNode(ctx, rig.Spec.NodeName); err != nil {
		t.Fatal(err)
	}
	done := waitPhase(t, ns, "cut", farmv1.RunSucceeded)
	if a := done.Status.Attempts; len(a) != 2 || a[0].Outcome != farmv1.OutcomeInfrastructure || a[1].Pod != "cut-a1-r1" {
		t.Fatalf("attempts %+v: want cut-a1 a free retry, then cut-a1-r1", a)
	}
	ledger := kubelet.Ledger()[ns+"/rig"]
	for i := 1; i < len(ledger); i++ {
		if prev := ledger[i-1]; prev.End.IsZero() || ledger[i].Start.Before(prev.End) {
			t.Fatalf("%s started at %s while %s ran (ended %s)", ledger[i].Pod, ledger[i].Start, prev.Pod, prev.End)
		}
	}
	if v := kubelet.Violations(); len(v) != 0 {
		t.Fatalf("two processes on one rig: %v", v)
	}
}
