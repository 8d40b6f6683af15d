package attempt

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

func ended(phase corev1.PodPhase, code int32, msg string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "r-a1", CreationTimestamp: metav1.Now()},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{
			Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}},
		}}},
	}
}

func TestClassify(t *testing.T) {
	now := time.Now()
	w := World{Now: now, StartupTimeout: time.Minute}
	msg := func(s string, retry bool) string {
		return `{"sentinel":"` + s + `","recap":"r","exitReason":"end_turn","retryable":` + map[bool]string{true: "true", false: "false"}[retry] + `}`
	}
	disrupted := ended(corev1.PodFailed, 143, "")
	disrupted.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"}}
	evicted := ended(corev1.PodFailed, 137, "")
	evicted.Status.Reason = "Evicted"
	deadline := ended(corev1.PodFailed, 137, "")
	deadline.Status.Reason = "DeadlineExceeded"
	oom := ended(corev1.PodFailed, 137, "")
	oom.Status.ContainerStatuses[0].State.Terminated.Reason = "OOMKilled"
	deleted := ended(corev1.PodFailed, 12, msg("STUCK", true))
	deleted.DeletionTimestamp = &metav1.Time{Time: now}
	noContainer := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}

	cases := []struct {
		name    string
		pod     *corev1.Pod
		class   string
		counted bool
		sent    string
		expl    string
	}{
		{"DONE", ended(corev1.PodSucceeded, 0, msg("DONE", true)), farmv1.OutcomeDone, true, "DONE", ""},
		{"FAIL", ended(corev1.PodFailed, 1, msg("FAIL", true)), farmv1.OutcomeFail, true, "FAIL", ""},
		{"WAIT", ended(corev1.PodFailed, 10, msg("WAIT", true)), farmv1.OutcomeWait, true, "WAIT", ""},
		{"IDLE", ended(corev1.PodFailed, 11, msg("IDLE", true)), farmv1.OutcomeIdle, true, "IDLE", ""},
		{"STUCK", ended(corev1.PodFailed, 12, msg("STUCK", true)), farmv1.OutcomeStuck, true, "STUCK", "STUCK (end_turn, exit 12): r"},
		{"STUCK not retryable", ended(corev1.PodFailed, 13, msg("STUCK", false)), farmv1.OutcomeNotRetryable, true, "STUCK", "no retry"},
		{"budget spent", ended(corev1.PodFailed, 13, `{"sentinel":"STUCK","recap":"r","exitReason":"budget_exhausted","retryable":false}`), farmv1.OutcomeBudget, true, "STUCK", ""},
		{"provider refused the key", ended(corev1.PodFailed, 13, `{"sentinel":"STUCK","recap":"the provider refused the API key (401)","exitReason":"fatal_error","retryable":false}`),
			farmv1.OutcomeNotRetryable, true, "STUCK", "fatal_error): the provider refused the API key"},
		{"bad config", ended(corev1.PodFailed, 2, ""), farmv1.OutcomeInvalidConfig, true, "FAIL", "configuration"},
		{"no message", ended(corev1.PodSucceeded, 0, ""), farmv1.OutcomeDone, true, "DONE", ""},
		{"garbage message", ended(corev1.PodFailed, 10, "{not json"), farmv1.OutcomeWait, true, "WAIT", "not the contract's JSON"},
		{"mismatch", ended(corev1.PodFailed, 12, msg("DONE", true)), farmv1.OutcomeStuck, true, "STUCK", "disagrees"},
		{"crash", ended(corev1.PodFailed, 3, ""), farmv1.OutcomeStuck, true, "STUCK", "crashed"},
		{"signal", ended(corev1.PodFailed, 139, ""), farmv1.OutcomeStuck, true, "STUCK", "signal 11"},
		{"OOM", oom, farmv1.OutcomeStuck, true, "STUCK", "out of memory"},
		{"disruption", disrupted, farmv1.OutcomeInfrastructure, false, "", "disrupted"},
		{"evicted", evicted, farmv1.OutcomeInfrastructure, false, "", "Evicted"},
		{"deadline", deadline, farmv1.OutcomeStuck, true, "STUCK", "deadline"},
		{"session time spent", ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"r","exitReason":"session_deadline","retryable":true}`), farmv1.OutcomeStuck, true, "STUCK", "session_deadline"},
		{"content filter", ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"r","exitReason":"content_filter","retryable":true}`), farmv1.OutcomeStuck, true, "STUCK", "content_filter"},
		{"deleted mid-run", deleted, farmv1.OutcomeInfrastructure, false, "", "deleted"},
		{"never ran", noContainer, farmv1.OutcomeInfrastructure, false, "", "before the loop container ran"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, done := Classify(c.pod, w)
			if !done {
				t.Fatal("not classified as ended")
			}
			if o.Class != c.class || o.Counted != c.counted || o.Sentinel != c.sent {
				t.Fatalf("got %s counted=%v sentinel=%q, want %s counted=%v sentinel=%q (%s)", o.Class, o.Counted, o.Sentinel, c.class, c.counted, c.sent, o.Explanation)
			}
			if !strings.Contains(o.Explanation, c.expl) {
				t.Fatalf("explanation %q does not say %q", o.Explanation, c.expl)
			}
		})
	}
}

