package v1alpha1

// Condition types of an AgentRun.
const (
	// ConditionRigLeased is True while the run holds its rig's Lease.
	ConditionRigLeased = "RigLeased"
	// ConditionSucceeded is Unknown while the run is in flight, True for DONE, IDLE
	// and WAIT, False for FAIL, exhausted attempts, deadlines and cancel.
	ConditionSucceeded = "Succeeded"
	// ConditionFollowUpScheduled is True while a WAIT follow-up is scheduled or created.
	ConditionFollowUpScheduled = "FollowUpScheduled"
	// ConditionFinished is True once the run is in a final phase (Succeeded,
	// Failed or Cancelled), whatever the outcome, and False before: Pending,
	// Queued, Running, Retrying and Waiting (a follow-up is still to come).
	// It is what `kubectl wait --for=condition=Finished` and GitOps tools
	// wait on; Succeeded says how the run ended. Its reason is
	// ReasonInProgress, ReasonWaiting, or the final phase (ReasonSucceeded,
	// ReasonFailed, ReasonCancelled).
	ConditionFinished = "Finished"
	// ConditionReconciling and ConditionStalled are the conditions kstatus
	// (sigs.k8s.io/cli-utils) and the GitOps tools built on it (Flux, Argo
	// CD's health checks, kubectl wait on them) read: Reconciling is True
	// while the run is not finished (the reason and message are Finished's),
	// Stalled is True once it Failed (the reason and message are
	// Succeeded's); a run that Succeeded or was Cancelled has neither, and
	// reads Current. Both are abnormal-true: present only while True, absent
	// otherwise, which kstatus reads as False. A DeviceRig sets Stalled
	// alone: True while it is NotReady or Offline (Failed to kstatus), absent
	// otherwise (Current, or InProgress in maintenance, from its Ready
	// False).
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
	// ConditionAwaitingApproval is True while the loop holds a tool call for
	// a person's answer (status.progress.approval): kubectl claw approve or
	// deny answers it, with the annotations internal/contract declares
	// (AnnotationApproval and the two beside it). Its reason is
	// ReasonApprovalRequested, or ReasonApprovalAnswered once the loop went on.
	ConditionAwaitingApproval = "AwaitingApproval"
	// ConditionModelKey is False while the run waits for the Secret its
	// spec.model.apiKeySecretRef names to exist (ReasonModelKeyMissing), and
	// True once it does, labelled a model key (ReasonModelKeyFound). A run
	// whose key Secret existed when its pod was made has no such condition.
	ConditionModelKey = "ModelKey"
	// ConditionJoined is True while the run's trigger is part of another
	// run's session (status.collectedInto or status.steeredInto; reason
	// ReasonCollected or ReasonSteered), and False with reason
	// ReasonSteerUndelivered once a steer run went back to the queue.
	ConditionJoined = "Joined"
)

// Condition types of a DeviceRig.
const (
	ConditionReady             = "Ready"
	ConditionNodeReady         = "NodeReady"
	ConditionEndpointReachable = "EndpointReachable"
	ConditionCalibrated        = "Calibrated"
	// ConditionBridgeConnected is whether the phone's bridge page polls the
	// rig: it carries screenshots and confirms the clipboard, and is false
	// whenever the page is in the background (during a task, too). It gates
	// nothing; a screenshot or clipboard call may fail while it is False,
	// and the loop reads those errors.
	ConditionBridgeConnected = "BridgeConnected"
)

