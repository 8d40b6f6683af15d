package followup

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

func TestFireTimeAndSchedule(t *testing.T) {
	finish := time.Date(2026, 12, 31, 23, 50, 10, 0, time.UTC)
	fire := FireTime(finish, 15*time.Minute)
	if want := time.Date(2027, 1, 1, 0, 6, 0, 0, time.UTC); !fire.Equal(want) {
		t.Fatalf("fire %s, want %s (rounded up to the minute)", fire, want)
	}
	if s := PinnedSchedule(fire); s != "6 0 1 1 *" {
		t.Fatalf("schedule %q", s)
	}
	exact := time.Date(2026, 5, 2, 3, 4, 0, 0, time.UTC)
	if !FireTime(exact, 0).Equal(exact) {
		t.Fatal("an exact minute must not move")
	}
}

func TestChainNamesAndTrigger(t *testing.T) {
	root := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask", Namespace: "ns"},
		Spec: farmv1.AgentRunSpec{Trigger: "Ask Ana for the code.", Cancel: true, FollowUp: farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](2)}}}
	root.Status.Recap = "sent the question"
	n, ok := NextOf(root)
	if !ok || n.Name != "ask-f1" || n.Chain != 1 || n.Root != "ask" {
		t.Fatalf("next of root %+v %v", n, ok)
	}
	child := ChildRun(root, n, WaitTrigger(root, n, "read her reply"))
	if child.Spec.Cancel || child.Labels[farmv1.LabelParent] != "ask" || child.Annotations[farmv1.AnnotationChain] != "1" {
		t.Fatalf("child %+v", child.ObjectMeta)
	}
	for _, want := range []string{"sent the question", "read her reply", "Ask Ana for the code."} {
		if !strings.Contains(child.Spec.Trigger, want) {
			t.Fatalf("trigger %q lacks %q", child.Spec.Trigger, want)
		}
	}
	child.Status.Recap = "no reply yet"
	n2, ok := NextOf(child)
	if !ok || n2.Name != "ask-f2" {
		t.Fatalf("second link %+v %v", n2, ok)
	}
	grand := ChildRun(child, n2, WaitTrigger(child, n2, ""))
	if strings.Count(grand.Spec.Trigger, "The task it was working on") != 1 || !strings.HasSuffix(grand.Spec.Trigger, "Ask Ana for the code.") {
		t.Fatalf("triggers must not nest: %q", grand.Spec.Trigger)
	}
	if _, ok := NextOf(grand); ok {
		t.Fatal("maxChain 2 allows no third follow-up")
	}
}

func TestAgentJobValidationAndNames(t *testing.T) {
	for _, j := range []contract.Job{
		{ID: "", Op: contract.JobCreate, Kind: contract.JobOneTime, Schedule: "1 2 3 4 *"},
		{ID: "x", Op: contract.JobCreate, Kind: contract.JobOneTime, Schedule: "@daily"},
		{ID: "x", Op: contract.JobCreate, Kind: "sometimes", Schedule: "1 2 3 4 *"},
	} {
		if ValidateJob(j) == nil {
			t.Errorf("accepted %+v", j)
		}
	}
	long := AgentJobCronJobName("a-very-long-rig-name-indeed", strings.Repeat("Job_ID ", 10))
	if len(long) > 52 || strings.ContainsAny(long, "_ ") {
		t.Fatalf("CronJob name %q is not a valid CronJob name", long)
	}
	if AgentJobCronJobName("rig", "water") != "job-rig-water" {
		t.Fatal(AgentJobCronJobName("rig", "water"))
	}
	if AgentJobCronJobName("rig", "Water Plants") == AgentJobCronJobName("rig", "water-plants") {
		t.Fatal("distinct ids must not collide")
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	for in, want := range map[string]string{"": "is empty", "{": "not a follow-up request", `{"run":{}}`: "names no run"} {
		if _, err := DecodeRequest(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeRequest(%q) = %v, want %q", in, err, want)
		}
	}
}

// A follow-up inherits its parent's limits exactly: an explicit 0 (no free
// retries, no queue timeout) must reach the API server as 0, not be dropped
// and defaulted back to 5 and a day.
func TestChildKeepsExplicitZeroLimits(t *testing.T) {
	root := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask", Namespace: "ns"},
		Spec: farmv1.AgentRunSpec{Trigger: "t", Limits: farmv1.RunLimits{MaxInfraRetries: ptr.To[int32](0), QueueTimeoutSeconds: ptr.To[int32](0)},
			FollowUp: farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](3)}}}
	n, ok := NextOf(root)
	if !ok {
		t.Fatal("a chain of 3 allows a follow-up")
	}
	b, err := json.Marshal(ChildRun(root, n, "t2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"maxInfraRetries":0`, `"queueTimeoutSeconds":0`, `"maxChain":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the follow-up as sent lacks %s: %s", want, b)
		}
	}
}