func TestClassifyRunningAndStuckPending(t *testing.T) {
	now := time.Now()
	running := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if _, done := Classify(running, World{Now: now}); done {
		t.Fatal("a running pod is not ended")
	}
	if _, done := Classify(running, World{Now: now, NodeUnreachable: true}); done {
		t.Fatal("a pod on a node that cannot report may still run: it is not ended")
	}
	if o, done := Classify(running, World{Now: now, NodeGone: true}); !done || o.Class != farmv1.OutcomeInfrastructure || !o.Evict {
		t.Fatalf("a pod on a node that is gone is a free retry to evict: %+v", o)
	}
	old := metav1.NewTime(now.Add(-10 * time.Minute))
	pulling := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: old}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}}}
	if o, done := Classify(pulling, World{Now: now, StartupTimeout: 5 * time.Minute}); !done || !strings.Contains(o.Explanation, "ImagePullBackOff") || !o.Evict {
		t.Fatalf("a pod that cannot pull its image is a free retry: %+v", o)
	}
	if _, done := Classify(pulling, World{Now: now, StartupTimeout: time.Hour}); done {
		t.Fatal("within the startup timeout a pending pod is not ended")
	}
	cancelled := ended(corev1.PodFailed, 143, "")
	if o, _ := Classify(cancelled, World{Now: now, Cancelling: true}); o.Class != farmv1.OutcomeCancelled || o.Counted {
		t.Fatalf("a stopped attempt is Cancelled and free: %+v", o)
	}
}

