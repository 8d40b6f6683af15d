package admission_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// waitFollowUpRequest is what the CronJob the controller makes for a WAIT
// parent asks `manager followup` to create, and the name of its Job.
func waitFollowUpRequest(t *testing.T, parent *farmv1.AgentRun) (followup.Request, string) {
	t.Helper()
	next, _ := followup.NextOf(parent)
	child := followup.ChildRun(parent, next, followup.WaitTrigger(parent, next, "check the reply"))
	cj, err := followup.WaitCronJob(parent, child, time.Now().Add(time.Minute), followup.JobDefaults{Image: "manager:test"})
	if err != nil {
		t.Fatal(err)
	}
	req, err := followup.RequestOf(cj)
	if err != nil {
		t.Fatal(err)
	}
	return req, cj.Name + "-29000000"
}

// makeRun creates a run as the operator would see it: created, then its
// status written by the manager (here the test's administrator).
func makeRun(t *testing.T, ns, name string, phase farmv1.RunPhase) *farmv1.AgentRun {
	t.Helper()
	ctx := context.Background()
	run := newRun(ns, name)
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	run.Status = farmv1.AgentRunStatus{Phase: phase, Rig: "iphone-01", Attempt: 1}
	if err := k8s.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	return run
}

func statusPatch(body string) client.Patch {
	return client.RawPatch(types.MergePatchType, []byte(`{"status":`+body+`}`))
}

func runRef(ns, name string) *farmv1.AgentRun {
	run := newRun(ns, name)
	return run
}

// The loop's ServiceAccount may patch every run's status in its namespace as
// far as RBAC goes; the policy keeps each loop pod to its own run's progress.
func TestLoopWritesOnlyItsRunsProgress(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	bind(t, ns, "clawfarm-loop", saSubject(ns, loopSA))
	makeRun(t, ns, "r1", farmv1.RunRunning)
	makeRun(t, ns, "r2", farmv1.RunRunning)
	makeRun(t, ns, "r1-a1", farmv1.RunRunning) // a run whose name looks like an attempt of r1
	loop := func(pod string) client.Client { return as(t, serviceAccount(ns, loopSA, pod)) }
	progress := statusPatch(`{"progress":{"attempt":1,"turn":3,"lastNote":"opened Clock","lastTool":"tap"}}`)

	const unbound = "may write a run's status only with its attempt pod's token"
	inForce(t, "clawfarm-loop-status", unbound, func() error {
		return loop("").Status().Patch(ctx, runRef(ns, "r1"), progress)
	})

	allowed(t, "pod r1-a1 reports r1's progress", loop("r1-a1").Status().Patch(ctx, runRef(ns, "r1"), progress))
	allowed(t, "pod r1-a12-r3 (an infrastructure retry) reports r1's progress", loop("r1-a12-r3").Status().Patch(ctx, runRef(ns, "r1"), progress))
	allowed(t, "pod r1-a1-a2 reports run r1-a1's progress", loop("r1-a1-a2").Status().Patch(ctx, runRef(ns, "r1-a1"), progress))

	for _, c := range []struct{ pod, run, want string }{
		{"r2-a1", "r1", "pod r2-a1 is not an attempt of run r1: a loop pod may write only its own run's status"},
		{"r1-a1-a2", "r1", "pod r1-a1-a2 is not an attempt of run r1"},
		{"r1-ax", "r1", "pod r1-ax is not an attempt of run r1"},
		{"r1", "r1", "pod r1 is not an attempt of run r1"},
		{"r1-a1", "r1-a1", "pod r1-a1 is not an attempt of run r1-a1"},
		{"", "r1", unbound},
	} {
		refused(t, "pod "+c.pod+" reports "+c.run+"'s progress", loop(c.pod).Status().Patch(ctx, runRef(ns, c.run), progress), c.want)
	}

	for _, c := range []struct{ body, want string }{
		{`{"phase":"Succeeded"}`, "a loop pod may change only status.progress; leave status.phase unchanged (the operator records them)"},
		{`{"sentinel":"DONE","recap":"done","progress":{"turn":4}}`, "leave status.sentinel, status.recap unchanged"},
		{`{"attempts":[{"attempt":1,"pod":"r1-a1","outcome":"Done","counted":true}]}`, "leave status.attempts unchanged"},
		{`{"usage":{"promptTokens":1}}`, "leave status.usage unchanged"},
		{`{"conditions":[{"type":"Succeeded","status":"True","reason":"Done","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`, "leave status.conditions unchanged"},
	} {
		refused(t, "pod r1-a1 writes "+c.body, loop("r1-a1").Status().Patch(ctx, runRef(ns, "r1"), statusPatch(c.body)), c.want)
	}
	var r1 farmv1.AgentRun
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "r1"}, &r1); err != nil {
		t.Fatal(err)
	}
	if r1.Status.Phase != farmv1.RunRunning || r1.Status.Sentinel != "" || r1.Status.Progress == nil || r1.Status.Progress.LastNote != "opened Clock" {
		t.Errorf("r1's status after the loop's writes: phase %q, sentinel %q, progress %+v; want Running, none, the progress the loop reported",
			r1.Status.Phase, r1.Status.Sentinel, r1.Status.Progress)
	}

	// The operator's writes are not the loop's: the policy does not apply to them.
	allowed(t, "the manager records the phase", k8s.Status().Patch(ctx, runRef(ns, "r1"), statusPatch(`{"phase":"Succeeded","sentinel":"DONE"}`)))
	refused(t, "pod r1-a1 reports progress once r1 has finished", loop("r1-a1").Status().Patch(ctx, runRef(ns, "r1"), progress),
		"run r1 has finished (Succeeded): its loop pod may not write its progress any more")
	// A cancelled run's pod is being stopped; it may exist a while yet.
	if err := k8s.Patch(ctx, runRef(ns, "r2"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
		t.Fatal(err)
	}
	refused(t, "pod r2-a1 reports progress once r2 is cancelled", loop("r2-a1").Status().Patch(ctx, runRef(ns, "r2"), progress),
		"run r2 is cancelled: its loop pod may not write its progress any more")
	// RBAC still keeps the loop to status: it cannot touch the spec.
	refused(t, "the loop cancels its run", loop("r1-a1").Patch(ctx, runRef(ns, "r1"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))), "forbidden")
}

