package agentrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	t.Parallel()
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

func TestAgentJobsBecomeCronJobs(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "set up reminders", ExitReason: contract.ReasonEndTurn,
		Jobs: []contract.Job{
			{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants", Context: "balcony"},
			{Op: contract.JobCreate, ID: "bad", Kind: contract.JobOneTime, Schedule: "every day"},
		}}
	b, _ := m.Encode()
	scripts.set(ns, "jobs", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 0, Message: string(b)}))
	create(t, newRun(ns, "jobs", "rig"))
	run := waitPhase(t, ns, "jobs", farmv1.RunSucceeded)
	var cj batchv1.CronJob
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "water")}, &cj); err != nil {
		t.Fatal(err)
	}
	if cj.Spec.Schedule != "0 9 * * *" || cj.Labels[farmv1.LabelRig] != "rig" || cj.Labels[farmv1.LabelJobID] != "water" {
		t.Fatalf("agent job CronJob %+v %v", cj.Spec.Schedule, cj.Labels)
	}
	req, err := followup.DecodeRequest(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env[0].Value)
	if err != nil || !req.NameFromJob || req.Run.Spec.RigRef.Name != "rig" || !strings.Contains(req.Run.Spec.Trigger, "water plants") {
		t.Fatalf("agent job request %+v, %v", req, err)
	}
	var bad *farmv1.AgentJobStatus
	for i := range run.Status.Jobs {
		if run.Status.Jobs[i].ID == "bad" {
			bad = &run.Status.Jobs[i]
		}
	}
	if bad == nil || !strings.Contains(bad.Message, "not a 5-field cron") {
		t.Fatalf("a bad schedule must be reported, not materialised: %+v", run.Status.Jobs)
	}
	// finish_job(cancel) in a later run removes it.
	m2 := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Jobs: []contract.Job{{Op: contract.JobFinish, ID: "water", Status: "cancel"}}}
	b2, _ := m2.Encode()
	scripts.set(ns, "jobs2", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 0, Message: string(b2)}))
	create(t, newRun(ns, "jobs2", "rig"))
	waitPhase(t, ns, "jobs2", farmv1.RunSucceeded)
	eventually(t, "agent job CronJob removed", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "water")}, &cj)
		return apierrors.IsNotFound(err) || cj.DeletionTimestamp != nil
	})
}

// An agent's periodic job belongs to its rig and expires; a schedule that
// fires closer than 30 minutes is refused as the loop refuses it. A firing
// past the expiry, or after the rig is gone, makes no run, deletes its
// CronJob and says why.
func TestAgentJobsBelongToTheirRigAndExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	rig := makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Done, Retryable: true, Recap: "set up reminders", ExitReason: contract.ReasonEndTurn,
		Jobs: []contract.Job{
			{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"},
			{Op: contract.JobCreate, ID: "feed", Kind: contract.JobPeriodic, Schedule: "0 18 * * *", Description: "feed the cat"},
			{Op: contract.JobCreate, ID: "spam", Kind: contract.JobPeriodic, Schedule: "*/10 * * * *", Description: "check mail"},
		}}
	b, _ := m.Encode()
	scripts.set(ns, "plan", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 0, Message: string(b)}))
	create(t, newRun(ns, "plan", "rig"))
	run := waitPhase(t, ns, "plan", farmv1.RunSucceeded)

	water := followup.AgentJobCronJobName("rig", "water")
	var cj batchv1.CronJob
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: water}, &cj); err != nil {
		t.Fatal(err)
	}
	var ownedByRig bool
	for _, ref := range cj.OwnerReferences {
		ownedByRig = ownedByRig || (ref.Kind == "DeviceRig" && ref.UID == rig.UID)
	}
	if !ownedByRig {
		t.Fatalf("agent job CronJob owners %+v: deleting the rig would leave it behind", cj.OwnerReferences)
	}
	expires, err := time.Parse(time.RFC3339, cj.Annotations[farmv1.AnnotationExpires])
	if d := time.Until(expires); err != nil || d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Fatalf("expiry %q (%v): want 30 days from now", cj.Annotations[farmv1.AnnotationExpires], err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: followup.AgentJobCronJobName("rig", "spam")}, &batchv1.CronJob{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a periodic job every 10 minutes got a CronJob (%v)", err)
	}
	var spam string
	for _, j := range run.Status.Jobs {
		if j.ID == "spam" {
			spam = j.Message
		}
	}
	if !strings.Contains(spam, "at least 30m0s apart") {
		t.Fatalf("status.jobs must say why the job was refused: %+v", run.Status.Jobs)
	}

	req := cronJobRequest(t, ns, water, nil)
	req.Expires = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	if name, err := followup.Create(ctx, k8s, req, water+"-29412000"); err == nil || runExists(t, ns, name) {
		t.Fatalf("an expired job made run %s (%v)", name, err)
	}
	eventually(t, "the expired job's CronJob deleted", cronJobGone(t, ns, water))

	feed := followup.AgentJobCronJobName("rig", "feed")
	req = cronJobRequest(t, ns, feed, nil)
	if err := k8s.Delete(ctx, rig); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rig deleted", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rig"}, &farmv1.DeviceRig{}))
	})
	if name, err := followup.Create(ctx, k8s, req, feed+"-29412000"); err == nil || !strings.Contains(err.Error(), "is gone") || runExists(t, ns, name) {
		t.Fatalf("a job of a deleted rig: run %s, %v", name, err)
	}
	eventually(t, "the job of a deleted rig deleted", cronJobGone(t, ns, feed))
	if r := refusals(t, ns); r["DeviceRig"] != 1 || r["CronJob"] != 1 {
		t.Fatalf("refusal Events by object %v: want one on the rig (expired) and one on the CronJob (rig gone)", r)
	}
}