func TestApplyAndNext(t *testing.T) {
	run := &farmv1.AgentRun{Spec: farmv1.AgentRunSpec{Limits: farmv1.RunLimits{MaxAttempts: 2, MaxInfraRetries: ptr.To[int32](1)}}}
	if n := Next(&run.Status); n != (NextPod{Attempt: 1}) {
		t.Fatalf("first pod %+v", n)
	}
	run.Status.Attempt = 1
	v := Apply(run, farmv1.AttemptRecord{Attempt: 1, Pod: "r-a1", Outcome: farmv1.OutcomeInfrastructure}, Outcome{Class: farmv1.OutcomeInfrastructure})
	if v.Phase != farmv1.RunRetrying || Next(&run.Status) != (NextPod{Attempt: 1, Retry: 1, Resume: true}) {
		t.Fatalf("after infra: %+v next %+v", v, Next(&run.Status))
	}
	v = Apply(run, farmv1.AttemptRecord{Attempt: 1, Retry: 1, Pod: "r-a1-r1", Outcome: farmv1.OutcomeStuck, Counted: true}, Outcome{Class: farmv1.OutcomeStuck, Counted: true, Sentinel: "STUCK"})
	if v.Phase != farmv1.RunRetrying || Next(&run.Status) != (NextPod{Attempt: 2}) {
		t.Fatalf("after STUCK: %+v next %+v", v, Next(&run.Status))
	}
	run.Status.Attempt = 2
	v = Apply(run, farmv1.AttemptRecord{Attempt: 2, Pod: "r-a2", Outcome: farmv1.OutcomeStuck, Counted: true}, Outcome{Class: farmv1.OutcomeStuck, Counted: true, Sentinel: "STUCK"})
	if v.Phase != farmv1.RunFailed || v.Reason != farmv1.ReasonAttemptsExhausted {
		t.Fatalf("attempts exhausted: %+v", v)
	}
	if !Recorded(&run.Status, "r-a1-r1") || Recorded(&run.Status, "r-a3") {
		t.Fatal("Recorded is wrong")
	}
	for i := 0; i < MaxHistory+10; i++ {
		Apply(run, farmv1.AttemptRecord{Pod: "x"}, Outcome{Class: farmv1.OutcomeInfrastructure})
	}
	if len(run.Status.Attempts) != MaxHistory {
		t.Fatalf("history %d, bound %d", len(run.Status.Attempts), MaxHistory)
	}
}

func TestPodName(t *testing.T) {
	if PodName("run", 2, 0) != "run-a2" || PodName("run", 2, 3) != "run-a2-r3" {
		t.Fatal(PodName("run", 2, 0), PodName("run", 2, 3))
	}
}

// The attempt limit counts the attempt the ended pod was, not the status's
// attempt field: the reconcile that creates a pod leaves the status to a later
// one, so a pod that ends STUCK before any status said Running finds the
// field still at the attempt before (0 for the first).
func TestAttemptLimitCountsTheEndedPod(t *testing.T) {
	stuck := Outcome{Class: farmv1.OutcomeStuck, Counted: true, Sentinel: "STUCK"}
	for _, tc := range []struct {
		name        string
		max, stored int32
		rec         int32
		want        farmv1.RunPhase
	}{
		{"first pod ends before any status said Running", 1, 0, 1, farmv1.RunFailed},
		{"second pod ends before its Running status", 2, 1, 2, farmv1.RunFailed},
		{"attempts left", 2, 0, 1, farmv1.RunRetrying},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &farmv1.AgentRun{Spec: farmv1.AgentRunSpec{Limits: farmv1.RunLimits{MaxAttempts: tc.max}}}
			run.Status.Attempt = tc.stored
			v := Apply(run, farmv1.AttemptRecord{Attempt: tc.rec, Pod: PodName("r", tc.rec, 0), Outcome: farmv1.OutcomeStuck, Counted: true}, stuck)
			if v.Phase != tc.want {
				t.Fatalf("maxAttempts %d, attempt %d ended STUCK: %s (%s), want %s", tc.max, tc.rec, v.Phase, v.Message, tc.want)
			}
			if run.Status.Attempt != tc.rec {
				t.Errorf("status.attempt = %d after recording attempt %d", run.Status.Attempt, tc.rec)
			}
		})
	}
}

// A pod that never reported a start on a node that cannot report is not
// "never started": its kubelet may have started it. A bound pod Pending
// past the startup timeout is replaced only when its node is Ready.
func TestPendingPodOnAnUnreachableNodeCountsAsAlive(t *testing.T) {
	now := time.Now()
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-10 * time.Minute))},
		Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if o, done := Classify(pending, World{Now: now, StartupTimeout: 5 * time.Minute, NodeUnreachable: true}); done {
		t.Fatalf("a Pending pod on an unreachable node was ended: %+v", o)
	}
	if o, done := Classify(pending, World{Now: now, StartupTimeout: 5 * time.Minute}); !done || o.Class != farmv1.OutcomeInfrastructure {
		t.Fatalf("a Pending pod on a Ready node past the startup timeout is a free retry: %+v", o)
	}
	deleting := pending.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	if _, done := Classify(deleting, World{Now: now, StartupTimeout: 5 * time.Minute}); done {
		t.Fatal("a bound pod being deleted is alive until its kubelet confirms")
	}
}

