package agentrun

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/conditions"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// noFollowUp is why a WAIT of a run gets no follow-up: the FollowUpScheduled
// condition's reason and message, and how the run ends.
type noFollowUp struct {
	reason, message string // the FollowUpScheduled condition
	// finish and finishMessage are the Succeeded condition's reason and
	// message; exhausted is true for a chain at followUp.maxChain (as
	// opposed to follow-ups turned off), which warns.
	finish, finishMessage string
	exhausted             bool
}

// chainEnd says whether a WAIT of run may have a follow-up, and when not,
// why: its chain is exhausted, with the chain's length, or follow-ups are
// off (followUp.maxChain 0).
func chainEnd(run *farmv1.AgentRun) (noFollowUp, bool) {
	next, allowed := followup.NextOf(run)
	if allowed {
		return noFollowUp{}, false
	}
	limit := run.Spec.FollowUp.ChainLimit()
	if limit == 0 {
		return noFollowUp{reason: farmv1.ReasonFollowUpsDisabled, message: "followUp.maxChain is 0",
			finish: farmv1.ReasonWaiting, finishMessage: "the agent ended with WAIT; no follow-up: followUp.maxChain is 0"}, true
	}
	done := next.Chain - 1
	return noFollowUp{
		reason:  farmv1.ReasonChainLimitReached,
		message: fmt.Sprintf("the chain already has %s (followUp.maxChain %d)", followUps(done), limit),
		finish:  farmv1.ReasonFollowUpChainExhausted,
		finishMessage: fmt.Sprintf("the agent ended with WAIT, but chain %s is exhausted: %d runs, the first and %s "+
			"(spec.followUp.maxChain %d), so no follow-up is made; a longer chain needs a larger spec.followUp.maxChain (at most %d)",
			next.Root, done+1, followUps(done), limit, farmv1.MaxFollowUpChain),
		exhausted: true,
	}, true
}

func followUps(n int32) string {
	if n == 1 {
		return "1 follow-up"
	}
	return fmt.Sprintf("%d follow-ups", n)
}

// planFollowUp fixes, at the moment a WAIT is recorded, when the follow-up
// fires (followup.Delay) and what it is called.
func planFollowUp(run *farmv1.AgentRun, now time.Time, o attempt.Outcome) {
	st := &run.Status
	gen := run.Generation
	next, _ := followup.NextOf(run)
	if end, ended := chainEnd(run); ended {
		conditions.False(&st.Conditions, gen, farmv1.ConditionFollowUpScheduled, end.reason, end.message)
		return
	}
	fire := metav1.NewTime(followup.FireTime(now, followup.Delay(run, o.Message)))
	st.FollowUp = &farmv1.FollowUpStatus{
		CronJob: followup.WaitCronJobName(run.Name), FireTime: &fire, Run: next.Name, Chain: next.Chain,
	}
	if m := o.Message; m != nil && m.FollowUp != nil {
		st.FollowUp.Context = followup.Clip(m.FollowUp.Context, 4096)
	}
}