// Stable reasons of AgentRun conditions.
const (
	ReasonPending           = "Pending"
	ReasonQueued            = "Queued"
	ReasonRigNotFound       = "RigNotFound"
	ReasonNoMatchingRig     = "NoMatchingRig"
	ReasonRigBusy           = "RigBusy"
	ReasonRigNotReady       = "RigNotReady"
	ReasonLeased            = "Leased"
	ReasonReleased          = "Released"
	ReasonRunning           = "Running"
	ReasonRetrying          = "Retrying"
	ReasonDone              = "Done"
	ReasonIdle              = "Idle"
	ReasonWaiting           = "Waiting"
	ReasonFollowedUp        = "FollowedUp"
	ReasonTaskFailed        = "TaskFailed"
	ReasonAttemptsExhausted = "AttemptsExhausted"
	ReasonInfraExhausted    = "InfraRetriesExhausted"
	ReasonBudgetExhausted   = "BudgetExhausted"
	ReasonNotRetryable      = "NotRetryable"
	ReasonInvalidConfig     = "InvalidConfig"
	// ReasonModelKeyMissing: the model-key Secret does not exist yet; no pod
	// is made until it does (ConditionModelKey).
	ReasonModelKeyMissing = "ModelKeyMissing"
	// ReasonModelKeyFound: the model-key Secret exists and is labelled a
	// model key (ConditionModelKey).
	ReasonModelKeyFound     = "ModelKeyFound"
	ReasonCancelled         = "Cancelled"
	ReasonQueueTimeout      = "QueueTimeout"
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	ReasonRigLost           = "RigLost"
	ReasonScheduled         = "Scheduled"
	ReasonFollowUpCreated   = "FollowUpCreated"
	ReasonChainLimitReached = "ChainLimitReached"
	ReasonFollowUpsDisabled = "FollowUpsDisabled"
	// ReasonFollowUpChainExhausted: the agent ended WAIT in the last run
	// followUp.maxChain allows, so no follow-up is made. The run succeeds
	// with this reason, a Warning Event and the chain's length in the
	// message: a chain never ends silently.
	ReasonFollowUpChainExhausted = "FollowUpChainExhausted"
	ReasonPodCreateFailed        = "PodCreateFailed"
	// ReasonStalled: the stall watchdog stopped an attempt whose loop
	// reported no progress for spec.limits.stallSeconds (a Warning Event).
	ReasonStalled = "Stalled"
	// ReasonApprovalRequested: a ToolPolicy sent a tool call for approval.
	ReasonApprovalRequested = "ApprovalRequested"
	// ReasonApprovalAnswered: the loop holds no call for approval.
	ReasonApprovalAnswered = "ApprovalAnswered"
	// ReasonCollected: a collect run joined another run's session.
	ReasonCollected = "Collected"
	// ReasonSteered: a steer run was delivered into a running session.
	ReasonSteered = "Steered"
	// ReasonSteerUndelivered: the session a steer run joined ended before
	// its loop read the run's message; the run queues again as a plain run.
	ReasonSteerUndelivered = "SteerUndelivered"
	// ReasonModelAccountBusy: the run's model account (the Secret its
	// spec.model.apiKeySecretRef names) has as many sessions as its
	// AnnotationMaxSessions allows; the run waits its turn, FIFO, without
	// taking a rig (docs/architecture.md, "Model accounts: a cap per key").
	ReasonModelAccountBusy = "ModelAccountBusy"
)

// Reasons of the Finished condition besides ReasonWaiting and ReasonCancelled:
// a run not yet finished is InProgress (or Waiting for its follow-up); a
// finished one has its final phase as the reason.
const (
	ReasonInProgress = "InProgress"
	ReasonSucceeded  = "Succeeded"
	ReasonFailed     = "Failed"
)

// Reasons of a Waiting run whose follow-up cannot be made: the run fails
// with them (Succeeded and FollowUpScheduled conditions).
const (
	// ReasonFollowUpInvalid: the API server refused the follow-up run or its
	// CronJob as invalid; the Waiting run fails with its message.
	ReasonFollowUpInvalid = "FollowUpInvalid"
	// ReasonFollowUpNameTaken: both names this run's follow-up may take are
	// held by runs other parents made.
	ReasonFollowUpNameTaken = "FollowUpNameTaken"
)

