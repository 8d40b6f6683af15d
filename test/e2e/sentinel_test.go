//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// DONE: the run succeeds on attempt 1 and the phone's timer really runs.
func TestDone(t *testing.T) {
	t.Parallel()
	create(t, newRun("e2e-done", rigDone, "timer", "Set a 5 minute timer in the Clock app and start it."))
	run := waitFinished(t, "e2e-done", farmv1.RunSucceeded)
	if run.Status.Sentinel != "DONE" || run.Status.Attempt != 1 || succeededReason(run) != farmv1.ReasonDone {
		t.Fatalf("sentinel %q attempt %d reason %q, want DONE, 1, Done (%s)", run.Status.Sentinel, run.Status.Attempt, succeededReason(run), attemptsSummary(run))
	}
	if len(run.Status.Attempts) != 1 || run.Status.Attempts[0].Node != cluster.RigHost(rigDone) || *run.Status.Attempts[0].ExitCode != 0 {
		t.Fatalf("attempts %s, want one on %s with exit 0", attemptsSummary(run), cluster.RigHost(rigDone))
	}
	st := rigState(t, rigDone)
	if !st.Timer.Running || st.Timer.DurationSeconds != 300 {
		t.Fatalf("ground truth: timer %+v, want a running 300 s timer", st.Timer)
	}
	rigFree(t, rigDone)
}

// FAIL: the run fails (TaskFailed) without a retry, and nothing was bought.
func TestFail(t *testing.T) {
	onEachHost(t, rigFail, rigKubeletFail, fail)
}

func fail(t *testing.T, rigFail int, sfx string) {
	create(t, newRun("e2e-fail"+sfx, rigFail, "soldout", "Buy the headphones in the Shop app."))
	run := waitFinished(t, "e2e-fail"+sfx, farmv1.RunFailed)
	if run.Status.Sentinel != "FAIL" || succeededReason(run) != farmv1.ReasonTaskFailed || len(run.Status.Attempts) != 1 {
		t.Fatalf("sentinel %q reason %q attempts %s, want FAIL, TaskFailed, one attempt", run.Status.Sentinel, succeededReason(run), attemptsSummary(run))
	}
	st := rigState(t, rigFail)
	if len(st.Shop.Cart) != 0 || len(st.Shop.Orders) != 0 {
		t.Fatalf("ground truth: cart %+v orders %+v, want nothing bought", st.Shop.Cart, st.Shop.Orders)
	}
	if !strings.Contains(st.Page, "Shop/") {
		t.Fatalf("ground truth: page %q, want the Shop's product page where it found Sold Out", st.Page)
	}
	// The trace reached the trace server, wherever the loop ran.
	checkTrace(t, "e2e-fail"+sfx, "FAIL")
	rigFree(t, rigFail)
}

// IDLE: nothing to do; the run succeeds with reason Idle and nothing was sent.
func TestIdle(t *testing.T) {
	onEachHost(t, rigIdle, rigKubeletIdle, idle)
}

func idle(t *testing.T, rigIdle int, sfx string) {
	create(t, newRun("e2e-idle"+sfx, rigIdle, "idle", "Check Messages for anything new; do nothing if there is nothing."))
	run := waitFinished(t, "e2e-idle"+sfx, farmv1.RunSucceeded)
	if run.Status.Sentinel != "IDLE" || succeededReason(run) != farmv1.ReasonIdle {
		t.Fatalf("sentinel %q reason %q, want IDLE, Idle", run.Status.Sentinel, succeededReason(run))
	}
	st := rigState(t, rigIdle)
	if len(st.Messages.Sent) != 0 || st.Foreground != "Messages" {
		t.Fatalf("ground truth: sent %+v, foreground %q; want nothing sent, Messages open", st.Messages.Sent, st.Foreground)
	}
}