// Configuration errors end the run fast with the kubelet's own words; a pull
// that failed for a reason a retry can fix does not.
func TestConfigErrorsFailFast(t *testing.T) {
	now := time.Now()
	waiting := func(age time.Duration, reason, msg string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
				ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}}
	}
	w := World{Now: now, StartupTimeout: 5 * time.Minute, ConfigErrorGrace: 30 * time.Second}
	for _, tc := range []struct {
		name, reason, msg string
		age               time.Duration
		config, ended     bool
	}{
		{"missing Secret", "CreateContainerConfigError", `secret "model-key" not found`, time.Minute, true, true},
		{"missing Secret, within the grace", "CreateContainerConfigError", `secret "model-key" not found`, 10 * time.Second, false, false},
		{"bad image name", "InvalidImageName", `couldn't parse image name "loop:@@"`, time.Minute, true, true},
		{"image not found", "ErrImagePull", `failed to pull image "r/loop:v9": r/loop:v9: not found`, time.Minute, true, true},
		{"back-off on a denied pull", "ImagePullBackOff", `Back-off pulling image "r/loop": pull access denied, repository does not exist or may require authorization`, time.Minute, true, true},
		{"registry down, within the startup timeout", "ErrImagePull", `dial tcp 10.0.0.1:5000: connect: connection refused`, time.Minute, false, false},
		{"registry down, past the startup timeout", "ImagePullBackOff", `Back-off pulling image "r/loop"`, 6 * time.Minute, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, done := Classify(waiting(tc.age, tc.reason, tc.msg), w)
			if done != tc.ended {
				t.Fatalf("ended = %v, want %v (%+v)", done, tc.ended, o)
			}
			if !done {
				return
			}
			if got := o.Class == farmv1.OutcomeInvalidConfig; got != tc.config {
				t.Fatalf("class %s, want InvalidConfig %v: %s", o.Class, tc.config, o.Explanation)
			}
			if tc.config && (!strings.Contains(o.Explanation, tc.msg) || !strings.Contains(o.Explanation, tc.reason) || !o.Evict || o.Counted) {
				t.Fatalf("a configuration error says the kubelet's reason and message, is not counted, and its pod goes: %+v", o)
			}
		})
	}
}

func TestBackoffDoublesToItsCap(t *testing.T) {
	base := 10 * time.Second
	for n, want := range map[int32]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second,
		5: 160 * time.Second, 6: MaxBackoff, 50: MaxBackoff} {
		if got := Backoff(n, base); got != want {
			t.Errorf("Backoff(%d, %s) = %s, want %s", n, base, got, want)
		}
	}
}