// Reasons of Events on an AgentRun that are not also condition reasons: a
// phase change's Event reuses its condition's reason (Queued, Leased,
// Released, Retrying, Waiting, Done, TaskFailed…).
const (
	// EventAttemptStarted: an attempt pod was created.
	EventAttemptStarted = "AttemptStarted"
	// EventAttemptEnded: an attempt pod ended and its outcome was recorded.
	EventAttemptEnded = "AttemptEnded"
	// EventTerminationMessageMismatch: the loop's termination message and its
	// exit code disagree; the message was trusted.
	EventTerminationMessageMismatch = "TerminationMessageMismatch"
	// EventStoppingAttempt: a live attempt pod is being deleted (cancel,
	// deadline, a deleted rig).
	EventStoppingAttempt = "StoppingAttempt"
	// EventFollowUpFallback: the follow-up CronJob had not fired by its fire
	// time plus its starting deadline; the controller created the run itself.
	EventFollowUpFallback = "FollowUpFallback"
	// EventAgentJob: an agent's create_job or finish_job became a CronJob change.
	EventAgentJob = "AgentJob"
	// EventAgentJobRejected: an agent's job could not be materialised.
	EventAgentJobRejected = "AgentJobRejected"
	// EventFollowUpRenamed: the follow-up's name is held by a run another
	// parent made (an earlier run of the same name); the follow-up takes
	// the name with this run's hash.
	EventFollowUpRenamed = "FollowUpRenamed"
	// EventFollowUpCancelled: the run stopped while Waiting; its follow-up
	// CronJob was deleted, or the follow-up it had made was cancelled.
	EventFollowUpCancelled = "FollowUpCancelled"
	// EventFollowUpRefused: `manager followup` created no run, and says why
	// (the parent is gone, cancelled, failed or not the one that made the
	// CronJob; an agent job expired or lost its rig).
	EventFollowUpRefused = "FollowUpRefused"
	// EventPricingInvalid: an attempt's cost could not be computed (the
	// manager's price list is missing or malformed for the run's model);
	// the cost is left empty and the run goes on.
	EventPricingInvalid = "PricingInvalid"
)

// Reasons of Events on a DeviceRig. A phase change's Event reason is
// EventRigPhasePrefix followed by the phase (PhaseReady, PhaseOffline…).
const (
	// EventStaleLeaseReleased: a Lease whose run is gone was released.
	EventStaleLeaseReleased = "StaleLeaseReleased"
	// EventRigPhasePrefix prefixes the new phase in a phase change's Event.
	EventRigPhasePrefix = "Phase"
	// EventWokeUp: the phone woke and a wake-up run was created.
	EventWokeUp = "WokeUp"
	// EventWakeUpFailed: the phone woke and its wake-up run could not be
	// created (the message says why); the wake is tried again at the next probe.
	EventWakeUpFailed = "WakeUpFailed"
)

// Reasons of a ToolPolicy's Ready condition (ConditionReady).
const (
	// ReasonCompiled: the policy compiles as the loop would compile it.
	ReasonCompiled = "Compiled"
	// ReasonInvalidPolicy: a rule, a webhook or the runSelector is wrong;
	// the message names each.
	ReasonInvalidPolicy = "InvalidPolicy"
)

// Stable reasons of DeviceRig conditions.
const (
	ReasonNodeReady    = "NodeReady"
	ReasonNodeNotReady = "NodeNotReady"
	ReasonNodeNotFound = "NodeNotFound"
	// ReasonNodeCordoned: the node is Ready but cordoned or tainted NoExecute
	// (a drain): the rig is NotReady, and its queue waits.
	ReasonNodeCordoned   = "NodeCordoned"
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	ReasonHealthNotReady = "HealthNotReady"
	ReasonCalibrated     = "Calibrated"
	ReasonNotCalibrated  = "NotCalibrated"
	// ReasonNotSetUp: the rig answers, and says it is not ready: a set-up
	// step is missing, or arm or camera is not connected.
	ReasonNotSetUp = "NotSetUp"
	// ReasonBridgePolling and ReasonBridgeIdle are BridgeConnected's.
	ReasonBridgePolling = "BridgePolling"
	ReasonBridgeIdle    = "BridgeIdle"
	// ReasonRigRefusedHost: the rig's server answered 421 or 403: it
	// accepts only a loopback Host and no foreign Origin, so the endpoint
	// must be the rig gateway in front of it, not the server itself.
	ReasonRigRefusedHost = "RigRefusedHost"
	ReasonUnknown        = "Unknown"
	ReasonRigReady       = "RigReady"
	ReasonMaintenance    = "Maintenance"
)

// Outcomes recorded in AttemptRecord.Outcome.
const (
	OutcomeDone           = "Done"
	OutcomeFail           = "Fail"
	OutcomeWait           = "Wait"
	OutcomeIdle           = "Idle"
	OutcomeStuck          = "Stuck"
	OutcomeBudget         = "BudgetExhausted"
	OutcomeNotRetryable   = "NotRetryable"
	OutcomeInvalidConfig  = "InvalidConfig"
	OutcomeInfrastructure = "Infrastructure"
	OutcomeCancelled      = "Cancelled"
	// OutcomeStalled is a counted STUCK: the stall watchdog stopped the
	// attempt (exit reason "stalled").
	OutcomeStalled = "Stalled"
)

