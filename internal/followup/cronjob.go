package followup

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/state"
)

const (
	// EnvRequest carries the follow-up request into the Job.
	EnvRequest = "CLAWFARM_FOLLOWUP"
	// EnvJobName carries the Job's name (downward API), which names periodic runs.
	EnvJobName = "CLAWFARM_JOB_NAME"
	// StartingDeadlineSeconds is how late a follow-up CronJob may still fire.
	StartingDeadlineSeconds = 300
	// FallbackSlack is how long past fire time + starting deadline the controller
	// waits for the CronJob before it creates the follow-up itself.
	FallbackSlack = 30 * time.Second
	// DefaultAgentJobTTL is how long an agent's periodic job makes runs after
	// the session that created it (or created it again) ended, unless the
	// manager's --agent-job-ttl says otherwise; then its Job refuses to
	// create the run and deletes the CronJob.
	DefaultAgentJobTTL = 30 * 24 * time.Hour
	// oneTimeGrace is how long after its minute a one-time job may still
	// fire; past it the job has missed its minute, and its schedule
	// (M H D Mon *) would fire again a year later.
	oneTimeGrace = 24 * time.Hour
	// ExitBadRequest is `manager followup`'s exit code for a request it
	// cannot read; ExitRefused for a run it will not create (Create's
	// *Refused). Neither is retried: the Job's pod failure policy fails the
	// Job at once.
	ExitBadRequest = 2
	ExitRefused    = 3
	utc            = "Etc/UTC"
)

// JobDefaults are the manager's settings for follow-up Jobs.
type JobDefaults struct {
	// Image runs `manager followup`.
	Image string
	// ServiceAccountName may get, create and patch AgentRuns, get DeviceRigs, get
	// and delete CronJobs and create Events (config/rbac/followup_role.yaml).
	ServiceAccountName string
	// AgentJobTTL is how long an agent's periodic job makes runs; 0 means
	// DefaultAgentJobTTL.
	AgentJobTTL time.Duration
	// ImagePullPolicy of the Job's container (the manager's
	// --image-pull-policy); empty leaves it to the API server's default.
	ImagePullPolicy corev1.PullPolicy
	// Resources of the Job's container (--followup-resources).
	Resources corev1.ResourceRequirements
	// SecurityContext of the Job's container (--followup-security-context);
	// nil leaves it to the cluster.
	SecurityContext *corev1.SecurityContext
	// PodSecurityContext of the Job's pod (--followup-pod-security-context);
	// nil leaves it to the cluster.
	PodSecurityContext *corev1.PodSecurityContext
}

func (d JobDefaults) agentJobTTL() time.Duration {
	if d.AgentJobTTL > 0 {
		return d.AgentJobTTL
	}
	return DefaultAgentJobTTL
}

// WaitCronJob builds the CronJob that creates child at fireAt: the schedule
// pins the exact minute (UTC), Forbid, a starting deadline, history 1/1, owned
// by the parent and carrying its UID, which `manager followup` checks.
func WaitCronJob(parent, child *farmv1.AgentRun, fireAt time.Time, d JobDefaults) (*batchv1.CronJob, error) {
	name := WaitCronJobName(parent.Name)
	req, err := EncodeRequest(Request{Kind: farmv1.KindFollowUp, Run: child, CronJob: name,
		Parent: &Ref{Name: parent.Name, UID: parent.UID}})
	if err != nil {
		return nil, err
	}
	cj := cronJob(parent.Namespace, name, PinnedSchedule(fireAt), req, d)
	cj.Labels = farmv1.CarryPool(map[string]string{farmv1.LabelKind: farmv1.KindFollowUp, farmv1.LabelRun: parent.Name,
		farmv1.LabelParentUID: string(parent.UID)}, parent.Labels)
	cj.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: parent.Name, UID: parent.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	return cj, nil
}