// A pod the stall watchdog stopped is a counted STUCK, Stalled, whatever the
// loop said on its way out; the tokens it reported still count.
func TestClassifyStalled(t *testing.T) {
	pod := ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"stopped","exitReason":"user_cancel","retryable":true,"usage":{"promptTokens":700,"completionTokens":20,"cachedTokens":0}}`)
	pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pod.Annotations = map[string]string{farmv1.AnnotationStalled: "no progress for 600s: last heartbeat 2026-12-01T10:00:00Z, turn 9"}
	o, done := Classify(pod, World{Now: time.Now()})
	if !done || o.Class != farmv1.OutcomeStalled || !o.Counted || o.Sentinel != "STUCK" || !strings.Contains(o.Explanation, "turn 9") {
		t.Fatalf("outcome %+v, ended %v", o, done)
	}
	rec := Record(pod, 1, 0, o, time.Now())
	if rec.ExitReason != ExitReasonStalled || rec.Usage == nil || rec.Usage.PromptTokens != 700 {
		t.Fatalf("record %+v", rec)
	}
	// A run being cancelled records the stop as the cancel.
	if o, _ := Classify(pod, World{Now: time.Now(), Cancelling: true}); o.Class != farmv1.OutcomeCancelled {
		t.Fatalf("cancelled run: outcome %s", o.Class)
	}
}

// Every ending the engine raises, and a pod past its deadline, is a counted,
// retryable STUCK: a fresh attempt follows, up to maxAttempts; an input
// token budget stays final. A pod the kubelet stopped at its deadline is
// recorded with the exit reason attempt_deadline, whatever the loop said
// on its way out.
func TestEngineEndingsAndDeadlinesRetry(t *testing.T) {
	deadline := ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"stopped","exitReason":"user_cancel","retryable":true,"usage":{"promptTokens":500,"completionTokens":5,"cachedTokens":0}}`)
	deadline.Status.Reason = "DeadlineExceeded"
	for _, c := range []struct {
		name   string
		pod    *corev1.Pod
		reason string
	}{
		{"content filter", ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"r","exitReason":"content_filter","retryable":true}`), "content_filter"},
		{"session time", ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"r","exitReason":"session_deadline","retryable":true}`), "session_deadline"},
		{"pod deadline", deadline, ExitReasonAttemptDeadline},
	} {
		o, done := Classify(c.pod, World{Now: time.Now()})
		if !done || o.Class != farmv1.OutcomeStuck || !o.Counted || o.Mismatch {
			t.Fatalf("%s: outcome %+v, ended %v; want a counted STUCK", c.name, o, done)
		}
		for attempt, want := range map[int32]farmv1.RunPhase{1: farmv1.RunRetrying, 3: farmv1.RunFailed} {
			run := &farmv1.AgentRun{Spec: farmv1.AgentRunSpec{Limits: farmv1.RunLimits{MaxAttempts: 3}}}
			rec := Record(c.pod, attempt, 0, o, time.Now())
			v := Apply(run, rec, o)
			if v.Phase != want || run.Status.ExitReason != c.reason || rec.ExitReason != c.reason {
				t.Errorf("%s, attempt %d of 3: %s (%s), exit reason %q/%q; want %s, %s", c.name, attempt, v.Phase, v.Reason,
					run.Status.ExitReason, rec.ExitReason, want, c.reason)
			}
			if want == farmv1.RunFailed && v.Reason != farmv1.ReasonAttemptsExhausted {
				t.Errorf("%s: the last attempt fails the run %s, want AttemptsExhausted", c.name, v.Reason)
			}
		}
	}
	if rec := Record(deadline, 1, 0, mustClassify(t, deadline), time.Now()); rec.Usage == nil || rec.Usage.PromptTokens != 500 {
		t.Errorf("a pod past its deadline keeps the tokens its loop reported: %+v", rec.Usage)
	}
	tokens := ended(corev1.PodFailed, 13, `{"sentinel":"STUCK","recap":"r","exitReason":"budget_exhausted","retryable":false}`)
	run := &farmv1.AgentRun{Spec: farmv1.AgentRunSpec{Limits: farmv1.RunLimits{MaxAttempts: 3}}}
	o := mustClassify(t, tokens)
	if v := Apply(run, Record(tokens, 1, 0, o, time.Now()), o); v.Phase != farmv1.RunFailed || v.Reason != farmv1.ReasonBudgetExhausted {
		t.Errorf("an input token budget spent: %s %s, want Failed BudgetExhausted", v.Phase, v.Reason)
	}
}

func mustClassify(t *testing.T, pod *corev1.Pod) Outcome {
	t.Helper()
	o, done := Classify(pod, World{Now: time.Now()})
	if !done {
		t.Fatal("not ended")
	}
	return o
}

// The attempt record keeps the hash of the system prompt the loop reported.
func TestRecordKeepsTheSystemPromptHash(t *testing.T) {
	pod := ended(corev1.PodSucceeded, 0, `{"sentinel":"DONE","recap":"done","exitReason":"end_turn","usage":{"promptTokens":10},"systemPromptSHA256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}`)
	o, done := Classify(pod, World{Now: time.Now()})
	if !done {
		t.Fatal("not ended")
	}
	if rec := Record(pod, 1, 0, o, time.Now()); rec.SystemPromptSHA256 != "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" {
		t.Errorf("record hash %q", rec.SystemPromptSHA256)
	}
}

