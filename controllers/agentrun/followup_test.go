package agentrun_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
	"github.com/clawfarm/clawfarm/internal/testing/fakekubelet"
)

// A WAIT whose follow-up was taken from a one-time job the session created
// (followUp.job) makes one wake-up, not two: the WAIT follow-up carries it.
func TestWaitForAJobMakesOneFollowUp(t *testing.T) {
	t.Parallel()
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

func TestWaitSchedulesAFollowUpCronJob(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	m := contract.TerminationMessage{Sentinel: contract.Wait, Retryable: true, Recap: "asked Ana for the code", ExitReason: contract.ReasonEndTurn,
		FollowUp: &contract.FollowUp{AfterMinutes: 20, Context: "read Ana's reply"}}
	b, _ := m.Encode()
	scripts.set(ns, "ask", byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 10, Message: string(b)}))
	create(t, newRun(ns, "ask", "rig"))
	run := waitPhase(t, ns, "ask", farmv1.RunWaiting)
	fu := run.Status.FollowUp
	if fu == nil || fu.Run != "ask-f1" || fu.Chain != 1 || fu.CronJob != "ask-fu" {
		t.Fatalf("followUp status %+v", fu)
	}
	finish := run.Status.Attempts[0].FinishTime.Time
	if d := fu.FireTime.Sub(finish); d < 20*time.Minute || d > 21*time.Minute {
		t.Fatalf("fire time %s is %s after the finish, want 20 minutes (rounded up to the minute)", fu.FireTime, d)
	}
	if c := condition(run, farmv1.ConditionSucceeded); c.Status != metav1.ConditionTrue || c.Reason != farmv1.ReasonWaiting {
		t.Fatalf("Succeeded while waiting: %+v", c)
	}
	eventually(t, "rig released while waiting", func() bool { return leaseHolder(t, ns, "rig") == "" })

	var cj batchv1.CronJob
	eventually(t, "CronJob ask-fu", func() bool {
		return k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "ask-fu"}, &cj) == nil
	})
	ft := fu.FireTime.UTC()
	if want := fmt.Sprintf("%d %d %d %d *", ft.Minute(), ft.Hour(), ft.Day(), int(ft.Month())); cj.Spec.Schedule != want {
		t.Errorf("schedule %q, want %q", cj.Spec.Schedule, want)
	}
	if cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Etc/UTC" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
		cj.Spec.StartingDeadlineSeconds == nil || *cj.Spec.StartingDeadlineSeconds != followup.StartingDeadlineSeconds ||
		*cj.Spec.SuccessfulJobsHistoryLimit != 1 || *cj.Spec.FailedJobsHistoryLimit != 1 {
		t.Errorf("CronJob spec %+v", cj.Spec)
	}
	if ref := metav1.GetControllerOf(&cj); ref == nil || ref.UID != run.UID {
		t.Errorf("CronJob owner %+v", cj.OwnerReferences)
	}
	ctr := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	if ctr.Image != "manager:test" || ctr.Args[0] != "followup" {
		t.Errorf("job container %+v", ctr)
	}
	// The manager's pull policy, resources and security contexts, as the
	// API server stored them.
	if ctr.ImagePullPolicy != corev1.PullNever || !apiequality.Semantic.DeepEqual(ctr.Resources, followUpDefaults.Resources) ||
		!apiequality.Semantic.DeepEqual(ctr.SecurityContext, followUpDefaults.SecurityContext) ||
		!apiequality.Semantic.DeepEqual(cj.Spec.JobTemplate.Spec.Template.Spec.SecurityContext, followUpDefaults.PodSecurityContext) {
		t.Errorf("job pod settings: pull %q resources %+v securityContext %+v pod securityContext %+v",
			ctr.ImagePullPolicy, ctr.Resources, ctr.SecurityContext, cj.Spec.JobTemplate.Spec.Template.Spec.SecurityContext)
	}
	req, err := followup.DecodeRequest(ctr.Env[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if req.Run.Name != "ask-f1" || !strings.Contains(req.Run.Spec.Trigger, "asked Ana for the code") ||
		!strings.Contains(req.Run.Spec.Trigger, "read Ana's reply") || !strings.Contains(req.Run.Spec.Trigger, "Set a 5 minute timer") {
		t.Fatalf("follow-up request %s: %q", req.Run.Name, req.Run.Spec.Trigger)
	}

	// The Job runs `manager followup`: twice is the same as once.
	for i := 0; i < 2; i++ {
		if name, err := followup.Create(context.Background(), k8s, req, ""); err != nil || name != "ask-f1" {
			t.Fatalf("followup.Create #%d = %q, %v", i+1, name, err)
		}
	}
	scripts.set(ns, "ask-f1", byPod(nil, ends(contract.Done, true, "got the code", 50*time.Millisecond)))
	parent := waitPhase(t, ns, "ask", farmv1.RunSucceeded)
	if c := condition(parent, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonFollowedUp {
		t.Fatalf("parent Succeeded %+v", c)
	}
	eventually(t, "CronJob deleted once the follow-up exists", func() bool {
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "ask-fu"}, &cj)
		return apierrors.IsNotFound(err) || (err == nil && cj.DeletionTimestamp != nil)
	})
	child := waitPhase(t, ns, "ask-f1", farmv1.RunSucceeded)
	if child.Labels[farmv1.LabelChainRoot] != "ask" || child.Labels[farmv1.LabelParent] != "ask" {
		t.Fatalf("child labels %v", child.Labels)
	}
}

