package followup

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// ReportingController is the reporting controller of the Events `manager
// followup` records.
const ReportingController = "farm.clawfarm.dev/followup"

var jobMinute = regexp.MustCompile(`-(\d+)$`)

// Refused is a firing that creates no run, and why. It is final: `manager
// followup` exits ExitRefused and the Job is not retried.
type Refused struct {
	// Message says why, naming the objects involved.
	Message string
	// Unrecorded says why the Event or the CronJob's deletion failed, when one did.
	Unrecorded error

	regarding corev1.ObjectReference
}

func (r *Refused) Error() string { return r.Message }

// Create carries out a follow-up request.
//
// It first checks who asked. A WAIT follow-up is made only for a parent that
// exists with the UID that made the CronJob, is not cancelled and is Waiting
// (or has finished with this follow-up). An agent job's run is made only
// before the job expires, while its rig exists with the UID that owns the
// CronJob, and while the run that created the job is not cancelled. A refusal
// is told in an Event (on the parent, else the rig, else the CronJob), deletes
// the CronJob that fired when it still carries this request (nothing it would
// fire later is wanted), and comes back as *Refused.
//
// Then it creates the run. AlreadyExists is success when the run there is
// this request's (a retried or doubled Job creates it once), a refusal when
// another parent made it. A WAIT follow-up's parent is read again once the
// run exists: cancelled or deleted in between, it cancels the follow-up too
// (the controller, stopping a Waiting run, cancels a follow-up it finds; one
// of the two sees the other). Last, a one-time job's CronJob is deleted.
// It returns the name of the run.
func Create(ctx context.Context, c client.Client, req Request, jobName string) (string, error) {
	run := req.Run.DeepCopy()
	if req.NameFromJob {
		m := jobMinute.FindStringSubmatch(jobName)
		if m == nil {
			return "", fmt.Errorf("%s=%q does not end in the CronJob's scheduled minute; the Job must pass its name via the downward API", EnvJobName, jobName)
		}
		run.Name = fitName(run.Name, "-"+m[1])
	}
	run.ResourceVersion, run.UID = "", ""
	run.Status = farmv1.AgentRunStatus{}
	f := &firing{c: c, req: req, run: run, job: jobName, now: time.Now()}

	refusal, err := f.check(ctx)
	if err == nil && refusal == nil {
		refusal, err = f.create(ctx)
	}
	if err == nil && refusal == nil && req.Kind == farmv1.KindFollowUp {
		refusal, err = f.recheck(ctx)
	}
	switch {
	case err != nil:
		return run.Name, err
	case refusal != nil:
		return run.Name, f.refuse(ctx, refusal)
	}
	if req.DeleteCronJob != "" {
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: req.DeleteCronJob}}
		if err := c.Delete(ctx, cj); err != nil && !apierrors.IsNotFound(err) {
			return run.Name, fmt.Errorf("delete one-time CronJob %s: %w", req.DeleteCronJob, err)
		}
	}
	return run.Name, nil
}

// firing is one run of `manager followup`.
type firing struct {
	c   client.Client
	req Request
	run *farmv1.AgentRun
	job string
	now time.Time
}

func (f *firing) check(ctx context.Context) (*Refused, error) {
	if f.req.Kind == farmv1.KindAgentJob {
		return f.checkAgentJob(ctx)
	}
	return f.checkParent(ctx)
}

// checkParent checks a WAIT follow-up's parent.
func (f *firing) checkParent(ctx context.Context) (*Refused, error) {
	want := f.req.Parent
	if want == nil || want.UID == "" {
		return f.refusal(f.cronJobRef(), "the request names no parent UID, so whether its parent still wants follow-up %s cannot be told: "+
			"CronJob %s was made by an older clawfarm manager; delete it (the controller creates the follow-up of a Waiting run itself)", f.run.Name, f.req.CronJob), nil
	}
	parent, err := f.getRun(ctx, want.Name)
	if err != nil || parent == nil {
		if err == nil {
			return f.refusal(f.cronJobRef(), "run %s, which asked for follow-up %s, is gone: nothing to follow up", want.Name, f.run.Name), nil
		}
		return nil, err
	}
	switch {
	case parent.UID != want.UID:
		return f.refusal(f.cronJobRef(), "run %s (UID %s) is not the run that scheduled follow-up %s (UID %s): it was deleted and created again, "+
			"and the earlier run's follow-ups are not the new run's", want.Name, parent.UID, f.run.Name, want.UID), nil
	case parent.Spec.Cancel || parent.Status.Phase == farmv1.RunCancelled:
		return f.refusal(runRef(parent), "run %s was cancelled: it no longer wants follow-up %s", parent.Name, f.run.Name), nil
	case parent.Status.Phase != farmv1.RunWaiting && parent.Status.Phase != farmv1.RunSucceeded:
		return f.refusal(runRef(parent), "run %s is %s, not Waiting: it no longer wants follow-up %s", parent.Name, parent.Status.Phase, f.run.Name), nil
	}
	return nil, nil
}