// The own-state init step: exit 2 (it cannot give the directory away) is a
// configuration error with its message; killed (137) it is the node's
// trouble, a free retry; an image it cannot pull is the loop's image, a
// configuration error as for the loop container.
func TestInitStepEndings(t *testing.T) {
	failedInit := func(code int32, msg string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-a1", CreationTimestamp: metav1.Now()},
			Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodFailed,
				InitContainerStatuses: []corev1.ContainerStatus{{Name: StateInitContainerName, State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
					Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}}
	}
	o := mustClassify(t, failedInit(2, "loop own-state: the rig's state directory: chown /var/lib/clawfarm/state: operation not permitted\n"))
	if o.Class != farmv1.OutcomeInvalidConfig || o.Counted || o.Sentinel != "FAIL" ||
		!strings.Contains(o.Explanation, "the init step own-state failed (exit 2): loop own-state: the rig's state directory: chown") {
		t.Errorf("own-state exit 2: %+v", o)
	}
	if o := mustClassify(t, failedInit(137, "")); o.Class != farmv1.OutcomeInfrastructure || o.Counted {
		t.Errorf("own-state killed: %+v, want a free retry", o)
	}

	now := time.Now()
	pulling := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
		Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: StateInitContainerName, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: `failed to pull image "r/loop:v9": r/loop:v9: not found`}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}}
	o, done := Classify(pulling, World{Now: now, StartupTimeout: 5 * time.Minute, ConfigErrorGrace: 30 * time.Second})
	if !done || o.Class != farmv1.OutcomeInvalidConfig || !strings.Contains(o.Explanation, "the own-state container cannot start (ErrImagePull)") ||
		!strings.Contains(o.Explanation, "r/loop:v9: not found") {
		t.Errorf("the init step's image not found: ended %v %+v", done, o)
	}
}

// A loop that found its rig not set up ends STUCK with exit reason
// rig_not_ready: the rig's state, not the task's, so a free retry that uses
// no attempt, recorded so that the rig is probed before the next one.
func TestRigNotSetUpIsAFreeRetry(t *testing.T) {
	pod := ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"stopped: the rig's hardware is not set up: Hardware not set up. Run /setup to connect and calibrate.","exitReason":"rig_not_ready","retryable":true,"turns":1}`)
	o := mustClassify(t, pod)
	if o.Class != farmv1.OutcomeInfrastructure || o.Counted || !strings.Contains(o.Explanation, "Hardware not set up") {
		t.Fatalf("outcome %+v, want an uncounted infrastructure failure quoting the rig", o)
	}
	run := &farmv1.AgentRun{Spec: farmv1.AgentRunSpec{Limits: farmv1.RunLimits{MaxAttempts: 1}}}
	now := time.Now()
	rec := Record(pod, 1, 0, o, now)
	v := Apply(run, rec, o)
	if v.Phase != farmv1.RunRetrying || rec.Counted || rec.ExitReason != string(contract.ReasonRigNotReady) {
		t.Fatalf("verdict %+v, record %+v: want a free retry recorded with exit reason rig_not_ready, even at maxAttempts 1", v, rec)
	}
	run.Status.Attempts = append(run.Status.Attempts, rec)
	if at := RigNotSetUpAt(run); !at.Equal(rec.FinishTime.Time) {
		t.Errorf("RigNotSetUpAt %v, want the attempt's finish %v", at, rec.FinishTime)
	}
	stuck := ended(corev1.PodFailed, 12, `{"sentinel":"STUCK","recap":"r","exitReason":"rig_unavailable","retryable":true}`)
	if o := mustClassify(t, stuck); o.Class != farmv1.OutcomeStuck || !o.Counted {
		t.Errorf("a rig that stayed unreachable: %+v, want a counted STUCK as before", o)
	}
}