func TestMissedCronJobFallbackAndChainLimit(t *testing.T) {
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	wait := ends(contract.Wait, true, "waiting", 50*time.Millisecond)
	scripts.set(ns, "chain", byPod(nil, wait))
	scripts.set(ns, "chain-f1", byPod(nil, wait))
	run := newRun(ns, "chain", "rig")
	run.Spec.FollowUp.MaxChain = ptr.To[int32](1)
	create(t, run)
	waitPhase(t, ns, "chain", farmv1.RunWaiting)
	// Hold the follow-up in the queue while the clock is moved, so its pods
	// are not judged by the moved clock.
	setMaintenance(t, ns, "rig", true)
	// No CronJob controller runs here: once the fire time plus the starting
	// deadline has passed, the controller creates the follow-up itself.
	jump := 16*time.Minute + followup.StartingDeadlineSeconds*time.Second + followup.FallbackSlack
	clk.Advance(jump)
	touch(t, ns, "chain")
	parent := waitPhase(t, ns, "chain", farmv1.RunSucceeded)
	clk.Advance(-jump)
	setMaintenance(t, ns, "rig", false)
	if c := condition(parent, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonFollowedUp {
		t.Fatalf("parent %+v", c)
	}
	// The follow-up waits too, but the chain is full: no third run, and the
	// run says so — reason FollowUpChainExhausted with the chain's length,
	// and a Warning Event.
	child := waitRun(t, ns, "chain-f1", func(r *farmv1.AgentRun) bool { return r.Status.Phase.Finished() })
	if c := condition(child, farmv1.ConditionFollowUpScheduled); c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonChainLimitReached {
		t.Fatalf("FollowUpScheduled of the last link: %+v; status %+v", c, child.Status)
	}
	const length = "chain chain is exhausted: 2 runs, the first and 1 follow-up (spec.followUp.maxChain 1)"
	if c := condition(child, farmv1.ConditionSucceeded); child.Status.Phase != farmv1.RunSucceeded || c == nil ||
		c.Reason != farmv1.ReasonFollowUpChainExhausted || !strings.Contains(c.Message, length) || !strings.Contains(c.Message, "larger spec.followUp.maxChain") {
		t.Fatalf("the last link ended %s with %+v; want Succeeded, FollowUpChainExhausted, %q and the field to change", child.Status.Phase, c, length)
	}
	eventually(t, "the chain-exhausted Warning Event", func() bool {
		for _, e := range runEventsOf(t, ns, "chain-f1") {
			if e.Reason == farmv1.ReasonFollowUpChainExhausted && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, length) {
				return true
			}
		}
		return false
	})
	var f2 farmv1.AgentRun
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "chain-f2"}, &f2); !apierrors.IsNotFound(err) {
		t.Fatalf("chain-f2 exists past maxChain 1: %v", err)
	}
}

func setMaintenance(t *testing.T, ns, name string, on bool) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)))
	if err := k8s.Patch(context.Background(), &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch); err != nil {
		t.Fatal(err)
	}
	want := farmv1.RigMaintenance
	if !on {
		want = farmv1.RigReady
	}
	waitRig(t, ns, name, func(r *farmv1.DeviceRig) bool { return r.Status.Phase == want })
}

func touch(t *testing.T, ns, name string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test/touch":"%d"}}}`, time.Now().UnixNano())))
	if err := k8s.Patch(context.Background(), &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch); err != nil {
		t.Fatal(err)
	}
}

// cronJobRequest waits for a CronJob whose request satisfies ok and returns
// that request, as the CronJob's Jobs would carry it.
func cronJobRequest(t *testing.T, ns, name string, ok func(followup.Request) bool) followup.Request {
	t.Helper()
	var req followup.Request
	eventually(t, "CronJob "+name, func() bool {
		var cj batchv1.CronJob
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cj); err != nil || cj.DeletionTimestamp != nil {
			return false
		}
		for _, e := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env {
			if e.Name == followup.EnvRequest {
				r, err := followup.DecodeRequest(e.Value)
				if err != nil {
					t.Fatal(err)
				}
				req = r
			}
		}
		return ok == nil || ok(req)
	})
	return req
}