// Labels and annotations the operator puts on what it creates.
const (
	LabelRun        = "farm.clawfarm.dev/run"
	LabelRunUID     = "farm.clawfarm.dev/run-uid"
	LabelRig        = "farm.clawfarm.dev/rig"
	LabelAttempt    = "farm.clawfarm.dev/attempt"
	LabelChainRoot  = "farm.clawfarm.dev/chain-root"
	LabelParent     = "farm.clawfarm.dev/parent"
	LabelJobID      = "farm.clawfarm.dev/job-id"
	LabelKind       = "farm.clawfarm.dev/kind"
	AnnotationChain = "farm.clawfarm.dev/chain"
	AnnotationRetry = "farm.clawfarm.dev/retry"
	// AnnotationStalled, on an attempt pod the stall watchdog is stopping,
	// says what it last saw; the pod's ending is then recorded Stalled.
	AnnotationStalled = "farm.clawfarm.dev/stalled"
	// TaintRig is the taint rig nodes carry; loop pods tolerate it.
	TaintRig = "farm.clawfarm.dev/rig"
	// FinalizerOutcome keeps an attempt pod until its outcome is recorded.
	FinalizerOutcome = "farm.clawfarm.dev/outcome"
	// FinalizerLease keeps a run until its rig's Lease is released.
	FinalizerLease = "farm.clawfarm.dev/lease"
)

// LabelPool is a run's and a rig's pool, the unit a farm shards by
// (docs/sharding.md): a manager started with --shard caches only the objects
// whose pool its selector matches, and everything the operator makes for a
// run carries the run's pool (CarryPool).
const LabelPool = "farm.clawfarm.dev/pool"

// Labels and annotations of follow-ups and agent jobs.
const (
	// LabelParentUID is the UID of the run that asked for this object: on a
	// WAIT follow-up run and its CronJob, the run that ended WAIT; on an agent
	// job's CronJob and the runs it makes, the run whose agent created the job.
	LabelParentUID = "farm.clawfarm.dev/parent-uid"
	// AnnotationCreatedBy names the run whose agent created an agent job.
	AnnotationCreatedBy = "farm.clawfarm.dev/created-by"
	// AnnotationDescription is an agent job's description.
	AnnotationDescription = "farm.clawfarm.dev/description"
	// AnnotationExpires is when an agent job's CronJob stops making runs (RFC 3339).
	AnnotationExpires = "farm.clawfarm.dev/expires"
)

// A model account's cap (docs/architecture.md, "Model accounts: a cap per key").
const (
	// AnnotationMaxSessions, on a model-key Secret, is how many sessions
	// the runs using that key may have at once, a positive integer; a rig
	// administrator sets it. Absent: no cap. On a model-account slot Lease
	// it is the cap the slot was taken under.
	AnnotationMaxSessions = "farm.clawfarm.dev/max-sessions"
	// LabelModelAccount, on a model-account slot Lease, is the model-key
	// Secret the slot is of (its name, or a hash of a name too long for a
	// label value; AnnotationModelAccount has the name).
	LabelModelAccount = "farm.clawfarm.dev/model-account"
	// AnnotationModelAccount, on a model-account slot Lease, is the name of
	// the model-key Secret.
	AnnotationModelAccount = "farm.clawfarm.dev/model-account"
	// KindModelAccountSlot is LabelKind on a model-account slot Lease.
	KindModelAccountSlot = "model-account-slot"
)

// Values of LabelKind on what the follow-up machinery creates.
const (
	// KindFollowUp marks a WAIT follow-up's CronJob.
	KindFollowUp = "followup"
	// KindAgentJob marks an agent job's CronJob.
	KindAgentJob = "agent-job"
	// KindFollowUpJob marks the pods of those CronJobs' Jobs (`manager followup`).
	KindFollowUpJob = "followup-job"
	// KindWakeUp marks a run a rig's wake-up created; LabelRig names the rig.
	KindWakeUp = "wake-up"
)
