package followup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
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
	// MinPeriodicInterval is the shortest period of an agent's periodic job (seed 000).
	MinPeriodicInterval = 30 * time.Minute
	utc                 = "Etc/UTC"
)

// JobDefaults are the manager's settings for follow-up Jobs.
type JobDefaults struct {
	// Image runs `manager followup`.
	Image string
	// ServiceAccountName may create AgentRuns (and delete one-time CronJobs).
	ServiceAccountName string
}

// WaitCronJobName names the CronJob of a run's WAIT follow-up.
func WaitCronJobName(run string) string { return run + "-fu" }

// WaitCronJob builds the CronJob that creates child at fireAt: the schedule
// pins the exact minute (UTC), Forbid, a starting deadline, history 1/1, owned by the parent.
func WaitCronJob(parent, child *farmv1.AgentRun, fireAt time.Time, d JobDefaults) (*batchv1.CronJob, error) {
	req, err := EncodeRequest(Request{Run: child})
	if err != nil {
		return nil, err
	}
	cj := cronJob(parent.Namespace, WaitCronJobName(parent.Name), PinnedSchedule(fireAt), req, d)
	cj.Labels = map[string]string{farmv1.LabelKind: "followup", farmv1.LabelRun: parent.Name}
	cj.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun", Name: parent.Name, UID: parent.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	return cj, nil
}

// AgentJobCronJobName names the CronJob of an agent-created job on a rig.
func AgentJobCronJobName(rig, id string) string {
	return dnsName("job-"+rig+"-"+id, 52)
}

// AgentJobCronJob builds the CronJob for a create_job the agent reported. Runs
// it creates are pinned to the rig the job was made on, with the run's model and limits.
func AgentJobCronJob(run *farmv1.AgentRun, rig string, job contract.Job, d JobDefaults) (*batchv1.CronJob, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	name := AgentJobCronJobName(rig, job.ID)
	spec := *run.Spec.DeepCopy()
	spec.Cancel = false
	spec.RigRef, spec.RigSelector = &farmv1.RigReference{Name: rig}, nil
	spec.Trigger = Clip(fmt.Sprintf("Scheduled job %q (%s, %s UTC) fired: %s\nContext you left for yourself: %s",
		job.ID, job.Kind, job.Schedule, job.Description, job.Context), MaxTriggerBytes)
	child := &farmv1.AgentRun{
		TypeMeta: metav1.TypeMeta{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: run.Namespace,
			Name:      dnsName(rig+"-"+job.ID, 38),
			Labels:    map[string]string{farmv1.LabelRig: rig, farmv1.LabelJobID: dnsLabel(job.ID)},
		},
		Spec: spec,
	}
	req := Request{Run: child, NameFromJob: true}
	if job.Kind != contract.JobPeriodic {
		req.DeleteCronJob = name
	}
	enc, err := EncodeRequest(req)
	if err != nil {
		return nil, err
	}
	cj := cronJob(run.Namespace, name, job.Schedule, enc, d)
	cj.Labels = map[string]string{farmv1.LabelKind: "agent-job", farmv1.LabelRig: rig, farmv1.LabelJobID: dnsLabel(job.ID)}
	cj.Annotations = map[string]string{"farm.clawfarm.dev/description": Clip(job.Description, 1024), "farm.clawfarm.dev/created-by": run.Name}
	return cj, nil
}

// ValidateJob checks a job the agent reported before the operator acts on it.
func ValidateJob(job contract.Job) error {
	if strings.TrimSpace(job.ID) == "" {
		return fmt.Errorf("agent job has no id")
	}
	if job.Op == contract.JobFinish {
		return nil
	}
	fields := strings.Fields(job.Schedule)
	if len(fields) != 5 {
		return fmt.Errorf("agent job %q: schedule %q is not a 5-field cron expression (M H D Mon W)", job.ID, job.Schedule)
	}
	if job.Kind != contract.JobOneTime && job.Kind != contract.JobPeriodic {
		return fmt.Errorf("agent job %q: kind %q is neither one-time nor periodic", job.ID, job.Kind)
	}
	return nil
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
				BackoffLimit:            ptr.To[int32](3),
				TTLSecondsAfterFinished: ptr.To[int32](3600),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{farmv1.LabelKind: "followup-job"}},
					Spec: corev1.PodSpec{
						RestartPolicy:      corev1.RestartPolicyNever,
						ServiceAccountName: d.ServiceAccountName,
						Containers: []corev1.Container{{
							Name:  "followup",
							Image: d.Image,
							Args:  []string{"followup"},
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

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsName lowercases s into a DNS-1123 name of at most n bytes; when it has to
// shorten, a hash of the whole keeps distinct inputs distinct.
func dnsName(s string, n int) string {
	out := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(out) <= n && out == s {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:6]
	if len(out) > n-7 {
		out = strings.TrimRight(out[:n-7], "-")
	}
	return out + "-" + h
}

func dnsLabel(s string) string { return dnsName(s, 63) }
