package agentrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// An agent job's CronJob fires the way the CronJob controller runs it: a Job
// named <cronjob>-<scheduled minute>, whose pod runs `manager followup` with
// that name from the downward API. A periodic job makes one run per firing; a
// one-time job makes its run and deletes its own CronJob; a retried Job
// creates nothing twice.
func TestAgentJobFiringsMakeRuns(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "set up reminders", ExitReason: contract.ReasonEndTurn,
		Jobs: []contract.Job{
			{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"},
			{Op: contract.JobCreate, ID: "call-mum", Kind: contract.JobOneTime, Schedule: "30 14 1 12 *", Description: "call mum"},
		}}
	b, _ := m.Encode()
	scripts.set(ns, "plan", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 0, Message: string(b)}))
	create(t, newRun(ns, "plan", "rig"))
	waitPhase(t, ns, "plan", farmv1.RunSucceeded)

	request := func(cronJob string) followup.Request {
		var cj batchv1.CronJob
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cronJob}, &cj); err != nil {
			t.Fatalf("CronJob %s: %v", cronJob, err)
		}
		env := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env
		var raw string
		var jobNameFromDownwardAPI bool
		for _, e := range env {
			switch e.Name {
			case followup.EnvRequest:
				raw = e.Value
			case followup.EnvJobName:
				jobNameFromDownwardAPI = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
					e.ValueFrom.FieldRef.FieldPath == "metadata.labels['batch.kubernetes.io/job-name']"
			}
		}
		if !jobNameFromDownwardAPI {
			t.Fatalf("CronJob %s does not pass its Job's name to the pod: %+v", cronJob, env)
		}
		req, err := followup.DecodeRequest(raw)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}

	periodic := followup.AgentJobCronJobName("rig", "water")
	req := request(periodic)
	var names []string
	for _, job := range []string{periodic + "-29412000", periodic + "-29412000", periodic + "-29413440"} {
		name, err := followup.Create(ctx, k8s, req, job)
		if err != nil {
			t.Fatalf("firing %s: %v", job, err)
		}
		names = append(names, name)
	}
	if names[0] != names[1] || names[0] == names[2] || !strings.HasSuffix(names[0], "-29412000") {
		t.Fatalf("periodic firings named %v: want one run per scheduled minute, the retried Job's run once", names)
	}
	for _, name := range []string{names[0], names[2]} {
		var run farmv1.AgentRun
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
			t.Fatalf("run %s: %v", name, err)
		}
		if run.Spec.RigRef == nil || run.Spec.RigRef.Name != "rig" || !strings.Contains(run.Spec.Trigger, "water plants") {
			t.Fatalf("run %s: rig %+v trigger %q", name, run.Spec.RigRef, run.Spec.Trigger)
		}
	}
	var cj batchv1.CronJob
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: periodic}, &cj); err != nil {
		t.Fatalf("a periodic job's CronJob must outlive its firings: %v", err)
	}

	oneTime := followup.AgentJobCronJobName("rig", "call-mum")
	req = request(oneTime)
	if req.DeleteCronJob != oneTime {
		t.Fatalf("one-time request deletes %q, want its CronJob %q", req.DeleteCronJob, oneTime)
	}
	name, err := followup.Create(ctx, k8s, req, oneTime+"-29413950")
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &farmv1.AgentRun{}); err != nil {
		t.Fatalf("one-time run %s: %v", name, err)
	}
	eventually(t, "one-time CronJob deleted", func() bool {
		err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: oneTime}, &cj)
		return apierrors.IsNotFound(err) || cj.DeletionTimestamp != nil
	})
	if _, err := followup.Create(ctx, k8s, req, oneTime+"-29413950"); err != nil {
		t.Fatalf("a retried one-time Job after its CronJob is gone: %v", err)
	}

	// A Job name without the minute cannot name the run: a clear error, nothing created.
	if _, err := followup.Create(ctx, k8s, request(periodic), "handmade-job"); err == nil || !strings.Contains(err.Error(), "downward API") {
		t.Fatalf("a Job name without the minute: %v", err)
	}
	for _, name := range names {
		scripts.set(ns, name, byPod(nil, ends(contract.Done, true, "watered", 50*time.Millisecond)))
	}
	waitPhase(t, ns, names[0], farmv1.RunSucceeded)
	waitPhase(t, ns, names[2], farmv1.RunSucceeded)
}

// A WAIT whose follow-up was taken from a one-time job the session created
// (followUp.job) makes one wake-up, not two: the WAIT follow-up carries it.
func TestWaitForAJobMakesOneFollowUp(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Wait, Retryable: true, Recap: "asked Ana; check at 14:30", ExitReason: contract.ReasonEndTurn,
		FollowUp: &contract.FollowUp{AfterMinutes: 30, Context: "read Ana's reply", Job: "check-reply"},
		Jobs: []contract.Job{
			{Op: contract.JobCreate, ID: "check-reply", Kind: contract.JobOneTime, Schedule: "30 14 1 12 *", Description: "read Ana's reply"},
			{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"},
		}}
	b, _ := m.Encode()
	scripts.set(ns, "ask", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 10, Message: string(b)}))
	create(t, newRun(ns, "ask", "rig"))
	run := waitPhase(t, ns, "ask", farmv1.RunWaiting)
	eventually(t, "the WAIT CronJob", func() bool {
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ask-fu"}, &batchv1.CronJob{}) == nil
	})
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "check-reply")}, &batchv1.CronJob{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the job the WAIT follow-up carries got its own CronJob too (err %v): two runs would wake the rig", err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "water")}, &batchv1.CronJob{}); err != nil {
		t.Fatalf("an unrelated periodic job must still get its CronJob: %v", err)
	}
	var carried *farmv1.AgentJobStatus
	for i := range run.Status.Jobs {
		if run.Status.Jobs[i].ID == "check-reply" {
			carried = &run.Status.Jobs[i]
		}
	}
	if carried == nil || carried.CronJob != "ask-fu" || !strings.Contains(carried.Message, "WAIT follow-up") {
		t.Fatalf("status.jobs must say the WAIT follow-up carries the job: %+v", run.Status.Jobs)
	}

	// With follow-ups disabled, nothing would carry it: the job gets its own CronJob.
	scripts.set(ns, "ask-alone", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 10, Message: string(b)}))
	alone := newRun(ns, "ask-alone", "rig")
	alone.Spec.FollowUp.MaxChain = ptr.To[int32](0) // an explicit 0 survives defaulting
	create(t, alone)
	waitRun(t, ns, "ask-alone", func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "check-reply")}, &batchv1.CronJob{}); err != nil {
		t.Fatalf("with follow-ups disabled the job must get its own CronJob: %v", err)
	}
}