func cronJobGone(t *testing.T, ns, name string) func() bool {
	return func() bool {
		var cj batchv1.CronJob
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cj)
		return apierrors.IsNotFound(err) || (err == nil && cj.DeletionTimestamp != nil)
	}
}

func runExists(t *testing.T, ns, name string) bool {
	t.Helper()
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &farmv1.AgentRun{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// refusals are the Events `manager followup` recorded in ns, by the kind of
// object they are about.
func refusals(t *testing.T, ns string) map[string]int {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range list.Items {
		if e.Reason == farmv1.EventFollowUpRefused {
			out[e.Regarding.Kind]++
		}
	}
	return out
}

// A run cancelled while it waits for its follow-up gets none: its CronJob is
// deleted, and a Job the CronJob had already started finds the parent
// cancelled, makes nothing and says so in an Event on the parent.
func TestCancelledWaitingRunFiresNoFollowUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "ask", byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)))
	create(t, newRun(ns, "ask", "rig"))
	waitPhase(t, ns, "ask", farmv1.RunWaiting)
	req := cronJobRequest(t, ns, "ask-fu", nil)

	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	if err := k8s.Patch(ctx, &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ask"}}, patch); err != nil {
		t.Fatal(err)
	}
	run := waitPhase(t, ns, "ask", farmv1.RunCancelled)
	eventually(t, "the cancelled run's follow-up CronJob deleted", cronJobGone(t, ns, "ask-fu"))
	if c := condition(run, farmv1.ConditionFollowUpScheduled); c == nil || c.Status != metav1.ConditionFalse || c.Reason != farmv1.ReasonCancelled {
		t.Fatalf("FollowUpScheduled of a run cancelled while waiting: %+v", c)
	}

	if name, err := followup.Create(ctx, k8s, req, "ask-fu-29412000"); err == nil {
		t.Fatalf("a Job of the cancelled run's CronJob made follow-up %s", name)
	}
	if runExists(t, ns, "ask-f1") {
		t.Fatal("follow-up ask-f1 exists for a cancelled run")
	}
	if n := refusals(t, ns)["AgentRun"]; n != 1 {
		t.Fatalf("%d refusal Events on the run, want 1", n)
	}
}

// A run of a reused name is not swallowed by the follow-up an earlier run of
// that name left: the leftover <root>-f1 was made for another parent, so the
// new run's follow-up takes another name, is made, and the run finishes
// FollowedUp with it.
func TestReusedRunNameGetsItsOwnFollowUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	leftover := newRun(ns, "ask-f1", "rig")
	leftover.Labels = map[string]string{farmv1.LabelChainRoot: "ask", farmv1.LabelParent: "ask", farmv1.LabelParentUID: "uid-of-an-earlier-ask"}
	leftover.Annotations = map[string]string{farmv1.AnnotationChain: "1"}
	create(t, leftover)
	waitPhase(t, ns, "ask-f1", farmv1.RunSucceeded)

	scripts.set(ns, "ask", byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)))
	create(t, newRun(ns, "ask", "rig"))
	run := waitRun(t, ns, "ask", func(r *farmv1.AgentRun) bool {
		c := condition(r, farmv1.ConditionFollowUpScheduled)
		return r.Status.Phase.Finished() || (c != nil && c.Reason == farmv1.ReasonScheduled)
	})
	fu := run.Status.FollowUp
	if run.Status.Phase != farmv1.RunWaiting || fu == nil || fu.Run == "ask-f1" || fu.Run == "" {
		t.Fatalf("the earlier run's ask-f1 swallowed the new run's follow-up: phase %s, followUp %+v", run.Status.Phase, fu)
	}
	req := cronJobRequest(t, ns, "ask-fu", func(r followup.Request) bool { return r.Run.Name == fu.Run })
	name, err := followup.Create(ctx, k8s, req, "")
	if err != nil || name != fu.Run {
		t.Fatalf("followup.Create = %q, %v; want %s", name, err, fu.Run)
	}
	parent := waitPhase(t, ns, "ask", farmv1.RunSucceeded)
	if c := condition(parent, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonFollowedUp || parent.Status.FollowUp.Run != name {
		t.Fatalf("parent %+v, followUp %+v", c, parent.Status.FollowUp)
	}
	if child := getRun(t, ns, name); child.Labels[farmv1.LabelParentUID] != string(parent.UID) || len(name) > farmv1.MaxNameLength {
		t.Fatalf("follow-up %s labels %v", name, child.Labels)
	}
}