// AgentJobCronJob builds the CronJob for a create_job the agent reported. The
// rig owns it (deleting the rig deletes it) and its runs are pinned to the
// rig, with the run's model and limits. It expires (Request.Expires): a
// periodic job after the manager's AgentJobTTL, a one-time job a day after
// its minute.
func AgentJobCronJob(run *farmv1.AgentRun, rig *farmv1.DeviceRig, job contract.Job, now time.Time, d JobDefaults) (*batchv1.CronJob, error) {
	sched, err := parseJob(job)
	if err != nil {
		return nil, err
	}
	expires := now.Add(d.agentJobTTL())
	if job.Kind == contract.JobOneTime {
		next, _ := sched.Next(now) // parseJob checked that it fires
		expires = next.Add(oneTimeGrace)
	}
	name := AgentJobCronJobName(rig.Name, job.ID)
	spec := *run.Spec.DeepCopy()
	spec.Cancel = false
	spec.RigRef, spec.RigSelector = &farmv1.RigReference{Name: rig.Name}, nil
	spec.Trigger = Clip(fmt.Sprintf("Scheduled job %q (%s, %s UTC) fired: %s\nContext you left for yourself: %s",
		job.ID, job.Kind, job.Schedule, job.Description, job.Context), MaxTriggerBytes)
	child := &farmv1.AgentRun{
		TypeMeta: metav1.TypeMeta{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: run.Namespace,
			Name:      agentJobRunPrefix(rig.Name, job.ID),
			Labels: farmv1.CarryPool(map[string]string{farmv1.LabelRig: rig.Name, farmv1.LabelJobID: dnsLabel(job.ID),
				farmv1.LabelParentUID: string(run.UID)}, run.Labels),
			Annotations: map[string]string{farmv1.AnnotationCreatedBy: run.Name},
		},
		Spec: spec,
	}
	exp := metav1.NewTime(expires.UTC().Truncate(time.Second))
	req := Request{Kind: farmv1.KindAgentJob, Run: child, NameFromJob: true, CronJob: name,
		Parent: &Ref{Name: run.Name, UID: run.UID}, Rig: &Ref{Name: rig.Name, UID: rig.UID}, Expires: &exp}
	if job.Kind != contract.JobPeriodic {
		req.DeleteCronJob = name
	}
	enc, err := EncodeRequest(req)
	if err != nil {
		return nil, err
	}
	cj := cronJob(run.Namespace, name, job.Schedule, enc, d)
	cj.Labels = farmv1.CarryPool(map[string]string{farmv1.LabelKind: farmv1.KindAgentJob, farmv1.LabelRig: rig.Name,
		farmv1.LabelJobID: dnsLabel(job.ID), farmv1.LabelParentUID: string(run.UID)}, run.Labels)
	cj.Annotations = map[string]string{farmv1.AnnotationDescription: Clip(job.Description, 1024),
		farmv1.AnnotationCreatedBy: run.Name, farmv1.AnnotationExpires: exp.Format(time.RFC3339)}
	cj.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: farmv1.GroupVersion.String(), Kind: "DeviceRig", Name: rig.Name, UID: rig.UID,
	}}
	return cj, nil
}

// ValidateJob checks a job the agent reported before the operator acts on it:
// an id; for a create, a kind and a schedule that state.ParseCron reads (the
// loop's own parser, robfig/cron as the CronJob controller uses); a periodic
// job fires at least state.MinPeriodicGap apart, the rule the loop's
// create_job applies.
func ValidateJob(job contract.Job) error {
	_, err := parseJob(job)
	return err
}

func parseJob(job contract.Job) (*state.Cron, error) {
	if strings.TrimSpace(job.ID) == "" {
		return nil, fmt.Errorf("agent job has no id")
	}
	if job.Op == contract.JobFinish {
		return nil, nil
	}
	if job.Kind != contract.JobOneTime && job.Kind != contract.JobPeriodic {
		return nil, fmt.Errorf("agent job %q: kind %q is neither one-time nor periodic", job.ID, job.Kind)
	}
	c, err := state.ParseCron(job.Schedule)
	if err != nil {
		return nil, fmt.Errorf("agent job %q: %w", job.ID, err)
	}
	if _, fires := c.Next(time.Now()); !fires {
		return nil, fmt.Errorf("agent job %q: schedule %q never fires", job.ID, job.Schedule)
	}
	if job.Kind == contract.JobPeriodic {
		if gap := c.MinGap(); gap > 0 && gap < state.MinPeriodicGap {
			return nil, fmt.Errorf("agent job %q: periodic schedule %q fires only %s apart at its closest; periodic jobs must be at least %s apart: "+
				"create it again with fewer firings (e.g. \"0 * * * *\" is hourly)", job.ID, job.Schedule, gap, state.MinPeriodicGap)
		}
	}
	return c, nil
}

func cronJob(namespace, name, schedule, request string, d JobDefaults) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: batchv1.CronJobSpec{
			Schedule:                   schedule,
			TimeZone:                   ptr.To(utc),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			StartingDeadlineSeconds:    ptr.To[int64](StartingDeadlineSeconds),
			SuccessfulJobsHistoryLimit: ptr.To[int32](1),
			FailedJobsHistoryLimit:     ptr.To[int32](1),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](3),
				// A request that cannot be read, or a run that must not be
				// made, does not get better on a retry.
				PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
					Action: batchv1.PodFailurePolicyActionFailJob,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{ExitBadRequest, ExitRefused}},
				}}},
				TTLSecondsAfterFinished: ptr.To[int32](3600),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{farmv1.LabelKind: farmv1.KindFollowUpJob}},
					Spec: corev1.PodSpec{
						RestartPolicy:      corev1.RestartPolicyNever,
						ServiceAccountName: d.ServiceAccountName,
						SecurityContext:    d.PodSecurityContext.DeepCopy(),
						Containers: []corev1.Container{{
							Name:            "followup",
							Image:           d.Image,
							ImagePullPolicy: d.ImagePullPolicy,
							Args:            []string{"followup"},
							Resources:       *d.Resources.DeepCopy(),
							SecurityContext: d.SecurityContext.DeepCopy(),
							Env: []corev1.EnvVar{
								{Name: EnvRequest, Value: request},
								{Name: EnvJobName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
									FieldPath: "metadata.labels['batch.kubernetes.io/job-name']"}}},
							},
						}},
					},
				},
			}},
		},
	}
}
