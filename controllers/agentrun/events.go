package agentrun

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Every event the AgentRun controller emits, as constructors. Reasons are stable.
type recorder struct{ events.EventRecorder }

func (r recorder) normal(run *farmv1.AgentRun, related runtime.Object, reason, action, note string, args ...any) {
	r.Eventf(run, related, corev1.EventTypeNormal, reason, action, note, args...)
}

func (r recorder) warning(run *farmv1.AgentRun, related runtime.Object, reason, action, note string, args ...any) {
	r.Eventf(run, related, corev1.EventTypeWarning, reason, action, note, args...)
}

func (r recorder) queued(run *farmv1.AgentRun, why string) {
	r.normal(run, nil, farmv1.ReasonQueued, "Queue", "waiting for a rig: %s", why)
}

func (r recorder) accountBusy(run *farmv1.AgentRun, why string) {
	r.normal(run, nil, farmv1.ReasonModelAccountBusy, "Queue", "%s", why)
}

func (r recorder) rigLeasedAndStarted(run *farmv1.AgentRun, rig *farmv1.DeviceRig, pod *corev1.Pod, attempt, retry int32) {
	r.normal(run, pod, farmv1.ReasonLeased, "Lease", "leased rig %s on node %s; attempt %d (retry %d): pod %s",
		rig.Name, rig.Spec.NodeName, attempt, retry, pod.Name)
}

func (r recorder) rigReleased(run *farmv1.AgentRun, rig string) {
	r.normal(run, nil, farmv1.ReasonReleased, "Release", "released rig %s", rig)
}

func (r recorder) attemptStarted(run *farmv1.AgentRun, pod *corev1.Pod, attempt, retry int32) {
	if retry > 0 {
		r.normal(run, pod, farmv1.EventAttemptStarted, "CreatePod", "attempt %d, infrastructure retry %d: pod %s (resumes from its snapshot)", attempt, retry, pod.Name)
		return
	}
	r.normal(run, pod, farmv1.EventAttemptStarted, "CreatePod", "attempt %d: pod %s", attempt, pod.Name)
}

func (r recorder) podCreateFailed(run *farmv1.AgentRun, err error) {
	r.warning(run, nil, farmv1.ReasonPodCreateFailed, "CreatePod", "cannot create the attempt pod: %v", err)
}

func (r recorder) attemptEnded(run *farmv1.AgentRun, pod *corev1.Pod, rec farmv1.AttemptRecord) {
	kind := corev1.EventTypeNormal
	switch rec.Outcome {
	case farmv1.OutcomeDone, farmv1.OutcomeIdle, farmv1.OutcomeWait:
	default:
		kind = corev1.EventTypeWarning
	}
	r.Eventf(run, pod, kind, farmv1.EventAttemptEnded, "RecordOutcome", "pod %s ended: %s (%s)", pod.Name, rec.Outcome, rec.Message)
}

func (r recorder) mismatch(run *farmv1.AgentRun, pod *corev1.Pod, why string) {
	r.warning(run, pod, farmv1.EventTerminationMessageMismatch, "RecordOutcome", "%s", why)
}

// phase is the Event of a run's new phase: a Warning when it leaves work
// undone (Failed, or a WAIT whose chain is exhausted), else Normal.
func (r recorder) phase(run *farmv1.AgentRun, phase farmv1.RunPhase, reason, message string) {
	if phase == farmv1.RunFailed || reason == farmv1.ReasonFollowUpChainExhausted {
		r.warning(run, nil, reason, "Finish", "%s", message)
		return
	}
	r.normal(run, nil, reason, string(phase), "%s", message)
}

func (r recorder) followUpScheduled(run *farmv1.AgentRun, cronJob, child, at string) {
	r.normal(run, nil, farmv1.ReasonScheduled, "ScheduleFollowUp", "follow-up %s scheduled at %s by CronJob %s", child, at, cronJob)
}

func (r recorder) followUpCreated(run *farmv1.AgentRun, child string, byController bool) {
	if byController {
		r.warning(run, nil, farmv1.EventFollowUpFallback, "CreateFollowUp", "the CronJob did not fire in time; the controller created follow-up %s itself", child)
		return
	}
	r.normal(run, nil, farmv1.ReasonFollowUpCreated, "CreateFollowUp", "follow-up %s exists", child)
}

func (r recorder) agentJob(run *farmv1.AgentRun, op, id, cronJob string, err error) {
	if err != nil {
		r.warning(run, nil, farmv1.EventAgentJobRejected, "AgentJob", "agent job %q (%s) not materialised: %v", id, op, err)
		return
	}
	r.normal(run, nil, farmv1.EventAgentJob, "AgentJob", "agent job %q: %s (CronJob %s)", id, op, cronJob)
}

func (r recorder) stopping(run *farmv1.AgentRun, pod, why string) {
	r.normal(run, nil, farmv1.EventStoppingAttempt, "DeletePod", "stopping pod %s: %s", pod, why)
}

func (r recorder) stalled(run *farmv1.AgentRun, pod *corev1.Pod, why string) {
	r.warning(run, pod, farmv1.ReasonStalled, "DeletePod", "stopping pod %s: %s", pod.Name, why)
}

func (r recorder) pricingInvalid(run *farmv1.AgentRun, pod string, err error) {
	r.warning(run, nil, farmv1.EventPricingInvalid, "PriceAttempt", "the cost of pod %s is left empty: %v", pod, err)
}

func (r recorder) followUpRenamed(run *farmv1.AgentRun, planned, name string) {
	r.warning(run, nil, farmv1.EventFollowUpRenamed, "ScheduleFollowUp",
		"AgentRun %s was made for another run named %s (an earlier run of this name); this run's follow-up is %s",
		planned, run.Name, name)
}

func (r recorder) followUpCancelled(run *farmv1.AgentRun, why string) {
	r.normal(run, nil, farmv1.EventFollowUpCancelled, "CancelFollowUp", "%s", why)
}

func (r recorder) collectedRuns(run *farmv1.AgentRun, rig string, names []string) {
	r.normal(run, nil, farmv1.ReasonCollected, "Collect", "collected %d waiting runs into this session on rig %s: %s", len(names), rig, runNames(names))
}

func (r recorder) collected(run *farmv1.AgentRun, into, rig string, task int) {
	r.normal(run, nil, farmv1.ReasonCollected, "Collect", "collected into run %s's session on rig %s as task %d; this run ends with that session's outcome", into, rig, task)
}

func (r recorder) steered(run *farmv1.AgentRun, into, rig string) {
	r.normal(run, nil, farmv1.ReasonSteered, "Steer", "steered into run %s's running session on rig %s; this run ends with that session's outcome", into, rig)
}

func (r recorder) steerJoined(run *farmv1.AgentRun, from string, n int) {
	r.normal(run, nil, farmv1.ReasonSteered, "Steer", "run %s steered into this session (steer message %d): the loop reads it at its next turn", from, n)
}

func (r recorder) steerUndelivered(run *farmv1.AgentRun, why string) {
	r.warning(run, nil, farmv1.ReasonSteerUndelivered, "Steer", "%s", why)
}