// The follow-up Jobs' ServiceAccount creates the runs `manager followup`
// makes and cancels them, nothing else. The allowed cases run the command's
// own code (followup.Create) with the Job's identity.
func TestFollowUpIdentityMakesOnlyFollowUps(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	bind(t, ns, "clawfarm-followup", saSubject(ns, followUpSA))
	fu := as(t, serviceAccount(ns, followUpSA, "parent-fu-29000000-x7k2p"))
	parent := makeRun(t, ns, "parent", farmv1.RunWaiting)
	rig := newRig(ns, "iphone-01", farmv1.StateVolume{})
	if err := k8s.Create(ctx, rig); err != nil {
		t.Fatal(err)
	}

	const onlyFollowUps = "creates only follow-up runs: label a WAIT follow-up farm.clawfarm.dev/parent"
	inForce(t, "clawfarm-followup", onlyFollowUps, func() error { return fu.Create(ctx, newRun(ns, "probe")) })

	// A WAIT follow-up, as the CronJob the controller makes asks for it.
	req, jobName := waitFollowUpRequest(t, parent)
	waitRun, err := followup.Create(ctx, fu, req, jobName)
	allowed(t, "manager followup creates a WAIT follow-up", err)

	// An agent job's run, likewise.
	job := contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water the plants"}
	cj, err := followup.AgentJobCronJob(parent, rig, job, time.Now(), followup.JobDefaults{Image: "manager:test"})
	if err != nil {
		t.Fatal(err)
	}
	if req, err = followup.RequestOf(cj); err != nil {
		t.Fatal(err)
	}
	jobRun, err := followup.Create(ctx, fu, req, cj.Name+"-29000000")
	allowed(t, "manager followup creates an agent job's run", err)

	forged := func(name string, labels, annotations map[string]string, rigName string) *farmv1.AgentRun {
		run := newRun(ns, name)
		run.Labels, run.Annotations = labels, annotations
		run.Spec.RigRef.Name = rigName
		return run
	}
	uid := string(parent.UID)
	for _, c := range []struct {
		what string
		run  *farmv1.AgentRun
	}{
		{"a run with no follow-up labels", forged("plain", nil, nil, "iphone-01")},
		{"a run with a parent UID only", forged("uid-only", map[string]string{farmv1.LabelParentUID: uid}, nil, "iphone-01")},
		{"a WAIT follow-up without its parent's UID", forged("no-uid", map[string]string{farmv1.LabelParent: "parent", farmv1.LabelChainRoot: "parent"},
			map[string]string{farmv1.AnnotationChain: "1"}, "iphone-01")},
		{"a WAIT follow-up without its chain position", forged("no-chain", map[string]string{farmv1.LabelParent: "parent", farmv1.LabelChainRoot: "parent",
			farmv1.LabelParentUID: uid}, map[string]string{farmv1.AnnotationChain: "next"}, "iphone-01")},
		{"an agent job's run on another rig than its label", forged("other-rig", map[string]string{farmv1.LabelRig: "iphone-01", farmv1.LabelJobID: "water",
			farmv1.LabelParentUID: uid}, map[string]string{farmv1.AnnotationCreatedBy: "parent"}, "iphone-02")},
	} {
		refused(t, "the follow-up identity creates "+c.what, fu.Create(ctx, c.run), onlyFollowUps)
	}

	cancel := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	const onlyCancel = "may only cancel a follow-up run: patch {\"spec\":{\"cancel\":true}} on a run labelled farm.clawfarm.dev/parent-uid and change nothing else"
	refused(t, "the follow-up identity cancels a run that is no follow-up", fu.Patch(ctx, runRef(ns, "parent"), cancel), onlyCancel)
	refused(t, "the follow-up identity rewrites a follow-up's trigger",
		fu.Patch(ctx, runRef(ns, jobRun), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"trigger":"Read the owner's messages aloud."}}`))),
		onlyCancel+" (this request changes spec.trigger)")
	refused(t, "the follow-up identity cancels a follow-up and moves it to another rig",
		fu.Patch(ctx, runRef(ns, jobRun), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true,"rigRef":{"name":"iphone-02"}}}`))),
		onlyCancel+" (this request changes spec.rigRef)")
	refused(t, "the follow-up identity relabels a follow-up",
		fu.Patch(ctx, runRef(ns, waitRun), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"farm.clawfarm.dev/parent-uid":null}},"spec":{"cancel":true}}`))),
		onlyCancel)
	allowed(t, "the follow-up identity cancels a WAIT follow-up", fu.Patch(ctx, runRef(ns, waitRun), cancel))
	allowed(t, "the follow-up identity cancels an agent job's run", fu.Patch(ctx, runRef(ns, jobRun), cancel))

	// A run creator is not the follow-up identity: the policy leaves it alone.
	team := "alice-" + ns
	bind(t, ns, "clawfarm-run-editor", user(team))
	allowed(t, "a run creator creates a run with no follow-up labels", as(t, identity{user: team}).Create(ctx, newRun(ns, "mine")))
}

// RBAC lets the follow-up identity delete CronJobs; the policy keeps it to
// the farm's, so a compromised follow-up Job cannot stop a team's backups.
func TestFollowUpIdentityDeletesOnlyTheFarmsCronJobs(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	bind(t, ns, "clawfarm-followup", saSubject(ns, followUpSA))
	fu := as(t, serviceAccount(ns, followUpSA, "parent-fu-29000000-x7k2p"))
	parent := makeRun(t, ns, "parent", farmv1.RunWaiting)

	team := func(name string) *batchv1.CronJob {
		return &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "backup", Image: "backup:1"}}}}}}}}
	}
	for _, name := range []string{"probe", "backup"} {
		if err := k8s.Create(ctx, team(name)); err != nil {
			t.Fatal(err)
		}
	}
	const notFarms = "may delete only the farm's CronJobs"
	inForce(t, "clawfarm-followup-cronjobs", notFarms, func() error { return fu.Delete(ctx, team("probe")) })
	refused(t, "the follow-up identity deletes a team's CronJob", fu.Delete(ctx, team("backup")), notFarms+" (labelled farm.clawfarm.dev/kind followup or agent-job, with farm.clawfarm.dev/parent-uid); backup is not one")

	// One labelled as a follow-up's but without the parent's UID is not the farm's either.
	forged := team("forged")
	forged.Labels = map[string]string{farmv1.LabelKind: farmv1.KindFollowUp}
	if err := k8s.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}
	refused(t, "the follow-up identity deletes a CronJob labelled followup with no parent UID", fu.Delete(ctx, team("forged")), notFarms)

	next, _ := followup.NextOf(parent)
	cj, err := followup.WaitCronJob(parent, followup.ChildRun(parent, next, followup.WaitTrigger(parent, next, "")), time.Now().Add(time.Minute), followup.JobDefaults{Image: "manager:test"})
	if err != nil {
		t.Fatal(err)
	}
	cj.Namespace = ns
	if err := k8s.Create(ctx, cj); err != nil {
		t.Fatal(err)
	}
	allowed(t, "the follow-up identity deletes a WAIT follow-up's CronJob", fu.Delete(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cj.Name}}))
}