// The longest name a run may have still gets its follow-up: the child's name
// is shortened with a hash to fit. One character more is refused when the
// run is created, saying why.
func TestLongRunNameFollowsUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	long := strings.Repeat("long-name-", 4) + "12345678"
	scripts.set(ns, long, byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)))
	create(t, newRun(ns, long, "rig"))
	waitPhase(t, ns, long, farmv1.RunWaiting)
	req := cronJobRequest(t, ns, long+"-fu", nil)
	name, err := followup.Create(ctx, k8s, req, "")
	if err != nil {
		t.Fatalf("the follow-up of a run named with %d characters: %v", len(long), err)
	}
	parent := waitPhase(t, ns, long, farmv1.RunSucceeded)
	if c := condition(parent, farmv1.ConditionSucceeded); c.Reason != farmv1.ReasonFollowedUp || len(name) > 48 {
		t.Fatalf("parent %+v, follow-up %q", c, name)
	}

	err = k8s.Create(ctx, newRun(ns, long+"x", "rig"))
	if err == nil || !strings.Contains(err.Error(), "at most 48 characters") || !strings.Contains(err.Error(), "shorter name") {
		t.Fatalf("a 49-character name: %v", err)
	}
}

// A follow-up Job whose parent is gone, or was deleted and created again
// under its name, makes nothing and says why.
func TestFollowUpJobRefusesAGoneOrNewParent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	makeRig(t, ns, "rig", nil)
	scripts.set(ns, "ask", byPod(nil, ends(contract.Wait, true, "asked Ana", 50*time.Millisecond)))
	create(t, newRun(ns, "ask", "rig"))
	old := waitPhase(t, ns, "ask", farmv1.RunWaiting)
	req := cronJobRequest(t, ns, "ask-fu", nil)
	if req.Parent == nil || req.Parent.UID != old.UID {
		t.Fatalf("the request must carry its parent's UID: %+v", req.Parent)
	}
	if err := k8s.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "run deleted", func() bool { return !runExists(t, ns, "ask") })
	if name, err := followup.Create(ctx, k8s, req, ""); err == nil || !strings.Contains(err.Error(), "is gone") || runExists(t, ns, name) {
		t.Fatalf("the follow-up of a deleted run: %s, %v", name, err)
	}

	scripts.set(ns, "ask", byPod(nil, fakekubelet.Ending{Hang: true}))
	create(t, newRun(ns, "ask", "rig"))
	if name, err := followup.Create(ctx, k8s, req, ""); err == nil || !strings.Contains(err.Error(), "not the run that scheduled") || runExists(t, ns, name) {
		t.Fatalf("a new run of the same name took the earlier run's follow-up: %s, %v", name, err)
	}
	if n := refusals(t, ns)["CronJob"]; n != 2 {
		t.Fatalf("%d refusal Events on the CronJob, want 2", n)
	}
	cancel := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	if err := k8s.Patch(ctx, &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ask"}}, cancel); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "ask", farmv1.RunCancelled)
}

// A WAIT's follow-up fires after the agent's delay; without one (the loop
// reports afterMinutes 0) after the run's spec.followUp.defaultDelayMinutes.
func TestWaitDelayIsTheAgentsElseTheRunsDefault(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	for _, c := range []struct {
		name  string
		after int
	}{{"no-delay", 0}, {"own-delay", 20}} {
		makeRig(t, ns, "rig-"+c.name, nil)
		m := contract.TerminationMessage{Sentinel: contract.Wait, Retryable: true, Recap: "waiting for a reply", ExitReason: contract.ReasonEndTurn,
			FollowUp: &contract.FollowUp{AfterMinutes: c.after, Context: "read the reply"}}
		b, _ := m.Encode()
		scripts.set(ns, c.name, byPod(nil, fakekubelet.Ending{After: 50 * time.Millisecond, ExitCode: 10, Message: string(b)}))
		run := newRun(ns, c.name, "rig-"+c.name)
		run.Spec.FollowUp.DefaultDelayMinutes = 45
		create(t, run)
	}
	for _, c := range []struct {
		name string
		want time.Duration
	}{{"no-delay", 45 * time.Minute}, {"own-delay", 20 * time.Minute}} {
		run := waitRun(t, ns, c.name, func(r *farmv1.AgentRun) bool {
			return r.Status.Phase == farmv1.RunWaiting && r.Status.FollowUp != nil && r.Status.FollowUp.FireTime != nil
		})
		finish := run.Status.Attempts[0].FinishTime.Time
		if d := run.Status.FollowUp.FireTime.Sub(finish); d < c.want || d > c.want+time.Minute {
			t.Errorf("%s: fire time %s is %s after the finish %s, want %s (rounded up to the minute)", c.name, run.Status.FollowUp.FireTime, d, finish, c.want)
		}
	}
}
