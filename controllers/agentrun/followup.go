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

// planFollowUp fixes, at the moment a WAIT is recorded, when the follow-up
// fires (followup.Delay) and what it is called.
func (s *step) planFollowUp(o attempt.Outcome) {
	st := &s.run.Status
	gen := s.run.Generation
	next, allowed := followup.NextOf(s.run)
	if !allowed {
		reason, msg := farmv1.ReasonChainLimitReached,
			fmt.Sprintf("the chain already has %d follow-ups (followUp.maxChain %d)", next.Chain-1, s.run.Spec.FollowUp.ChainLimit())
		if s.run.Spec.FollowUp.ChainLimit() == 0 {
			reason, msg = farmv1.ReasonFollowUpsDisabled, "followUp.maxChain is 0"
		}
		conditions.False(&st.Conditions, gen, farmv1.ConditionFollowUpScheduled, reason, msg)
		return
	}
	fire := metav1.NewTime(followup.FireTime(s.now, followup.Delay(s.run, o.Message)))
	st.FollowUp = &farmv1.FollowUpStatus{
		CronJob: followup.WaitCronJobName(s.run.Name), FireTime: &fire, Run: next.Name, Chain: next.Chain,
	}
	if m := o.Message; m != nil && m.FollowUp != nil {
		st.FollowUp.Context = followup.Clip(m.FollowUp.Context, 4096)
	}
}

// followUp drives a Waiting run: release the rig, keep the follow-up CronJob,
// and once the follow-up run exists, delete the CronJob and finish. When the
// CronJob has not fired by its fire time plus its starting deadline, the
// controller creates the follow-up itself.
func (s *step) followUp(ctx context.Context) error {
	st := &s.run.Status
	gen := s.run.Generation
	if err := s.releaseRig(ctx); err != nil {
		return err
	}
	fu := st.FollowUp
	if fu == nil || fu.FireTime == nil { // chain limit or follow-ups disabled: nothing will come
		s.finishWith(farmv1.RunSucceeded, farmv1.ReasonWaiting, "the agent ended with WAIT; no follow-up (see FollowUpScheduled)")
		return nil
	}
	next, _ := followup.NextOf(s.run)
	var child farmv1.AgentRun
	err := s.r.Get(ctx, types.NamespacedName{Namespace: s.run.Namespace, Name: next.Name}, &child)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get follow-up run %s: %w", next.Name, err)
	}
	if err == nil {
		return s.followedUp(ctx, next.Name, false)
	}

	trigger := followup.WaitTrigger(s.run, next, fu.Context)
	want := followup.ChildRun(s.run, next, trigger)
	fallbackAt := fu.FireTime.Add(followup.StartingDeadlineSeconds*time.Second + followup.FallbackSlack)
	if !s.now.Before(fallbackAt) {
		err := s.r.Create(ctx, want)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create follow-up run %s: %w", want.Name, err)
		}
		return s.followedUp(ctx, next.Name, err == nil)
	}
	cj, err := followup.WaitCronJob(s.run, want, fu.FireTime.Time, s.r.Config.FollowUp)
	if err != nil {
		return err
	}
	if err := s.r.Create(ctx, cj); err == nil {
		s.ev.followUpScheduled(s.run, cj.Name, next.Name, fu.FireTime.UTC().Format(time.RFC3339))
	} else if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create follow-up CronJob %s: %w", cj.Name, err)
	}
	conditions.True(&st.Conditions, gen, farmv1.ConditionFollowUpScheduled, farmv1.ReasonScheduled,
		fmt.Sprintf("CronJob %s creates %s at %s", cj.Name, next.Name, fu.FireTime.UTC().Format(time.RFC3339)))
	s.wake(fallbackAt)
	return nil
}

// followedUp finishes a Waiting run whose follow-up exists.
func (s *step) followedUp(ctx context.Context, child string, byController bool) error {
	cj := &batchv1.CronJob{}
	cj.Namespace, cj.Name = s.run.Namespace, followup.WaitCronJobName(s.run.Name)
	if err := s.r.Delete(ctx, cj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete follow-up CronJob %s: %w", cj.Name, err)
	}
	st := &s.run.Status
	st.FollowUp.Run = child
	conditions.True(&st.Conditions, s.run.Generation, farmv1.ConditionFollowUpScheduled, farmv1.ReasonFollowUpCreated,
		"follow-up run "+child+" exists")
	s.ev.followUpCreated(s.run, child, byController)
	s.finishWith(farmv1.RunSucceeded, farmv1.ReasonFollowedUp, "the agent ended with WAIT; follow-up run "+child+" carries on")
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
func (s *step) materialiseJobs(ctx context.Context, rig string, o attempt.Outcome) {
	carried := ""
	if m := o.Message; o.Class == farmv1.OutcomeWait && m.FollowUp != nil && m.FollowUp.Job != "" {
		if _, allowed := followup.NextOf(s.run); allowed {
			carried = m.FollowUp.Job
		}
	}
	for _, job := range o.Message.Jobs {
		name := followup.AgentJobCronJobName(rig, job.ID)
		if job.Op == contract.JobCreate && job.ID == carried && job.Kind != contract.JobPeriodic {
			s.recordJob(farmv1.AgentJobStatus{ID: job.ID, Op: string(job.Op), Schedule: job.Schedule,
				CronJob: followup.WaitCronJobName(s.run.Name), Message: "carried by this run's WAIT follow-up"})
			continue
		}
		var err error
		switch job.Op {
		case contract.JobCreate:
			err = s.createAgentJob(ctx, rig, job)
		case contract.JobFinish:
			cj := &batchv1.CronJob{}
			cj.Namespace, cj.Name = s.run.Namespace, name
			if e := s.r.Delete(ctx, cj); e != nil && !apierrors.IsNotFound(e) {
				err = e
			}
		default:
			err = fmt.Errorf("unknown op %q", job.Op)
		}
		s.ev.agentJob(s.run, string(job.Op), job.ID, name, err)
		st := farmv1.AgentJobStatus{ID: job.ID, CronJob: name, Op: string(job.Op), Schedule: job.Schedule}
		if err != nil {
			st.CronJob, st.Message = "", err.Error()
		}
		s.recordJob(st)
	}
}

func (s *step) createAgentJob(ctx context.Context, rig string, job contract.Job) error {
	cj, err := followup.AgentJobCronJob(s.run, rig, job, s.r.Config.FollowUp)
	if err != nil {
		return err
	}
	err = s.r.Create(ctx, cj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	var cur batchv1.CronJob
	if err := s.r.Get(ctx, client.ObjectKeyFromObject(cj), &cur); err != nil {
		return err
	}
	cur.Spec = cj.Spec
	cur.Labels, cur.Annotations = cj.Labels, cj.Annotations
	return s.r.Update(ctx, &cur)
}

func (s *step) recordJob(j farmv1.AgentJobStatus) {
	jobs := s.run.Status.Jobs
	for i := range jobs {
		if jobs[i].ID == j.ID {
			jobs[i] = j
			return
		}
	}
	s.run.Status.Jobs = append(jobs, j)
	if n := len(s.run.Status.Jobs); n > 64 {
		s.run.Status.Jobs = s.run.Status.Jobs[n-64:]
	}
}