// STUCK → a fresh pod → DONE on attempt 2: Shop crashes once (a rigsim
// fault), the agent gives up, the operator starts attempt 2 in a new pod,
// which orders the beans.
func TestStuckThenDone(t *testing.T) {
	t.Parallel()
	run := waitFinished(t, stuckOnceRun(t), farmv1.RunSucceeded)
	a := run.Status.Attempts
	if run.Status.Attempt != 2 || len(a) != 2 || a[0].Sentinel != "STUCK" || !a[0].Counted || a[0].Pod != "e2e-stuck-once-a1" ||
		a[1].Sentinel != "DONE" || a[1].Pod != "e2e-stuck-once-a2" {
		t.Fatalf("attempt %d, attempts %s; want a1 STUCK (counted) then a2 DONE", run.Status.Attempt, attemptsSummary(run))
	}
	st := rigState(t, rigStuckOnce)
	if len(st.Shop.Orders) != 1 || st.Shop.Orders[0].Lines[0].Name != "Coffee Beans" {
		t.Fatalf("ground truth: orders %+v, want one order of Coffee Beans", st.Shop.Orders)
	}
	checkTrace(t, "e2e-stuck-once", "STUCK", "DONE")
}

// stuckOnce creates the STUCK-then-DONE run once, for whichever test asks
// first: TestStuckThenDone checks it and TestTraceViewerInChromium shows
// it, and parallel tests start in no fixed order.
var stuckOnce sync.Once

func stuckOnceRun(t *testing.T) string {
	stuckOnce.Do(func() {
		setFaults(t, rigStuckOnce, `{"crashApp": "Shop"}`)
		create(t, newRun("e2e-stuck-once", rigStuckOnce, "shop", "Order one bag of coffee beans in the Shop app."))
	})
	return "e2e-stuck-once"
}

// STUCK three times → Failed (AttemptsExhausted), three pods.
func TestStuckExhausted(t *testing.T) {
	onEachHost(t, rigStuckAlways, rigKubeletStuckAlways, stuckExhausted)
}

func stuckExhausted(t *testing.T, rigStuckAlways int, sfx string) {
	run := newRun("e2e-stuck-always"+sfx, rigStuckAlways, "always-stuck", "Do something the phone cannot do.")
	run.Spec.Limits.MaxAttempts = 3
	create(t, run)
	run = waitFinished(t, "e2e-stuck-always"+sfx, farmv1.RunFailed)
	if succeededReason(run) != farmv1.ReasonAttemptsExhausted || run.Status.Attempt != 3 || len(run.Status.Attempts) != 3 {
		t.Fatalf("reason %q attempt %d attempts %s; want AttemptsExhausted after 3", succeededReason(run), run.Status.Attempt, attemptsSummary(run))
	}
	for i, a := range run.Status.Attempts {
		if a.Sentinel != "STUCK" || !a.Counted || *a.ExitCode != contract.ExitStuck {
			t.Fatalf("attempt %d: %s, want a counted STUCK with exit %d", i+1, attemptsSummary(run), contract.ExitStuck)
		}
		if a.Node != cluster.RigHost(rigStuckAlways) {
			t.Fatalf("attempt %d ran on %s, want %s", i+1, a.Node, cluster.RigHost(rigStuckAlways))
		}
	}
	rigFree(t, rigStuckAlways)
}

// WAIT → the operator's CronJob → the CronJob controller fires it → the
// follow-up run <run>-f1 (created by `manager followup` in the Job) → DONE.
func TestWaitFollowUp(t *testing.T) {
	onEachHost(t, rigWait, rigKubeletWait, waitFollowUp)
}

