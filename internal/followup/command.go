package followup

import (
	"context"
	"fmt"
	"regexp"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

var jobMinute = regexp.MustCompile(`-(\d+)$`)

// Create carries out a follow-up request: it creates the run (AlreadyExists
// is success, so a retried or doubled Job creates it once), then deletes a
// one-time job's CronJob. It returns the name of the run.
func Create(ctx context.Context, c client.Client, req Request, jobName string) (string, error) {
	run := req.Run.DeepCopy()
	if req.NameFromJob {
		m := jobMinute.FindStringSubmatch(jobName)
		if m == nil {
			return "", fmt.Errorf("%s=%q does not end in the CronJob's scheduled minute; the Job must pass its name via the downward API", EnvJobName, jobName)
		}
		run.Name = run.Name + "-" + m[1]
	}
	run.ResourceVersion, run.UID = "", ""
	run.Status = farmv1.AgentRunStatus{}
	err := c.Create(ctx, run)
	switch {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		return "", fmt.Errorf("create follow-up run %s/%s: %w", run.Namespace, run.Name, err)
	}
	if req.DeleteCronJob != "" {
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: req.DeleteCronJob}}
		if err := c.Delete(ctx, cj); err != nil && !apierrors.IsNotFound(err) {
			return run.Name, fmt.Errorf("delete one-time CronJob %s: %w", req.DeleteCronJob, err)
		}
	}
	return run.Name, nil
}