// followUp drives a Waiting run: release the rig, keep the follow-up CronJob,
// and once the follow-up run exists, delete the CronJob and finish. When the
// CronJob has not fired by its fire time plus its starting deadline, the
// controller creates the follow-up itself. The follow-up is the run that
// carries this run's UID (followup.IsChildOf); a run of its name made for
// another parent moves it to followup.ChildNameFor.
func (r *Reconciler) followUp(ctx context.Context, run *farmv1.AgentRun, w world) (decision, error) {
	st := &run.Status
	gen := run.Generation
	released, err := r.releaseRig(ctx, run, w)
	if err != nil {
		return decision{}, err
	}
	wake := retryRelease(w, released)
	fu := st.FollowUp
	if fu == nil || fu.FireTime == nil { // chain exhausted or follow-ups disabled: nothing will come
		end, ended := chainEnd(run)
		if !ended { // planned by a manager that did not plan follow-ups
			end.finish, end.finishMessage = farmv1.ReasonWaiting, "the agent ended with WAIT; no follow-up (see FollowUpScheduled)"
		}
		r.finishWith(ctx, run, w.now, farmv1.RunSucceeded, end.finish, end.finishMessage)
		return wakeAt(wake), nil
	}
	next, _ := followup.NextOf(run)
	name, exists, err := r.followUpName(ctx, run, w.now, next)
	if err != nil || name == "" {
		return wakeAt(wake), err
	}
	if exists {
		return wakeAt(wake), r.followedUp(ctx, run, w.now, name, false)
	}
	next.Name = name

	trigger := followup.WaitTrigger(sessionTask(run), next, fu.Context)
	want := followup.ChildRun(run, next, trigger)
	fallbackAt := fu.FireTime.Add(followup.StartingDeadlineSeconds*time.Second + followup.FallbackSlack)
	if !w.now.Before(fallbackAt) {
		err := r.Create(ctx, want)
		switch {
		case err == nil:
			return wakeAt(wake), r.followedUp(ctx, run, w.now, want.Name, true)
		case apierrors.IsAlreadyExists(err):
			// Made since the cache was read, by the CronJob or by someone
			// else: the next reconcile reads whose it is.
			return wakeAt(earliest(wake, w.now.Add(time.Second))), nil
		case apierrors.IsInvalid(err):
			r.followUpFailed(ctx, run, w.now, fmt.Sprintf("the API server refused follow-up run %s: %v", want.Name, err))
			return wakeAt(wake), nil
		}
		return wakeAt(wake), fmt.Errorf("create follow-up run %s: %w", want.Name, err)
	}
	cj, err := followup.WaitCronJob(run, want, fu.FireTime.Time, r.Config.FollowUp)
	if err != nil {
		return wakeAt(wake), err
	}
	err = r.Create(ctx, cj)
	switch {
	case err == nil:
		r.ev().followUpScheduled(run, cj.Name, want.Name, fu.FireTime.UTC().Format(time.RFC3339))
		decided(ctx, run, "scheduled the follow-up", farmv1.ReasonScheduled, "cronJob", cj.Name, "followUp", want.Name, "at", fu.FireTime.UTC())
	case apierrors.IsAlreadyExists(err):
		if stale, err := r.dropStaleCronJob(ctx, run, cj.Name, want.Name); err != nil || stale {
			// The deletion's event, or the cache showing the CronJob, brings the run back.
			return wakeAt(earliest(wake, w.now.Add(time.Second))), err
		}
	case apierrors.IsInvalid(err):
		r.followUpFailed(ctx, run, w.now, fmt.Sprintf("the API server refused follow-up CronJob %s: %v", cj.Name, err))
		return wakeAt(wake), nil
	default:
		return wakeAt(wake), fmt.Errorf("create follow-up CronJob %s: %w", cj.Name, err)
	}
	conditions.True(&st.Conditions, gen, farmv1.ConditionFollowUpScheduled, farmv1.ReasonScheduled,
		fmt.Sprintf("CronJob %s creates %s at %s", cj.Name, want.Name, fu.FireTime.UTC().Format(time.RFC3339)))
	return wakeAt(earliest(wake, fallbackAt)), nil
}

// followUpName finds the name of this run's follow-up, and whether it exists:
// the name planned in status.followUp.run, unless a run another parent made
// (an earlier run of this name left it) holds it; then the name with this
// run's hash, followup.ChildNameFor. The follow-up is never taken to be a run
// this run did not make. When both names are held by others the run fails,
// and name is "".
func (r *Reconciler) followUpName(ctx context.Context, run *farmv1.AgentRun, now time.Time, next followup.Next) (name string, exists bool, err error) {
	fu := run.Status.FollowUp
	if fu.Run == "" {
		fu.Run = next.Name
	}
	planned, alt := fu.Run, followup.ChildNameFor(next, run.UID)
	for _, name := range []string{planned, alt} {
		var child farmv1.AgentRun
		err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &child)
		switch {
		case apierrors.IsNotFound(err):
			if name != planned {
				fu.Run = name
				r.ev().followUpRenamed(run, planned, name)
			}
			return name, false, nil
		case err != nil:
			return "", false, fmt.Errorf("get follow-up run %s: %w", name, err)
		case followup.IsChildOf(&child, run):
			fu.Run = name
			return name, true, nil
		}
	}
	r.finishWith(ctx, run, now, farmv1.RunFailed, farmv1.ReasonFollowUpNameTaken, fmt.Sprintf(
		"the agent ended with WAIT, but AgentRuns %s and %s, the names its follow-up may take, were made for other runs; delete them and create this run again", planned, alt))
	conditions.False(&run.Status.Conditions, run.Generation, farmv1.ConditionFollowUpScheduled, farmv1.ReasonFollowUpNameTaken,
		fmt.Sprintf("AgentRuns %s and %s were made for other runs", planned, alt))
	return "", false, nil
}