// checkAgentJob checks an agent job's rig, expiry and creator.
func (f *firing) checkAgentJob(ctx context.Context) (*Refused, error) {
	if f.req.Rig == nil || f.req.Rig.UID == "" || f.req.Parent == nil {
		return f.refusal(f.cronJobRef(), "the request names no rig UID or creator: CronJob %s was made by an older clawfarm manager; "+
			"delete it, and a session on the rig may create the job again", f.req.CronJob), nil
	}
	var rig farmv1.DeviceRig
	err := f.c.Get(ctx, types.NamespacedName{Namespace: f.run.Namespace, Name: f.req.Rig.Name}, &rig)
	switch {
	case apierrors.IsNotFound(err):
		return f.refusal(f.cronJobRef(), "rig %s is gone: agent job %s has no phone to run on", f.req.Rig.Name, f.req.CronJob), nil
	case err != nil:
		return nil, fmt.Errorf("get rig %s: %w", f.req.Rig.Name, err)
	case rig.UID != f.req.Rig.UID:
		return f.refusal(f.cronJobRef(), "rig %s (UID %s) is not the rig agent job %s was made on (UID %s): it was deleted and registered again; "+
			"a session on it may create the job again", rig.Name, rig.UID, f.req.CronJob, f.req.Rig.UID), nil
	case f.req.Expires != nil && !f.now.Before(f.req.Expires.Time):
		return f.refusal(rigRef(&rig), "agent job %s expired at %s (an agent's periodic job lasts the manager's --agent-job-ttl, default %s, "+
			"from the session that created it; a one-time job a day past its minute): a session on rig %s may create it again",
			f.req.CronJob, f.req.Expires.UTC().Format(time.RFC3339), DefaultAgentJobTTL, rig.Name), nil
	}
	creator, err := f.getRun(ctx, f.req.Parent.Name)
	if err != nil {
		return nil, err
	}
	if creator != nil && creator.UID == f.req.Parent.UID && creator.Spec.Cancel {
		return f.refusal(runRef(creator), "run %s, whose agent created job %s, was cancelled: the job makes no more runs", creator.Name, f.req.CronJob), nil
	}
	return nil, nil
}

// create creates the run; one already there must be this request's.
func (f *firing) create(ctx context.Context) (*Refused, error) {
	err := f.c.Create(ctx, f.run)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return nil, fmt.Errorf("create run %s/%s: %w", f.run.Namespace, f.run.Name, err)
		}
		return nil, nil
	}
	there, err := f.getRun(ctx, f.run.Name)
	if err != nil || there == nil {
		if err == nil {
			err = fmt.Errorf("run %s/%s was deleted while it was being created; try again", f.run.Namespace, f.run.Name)
		}
		return nil, err
	}
	l, want := there.Labels, f.run.Labels
	if f.req.Kind == farmv1.KindAgentJob {
		if l[farmv1.LabelRig] == want[farmv1.LabelRig] && l[farmv1.LabelJobID] == want[farmv1.LabelJobID] {
			return nil, nil
		}
		return f.refusal(f.cronJobRef(), "AgentRun %s already exists and is not a run of agent job %s", f.run.Name, f.req.CronJob), nil
	}
	if l[farmv1.LabelParentUID] == string(f.req.Parent.UID) {
		return nil, nil
	}
	return f.refusal(runRefOf(f.run.Namespace, f.req.Parent), "AgentRun %s already exists and was made for another parent (UID %q): "+
		"the controller gives run %s's follow-up another name", f.run.Name, l[farmv1.LabelParentUID], f.req.Parent.Name), nil
}

