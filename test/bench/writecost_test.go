//go:build bench

package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// TestBenchWriteCosts measures what one write of each kind a run or a Job
// causes costs the API server, alone on an idle one: its CPU over n writes
// of the kind, 32 at a time, divided by n (`make bench-writes`). The
// objects are the ones bench-operator writes: its AgentRuns and their
// outcome, its rigs' InUse, its Indexed Jobs and their status, the rig
// Leases, the Events. Summed over a run's writes, they say how far below
// the Job controller's API-server CPU a run can go while its state lives in
// custom resources (docs/benchmarks.md, "What a write costs the API server").
func TestBenchWriteCosts(t *testing.T) {
	const n, parallel = 1000, 32
	ctx := context.Background()
	a := startAPIServer(t, 1000)
	cfg := rest.CopyConfig(a.cfg)
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{Scheme: a.scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := "costs"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}))
	rigs := make([]*farmv1.DeviceRig, n)
	for i := range n {
		rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("rig-%04d", i)},
			Spec: farmv1.DeviceRigSpec{NodeName: "node-0", Endpoint: farmv1.RigEndpoint{URL: fmt.Sprintf("http://127.0.0.1:1/%d", i)}}}
		must(t, c.Create(ctx, rig))
		now := metav1.Now()
		rig.Status = farmv1.DeviceRigStatus{Phase: farmv1.RigReady, ObservedGeneration: 1, LastProbeTime: &now}
		for _, typ := range []string{farmv1.ConditionReady, "NodeReady", "EndpointReachable", "Calibrated"} {
			rig.Status.Conditions = append(rig.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue,
				ObservedGeneration: 1, LastTransitionTime: now, Reason: typ, Message: "node ready, endpoint reachable, rig healthy"})
		}
		must(t, c.Status().Update(ctx, rig))
		rigs[i] = rig
	}
	time.Sleep(2 * time.Second) // let the API server settle after the setup

	type row struct {
		what string
		ms   float64
	}
	var rows []row
	measure := func(what string, write func(i int) error) {
		t.Helper()
		idle := cpuSeconds(a.pid)
		time.Sleep(time.Second)
		background := cpuSeconds(a.pid) - idle // the server's own work in a second, taken off below
		before, start := cpuSeconds(a.pid), time.Now()
		var wg sync.WaitGroup
		next := make(chan int)
		errs := make(chan error, n)
		for range parallel {
			wg.Go(func() {
				for i := range next {
					if err := write(i); err != nil {
						errs <- err
					}
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		time.Sleep(500 * time.Millisecond) // the watch cache's decoding of the last events
		took := time.Since(start).Seconds()
		cpu := cpuSeconds(a.pid) - before - background*took
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", what, err)
		}
		rows = append(rows, row{what, cpu / n * 1000})
	}
	// Each write sends the object as the previous one returned it, as a
	// controller does from its cache: no GET is measured.
	runs := make([]*farmv1.AgentRun, n)
	measure("create an AgentRun", func(i int) error {
		runs[i] = &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("run-%04d", i)},
			Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: fmt.Sprintf("rig-%04d", i)}, Trigger: "bench",
				Model: farmv1.ModelSpec{Provider: "openai", Name: "m"}}}
		return c.Create(ctx, runs[i])
	})
	outcome := func(r *farmv1.AgentRun, recap string) {
		now := metav1.Now()
		exit := int32(0)
		r.Status = farmv1.AgentRunStatus{ObservedGeneration: 1, Phase: farmv1.RunSucceeded, Rig: r.Spec.RigRef.Name, Attempt: 1,
			Sentinel: "DONE", Recap: recap, ExitReason: "end_turn", StartTime: &now, CompletionTime: &now,
			Attempts: []farmv1.AttemptRecord{{Attempt: 1, Pod: r.Name + "-a1", StartTime: &now, FinishTime: &now, Sentinel: "DONE",
				ExitCode: &exit, ExitReason: "end_turn", Outcome: "Done", Counted: true, Message: "DONE (end_turn, exit 0): " + recap}},
			Conditions: []metav1.Condition{
				{Type: farmv1.ConditionSucceeded, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: now, Reason: "Done", Message: "the agent ended the session with DONE"},
				{Type: farmv1.ConditionRigLeased, Status: metav1.ConditionFalse, ObservedGeneration: 1, LastTransitionTime: now, Reason: "Released", Message: "rig " + r.Spec.RigRef.Name + " released"},
				{Type: farmv1.ConditionFinished, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: now, Reason: "Succeeded", Message: "the run ended Succeeded (Done): the agent ended the session with DONE"},
			}}
	}
	measure("an AgentRun's first status write (its outcome)", func(i int) error {
		outcome(runs[i], "done")
		return c.Status().Update(ctx, runs[i])
	})
	measure("a later status write of a started AgentRun", func(i int) error {
		outcome(runs[i], "done again")
		return c.Status().Update(ctx, runs[i])
	})
	measure("the same, as a JSON merge patch of the status", func(i int) error {
		before := runs[i].DeepCopy()
		outcome(runs[i], "done a third time")
		return c.Status().Patch(ctx, runs[i], client.MergeFrom(before))
	})
	measure("a DeviceRig status write (Ready to InUse)", func(i int) error {
		rigs[i].Status.Phase = farmv1.RigInUse
		return c.Status().Update(ctx, rigs[i])
	})
	jobs := make([]*batchv1.Job, n)
	measure("create an Indexed Job", func(i int) error {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("job-%04d", i)}}
		jobs[i] = j
		j.Spec = batchv1.JobSpec{Completions: ptr.To[int32](5), Parallelism: ptr.To[int32](1),
			CompletionMode: ptr.To(batchv1.IndexedCompletion), BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{jobLabel: "true", farmv1.LabelKind: "attempt", farmv1.LabelRig: "rig"}},
				Spec: corev1.PodSpec{NodeName: "node-0", RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "agent", Image: "loop"}}}}}
		return c.Create(ctx, j)
	})
	measure("a Job status write", func(i int) error {
		now := metav1.Now()
		j := jobs[i]
		j.Status.StartTime, j.Status.Active, j.Status.Ready = &now, 1, ptr.To[int32](0)
		j.Status.Terminating, j.Status.UncountedTerminatedPods = ptr.To[int32](0), &batchv1.UncountedTerminatedPods{}
		return c.Status().Update(ctx, j)
	})
	leases := make([]*coordinationv1.Lease, n)
	measure("create a Lease", func(i int) error {
		leases[i] = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("lease-%04d", i)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("run-a")}}
		return c.Create(ctx, leases[i])
	})
	measure("hand a Lease over (update)", func(i int) error {
		leases[i].Spec.HolderIdentity = ptr.To("run-b")
		return c.Update(ctx, leases[i])
	})
	measure("create an Event (events.k8s.io)", func(i int) error {
		now := metav1.NowMicro()
		return c.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("run-%04d.%d", i, now.UnixNano())},
			EventTime: now, ReportingController: "farm.clawfarm.dev/agentrun", ReportingInstance: "manager", Action: "Finished",
			Reason: "Succeeded", Regarding: corev1.ObjectReference{Kind: "AgentRun", Namespace: ns, Name: fmt.Sprintf("run-%04d", i)},
			Note: "the agent ended the session with DONE", Type: corev1.EventTypeNormal})
	})

	fmt.Printf("\nclawfarm bench-writes: what one write costs an idle kube-apiserver, %d of each, %d at a time (no reads)\n", n, parallel)
	for _, r := range rows {
		fmt.Printf("  %-52s %6.2f ms CPU\n", r.what, r.ms)
	}
}