// dropStaleCronJob deletes the follow-up CronJob of this run's name when it
// is not this run's or creates another child than child: an earlier run of
// this name left it, or the follow-up was renamed. It reports whether it did
// — or whether the cache does not show the CronJob yet: either way the run
// looks again before it goes on.
func (r *Reconciler) dropStaleCronJob(ctx context.Context, run *farmv1.AgentRun, name, child string) (bool, error) {
	var cur batchv1.CronJob
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &cur); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil // the cache has not shown it yet
		}
		return false, fmt.Errorf("get follow-up CronJob %s: %w", name, err)
	}
	req, err := followup.RequestOf(&cur)
	if metav1.IsControlledBy(&cur, run) && err == nil && req.Run.Name == child {
		return false, nil
	}
	if err := r.Delete(ctx, &cur, client.Preconditions{UID: &cur.UID},
		client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("delete stale follow-up CronJob %s: %w", name, err)
	}
	return true, nil
}

// followUpFailed fails a Waiting run whose follow-up the API server refuses:
// it would never come.
func (r *Reconciler) followUpFailed(ctx context.Context, run *farmv1.AgentRun, now time.Time, msg string) {
	conditions.False(&run.Status.Conditions, run.Generation, farmv1.ConditionFollowUpScheduled, farmv1.ReasonFollowUpInvalid, msg)
	r.finishWith(ctx, run, now, farmv1.RunFailed, farmv1.ReasonFollowUpInvalid, "the agent ended with WAIT, but "+msg)
}

// followedUp finishes a Waiting run whose follow-up exists.
func (r *Reconciler) followedUp(ctx context.Context, run *farmv1.AgentRun, now time.Time, child string, byController bool) error {
	cj := &batchv1.CronJob{}
	cj.Namespace, cj.Name = run.Namespace, followup.WaitCronJobName(run.Name)
	if err := r.Delete(ctx, cj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete follow-up CronJob %s: %w", cj.Name, err)
	}
	st := &run.Status
	st.FollowUp.Run = child
	conditions.True(&st.Conditions, run.Generation, farmv1.ConditionFollowUpScheduled, farmv1.ReasonFollowUpCreated,
		"follow-up run "+child+" exists")
	r.ev().followUpCreated(run, child, byController)
	r.finishWith(ctx, run, now, farmv1.RunSucceeded, farmv1.ReasonFollowedUp, "the agent ended with WAIT; follow-up run "+child+" carries on")
	return nil
}

// dropFollowUp is stop's part for a Waiting run: a run stopped from outside
// (cancel, its deadline) wants no follow-up. Its CronJob is deleted, and a
// follow-up it already made that is still in flight is cancelled with it —
// read from the API server, as `manager followup` may have made it a moment
// ago (that command, in turn, cancels what it made when it then finds the
// parent cancelled).
func (r *Reconciler) dropFollowUp(ctx context.Context, run *farmv1.AgentRun, cause *stopCause) error {
	fu := run.Status.FollowUp
	if run.Status.Phase != farmv1.RunWaiting || fu == nil || fu.FireTime == nil {
		return nil
	}
	cj := &batchv1.CronJob{}
	cj.Namespace, cj.Name = run.Namespace, followup.WaitCronJobName(run.Name)
	if err := r.Delete(ctx, cj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete follow-up CronJob %s: %w", cj.Name, err)
	}
	msg := fmt.Sprintf("%s before its follow-up ran; CronJob %s deleted", cause.message, cj.Name)
	if fu.Run != "" {
		var child farmv1.AgentRun
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: fu.Run}, &child)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("get follow-up run %s: %w", fu.Run, err)
		case followup.IsChildOf(&child, run) && !child.Spec.Cancel && !child.Status.Phase.Finished():
			patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
			if err := r.Patch(ctx, &child, patch); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("cancel follow-up run %s: %w", child.Name, err)
			}
			msg = fmt.Sprintf("%s as its follow-up was being made; follow-up %s cancelled", cause.message, child.Name)
		}
	}
	if conditions.False(&run.Status.Conditions, run.Generation, farmv1.ConditionFollowUpScheduled, cause.reason, msg) {
		r.ev().followUpCancelled(run, msg)
	}
	return nil
}