// recheck reads a WAIT follow-up's parent once the follow-up exists, and
// cancels the follow-up when the parent was cancelled or deleted meanwhile.
func (f *firing) recheck(ctx context.Context) (*Refused, error) {
	refusal, err := f.checkParent(ctx)
	if err != nil || refusal == nil {
		return nil, err
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	cancel := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: f.run.Namespace, Name: f.run.Name}}
	if err := f.c.Patch(ctx, cancel, patch); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("cancel follow-up %s, whose parent no longer wants it: %w", f.run.Name, err)
	}
	refusal.Message = fmt.Sprintf("follow-up %s was created and then cancelled: %s", f.run.Name, refusal.Message)
	return refusal, nil
}

// refuse records the refusal in an Event and deletes the CronJob that fired
// when it still carries this request's parent. The deletion orphans the
// CronJob's Jobs, so this one's log stays until its TTL.
func (f *firing) refuse(ctx context.Context, r *Refused) *Refused {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: f.run.Namespace, Name: fmt.Sprintf("%s.%x", r.regarding.Name, f.now.UnixNano())},
		EventTime:           metav1.NewMicroTime(f.now),
		ReportingController: ReportingController,
		ReportingInstance:   Clip(f.instance(), 128),
		Action:              "CreateRun",
		Reason:              farmv1.EventFollowUpRefused,
		Regarding:           r.regarding,
		Note:                Clip(r.Message, 1024),
		Type:                corev1.EventTypeWarning,
	}
	var errs []error
	if err := f.c.Create(ctx, ev); err != nil {
		errs = append(errs, fmt.Errorf("record the Event: %w", err))
	}
	if err := f.deleteCronJob(ctx); err != nil {
		errs = append(errs, err)
	}
	r.Unrecorded = errors.Join(errs...)
	return r
}

func (f *firing) deleteCronJob(ctx context.Context) error {
	if f.req.CronJob == "" {
		return nil
	}
	var cj batchv1.CronJob
	err := f.c.Get(ctx, types.NamespacedName{Namespace: f.run.Namespace, Name: f.req.CronJob}, &cj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get CronJob %s: %w", f.req.CronJob, err)
	}
	var parentUID types.UID
	if f.req.Parent != nil {
		parentUID = f.req.Parent.UID
	}
	if cj.Labels[farmv1.LabelParentUID] != string(parentUID) {
		return nil // made again for another run since this Job started: not this request's to delete
	}
	err = f.c.Delete(ctx, &cj, client.Preconditions{UID: &cj.UID}, client.PropagationPolicy(metav1.DeletePropagationOrphan))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete CronJob %s: %w", cj.Name, err)
	}
	return nil
}

func (f *firing) refusal(regarding corev1.ObjectReference, format string, args ...any) *Refused {
	return &Refused{Message: fmt.Sprintf(format, args...), regarding: regarding}
}

// getRun reads a run; nil when there is none.
func (f *firing) getRun(ctx context.Context, name string) (*farmv1.AgentRun, error) {
	var run farmv1.AgentRun
	err := f.c.Get(ctx, types.NamespacedName{Namespace: f.run.Namespace, Name: name}, &run)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get run %s/%s: %w", f.run.Namespace, name, err)
	}
	return &run, nil
}

func (f *firing) instance() string {
	if f.job != "" {
		return f.job
	}
	return "manager-followup"
}

func (f *firing) cronJobRef() corev1.ObjectReference {
	name := f.req.CronJob
	if name == "" {
		name = f.run.Name
	}
	return corev1.ObjectReference{APIVersion: "batch/v1", Kind: "CronJob", Namespace: f.run.Namespace, Name: name}
}

func runRef(run *farmv1.AgentRun) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun",
		Namespace: run.Namespace, Name: run.Name, UID: run.UID}
}

func runRefOf(namespace string, r *Ref) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: farmv1.GroupVersion.String(), Kind: "AgentRun",
		Namespace: namespace, Name: r.Name, UID: r.UID}
}

func rigRef(rig *farmv1.DeviceRig) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: farmv1.GroupVersion.String(), Kind: "DeviceRig",
		Namespace: rig.Namespace, Name: rig.Name, UID: rig.UID}
}