func waitFollowUp(t *testing.T, rigWait int, sfx string) {
	run := newRun("e2e-wait"+sfx, rigWait, "ask-ana", "Ask Ana in Messages what time dinner is tomorrow.")
	run.Spec.FollowUp = farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](2), DefaultDelayMinutes: 1}
	create(t, run)
	run = waitRun(t, "e2e-wait"+sfx, runTimeout, "Waiting", func(r *farmv1.AgentRun) bool {
		return r.Status.Phase == farmv1.RunWaiting || r.Status.Phase.Finished()
	})
	fu := run.Status.FollowUp
	if run.Status.Sentinel != "WAIT" || fu == nil || fu.FireTime == nil || fu.Run != "e2e-wait"+sfx+"-f1" {
		t.Fatalf("phase %s sentinel %q followUp %+v; want WAIT with follow-up e2e-wait-f1", run.Status.Phase, run.Status.Sentinel, fu)
	}
	if left := time.Until(fu.FireTime.Time); left > 3*time.Minute {
		t.Fatalf("the follow-up fires in %s: the engine did not take the one-time create_job one minute ahead as the follow-up (jobs %+v)",
			left.Round(time.Second), run.Status.Jobs)
	}
	var cj batchv1.CronJob
	if err := cluster.Client.Get(ctxFor(t, 10*time.Second), client.ObjectKey{Namespace: run.Namespace, Name: fu.CronJob}, &cj); err != nil {
		t.Fatalf("the follow-up CronJob %s: %v", fu.CronJob, err)
	}
	if cj.Spec.TimeZone == nil || *cj.Spec.TimeZone != "Etc/UTC" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Fatalf("CronJob %s: time zone %v, concurrency %s; want Etc/UTC, Forbid", cj.Name, cj.Spec.TimeZone, cj.Spec.ConcurrencyPolicy)
	}
	want := fu.FireTime.UTC()
	if fields := strings.Fields(cj.Spec.Schedule); len(fields) != 5 || fields[0] != itoa(want.Minute()) || fields[1] != itoa(want.Hour()) {
		t.Fatalf("CronJob schedule %q does not pin the fire time %s", cj.Spec.Schedule, want.Format(time.RFC3339))
	}

	// The follow-up run appears once the CronJob controller has fired the
	// CronJob and its Job's `manager followup` has created it — well before
	// the operator's own fallback (fire time + starting deadline) would.
	fallback := fu.FireTime.Add(followup.StartingDeadlineSeconds * time.Second)
	f1 := waitRun(t, "e2e-wait"+sfx+"-f1", time.Until(fu.FireTime.Time)+2*time.Minute, "created", func(*farmv1.AgentRun) bool { return true })
	if !f1.CreationTimestamp.Time.Before(fallback) {
		t.Fatalf("e2e-wait"+sfx+"-f1 was created at %s, not before the fallback at %s", f1.CreationTimestamp, fallback)
	}
	// The CronJob controller's event says it created the Job (the Job itself
	// goes with the CronJob once the follow-up exists).
	fired := ""
	var events corev1.EventList
	if err := cluster.Client.List(ctxFor(t, 10*time.Second), &events, client.InNamespace(run.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "CronJob" && e.InvolvedObject.Name == cj.Name && e.Reason == "SuccessfulCreate" {
			fired = e.Message
		}
	}
	if fired == "" {
		t.Fatalf("no SuccessfulCreate event of the CronJob controller for %s: it did not fire", cj.Name)
	}
	child := waitFinished(t, "e2e-wait"+sfx+"-f1", farmv1.RunSucceeded)
	if child.Status.Sentinel != "DONE" || child.Labels[farmv1.LabelParent] != "e2e-wait"+sfx {
		t.Fatalf("follow-up: sentinel %q parent label %q; want DONE, e2e-wait", child.Status.Sentinel, child.Labels[farmv1.LabelParent])
	}
	if !strings.Contains(child.Spec.Trigger, "waiting for Ana's reply") {
		t.Fatalf("follow-up trigger %q does not carry the parent's recap", child.Spec.Trigger)
	}
	parent := waitFinished(t, "e2e-wait"+sfx, farmv1.RunSucceeded)
	if succeededReason(parent) != farmv1.ReasonFollowedUp {
		t.Fatalf("parent reason %q, want FollowedUp", succeededReason(parent))
	}
	st := rigState(t, rigWait)
	if len(st.Messages.Sent) != 1 || len(st.Messages.Received) != 1 || !strings.Contains(st.Messages.Received[0].Text, "7pm") {
		t.Fatalf("ground truth: sent %+v received %+v; want one question and Ana's answer", st.Messages.Sent, st.Messages.Received)
	}
	t.Logf("WAIT → CronJob %s (%s) → %s DONE", cj.Name, fired, child.Name)
}

func itoa(i int) string { return strconv.Itoa(i) }

// rigFree checks the rig is released: Ready, no Lease.
func rigFree(t *testing.T, rigIndex int) {
	t.Helper()
	r := waitRigPhase(t, rigIndex, farmv1.RigReady, 30*time.Second)
	if leaseHeld(t, rigIndex) {
		t.Fatalf("rig %s: its Lease still has a holder", r.Name)
	}
}