// materialiseJobs turns the agent's create_job / finish_job into CronJobs.
// It runs before the outcome is written, and every step is idempotent, so a
// restart in between repeats it harmlessly.
//
// A one-time job the WAIT's follow-up was taken from (followUp.job) wakes the
// rig at the same time as the follow-up: it is not made twice. The WAIT
// follow-up carries it, unless the chain limit stops follow-ups, and then the
// job's own CronJob does.
//
// A cancelled run's new jobs are not made: the run was told to stop, and a
// job would act for it later. Its finish_job calls are carried out.
func (r *Reconciler) materialiseJobs(ctx context.Context, run *farmv1.AgentRun, now time.Time, rig string, o attempt.Outcome) {
	carried := ""
	if m := o.Message; o.Class == farmv1.OutcomeWait && m.FollowUp != nil && m.FollowUp.Job != "" {
		if _, allowed := followup.NextOf(run); allowed {
			carried = m.FollowUp.Job
		}
	}
	for _, job := range o.Message.Jobs {
		name := followup.AgentJobCronJobName(rig, job.ID)
		if job.Op == contract.JobCreate && job.ID == carried && job.Kind != contract.JobPeriodic {
			recordJob(run, farmv1.AgentJobStatus{ID: job.ID, Op: string(job.Op), Schedule: job.Schedule,
				CronJob: followup.WaitCronJobName(run.Name), Message: "carried by this run's WAIT follow-up"})
			continue
		}
		var err error
		var expires string
		switch job.Op {
		case contract.JobCreate:
			if run.Spec.Cancel {
				err = fmt.Errorf("the run was cancelled (spec.cancel): its new jobs are not scheduled")
				break
			}
			expires, err = r.createAgentJob(ctx, run, now, rig, job)
		case contract.JobFinish:
			cj := &batchv1.CronJob{}
			cj.Namespace, cj.Name = run.Namespace, name
			if e := r.Delete(ctx, cj); e != nil && !apierrors.IsNotFound(e) {
				err = e
			}
		default:
			err = fmt.Errorf("unknown op %q", job.Op)
		}
		r.ev().agentJob(run, string(job.Op), job.ID, name, err)
		st := farmv1.AgentJobStatus{ID: job.ID, CronJob: name, Op: string(job.Op), Schedule: job.Schedule}
		if err != nil {
			st.CronJob, st.Message = "", err.Error()
		} else if expires != "" {
			st.Message = "makes runs until " + expires
		}
		recordJob(run, st)
	}
}

// createAgentJob creates (or, for a job created again, updates) the CronJob
// of an agent job, owned by the rig, and returns when it expires.
func (r *Reconciler) createAgentJob(ctx context.Context, run *farmv1.AgentRun, now time.Time, rigName string, job contract.Job) (string, error) {
	var rig farmv1.DeviceRig
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: rigName}, &rig); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("rig %s is gone: the job has no phone to run on", rigName)
		}
		return "", fmt.Errorf("get rig %s: %w", rigName, err)
	}
	cj, err := followup.AgentJobCronJob(run, &rig, job, now, r.Config.FollowUp)
	if err != nil {
		return "", err
	}
	expires := cj.Annotations[farmv1.AnnotationExpires]
	err = r.Create(ctx, cj)
	if !apierrors.IsAlreadyExists(err) {
		return expires, err
	}
	var cur batchv1.CronJob
	if err := r.Get(ctx, client.ObjectKeyFromObject(cj), &cur); err != nil {
		return "", err
	}
	cur.Spec = cj.Spec
	cur.Labels, cur.Annotations, cur.OwnerReferences = cj.Labels, cj.Annotations, cj.OwnerReferences
	return expires, r.Update(ctx, &cur)
}

func recordJob(run *farmv1.AgentRun, j farmv1.AgentJobStatus) {
	jobs := run.Status.Jobs
	for i := range jobs {
		if jobs[i].ID == j.ID {
			jobs[i] = j
			return
		}
	}
	run.Status.Jobs = append(jobs, j)
	if n := len(run.Status.Jobs); n > 64 {
		run.Status.Jobs = run.Status.Jobs[n-64:]
	}
}
