package followup

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// The operator applies the loop's rule for periodic jobs, with the loop's
// parser: at least state.MinPeriodicGap between two firings, wherever in the
// schedule they fall.
func TestValidateJobRefusesPeriodicJobsTooClose(t *testing.T) {
	for schedule, ok := range map[string]bool{
		"*/10 * * * *": false,
		"0,20 9 * * *": false,
		"50 23 * * *":  true,
		"0,40 * * * *": false, // :40, then :00 of the next hour
		"0 * * * *":    true,
		"0,30 9 * * *": true,
		"0 9 * * 1-5":  true,
	} {
		err := ValidateJob(contract.Job{Op: contract.JobCreate, ID: "j", Kind: contract.JobPeriodic, Schedule: schedule})
		if ok != (err == nil) {
			t.Errorf("periodic %q: %v", schedule, err)
		}
		if err != nil && !strings.Contains(err.Error(), "at least 30m0s apart") {
			t.Errorf("periodic %q: the refusal must name the rule: %v", schedule, err)
		}
	}
	if err := ValidateJob(contract.Job{Op: contract.JobCreate, ID: "j", Kind: contract.JobPeriodic, Schedule: "0 9 * JAN *"}); err == nil {
		t.Error("names are refused, as the loop refuses them")
	}
}

// An agent job's CronJob is owned by its rig (deleting the rig deletes it),
// carries the creating run's UID, and expires: a periodic job after the
// manager's TTL (30 days unless set), a one-time job a day past its minute.
func TestAgentJobCronJobOwnerAndExpiry(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "plan", Namespace: "ns", UID: "run-uid"},
		Spec: farmv1.AgentRunSpec{RigSelector: &farmv1.RigSelector{}, Trigger: "t", Cancel: true}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Name: "rig", Namespace: "ns", UID: "rig-uid"}}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	periodic := contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"}
	for _, tc := range []struct {
		job  contract.Job
		d    JobDefaults
		want time.Time
	}{
		{periodic, JobDefaults{}, now.Add(30 * 24 * time.Hour)},
		{periodic, JobDefaults{AgentJobTTL: 48 * time.Hour}, now.Add(48 * time.Hour)},
		{contract.Job{Op: contract.JobCreate, ID: "call", Kind: contract.JobOneTime, Schedule: "30 14 2 5 *"}, JobDefaults{},
			time.Date(2026, 5, 3, 14, 30, 0, 0, time.UTC)},
	} {
		cj, err := AgentJobCronJob(run, rig, tc.job, now, tc.d)
		if err != nil {
			t.Fatal(err)
		}
		refs := cj.OwnerReferences
		if len(refs) != 1 || refs[0].Kind != "DeviceRig" || refs[0].UID != "rig-uid" || refs[0].Name != "rig" {
			t.Fatalf("%s: owners %+v, want the rig", tc.job.ID, refs)
		}
		if cj.Labels[farmv1.LabelParentUID] != "run-uid" || cj.Annotations[farmv1.AnnotationExpires] != tc.want.Format(time.RFC3339) {
			t.Fatalf("%s: labels %v annotations %v, want expiry %s", tc.job.ID, cj.Labels, cj.Annotations, tc.want)
		}
		req, err := RequestOf(cj)
		if err != nil {
			t.Fatal(err)
		}
		if req.Kind != farmv1.KindAgentJob || req.Rig == nil || req.Rig.UID != "rig-uid" || req.Parent == nil || req.Parent.UID != "run-uid" ||
			req.Expires == nil || !req.Expires.Equal(&metav1.Time{Time: tc.want}) || req.CronJob != cj.Name {
			t.Fatalf("%s: request %+v", tc.job.ID, req)
		}
		if req.Run.Spec.Cancel || req.Run.Spec.RigRef == nil || req.Run.Spec.RigRef.Name != "rig" || req.Run.Labels[farmv1.LabelParentUID] != "run-uid" {
			t.Fatalf("%s: run %+v", tc.job.ID, req.Run)
		}
		p := cj.Spec.JobTemplate.Spec.PodFailurePolicy
		if p == nil || len(p.Rules) != 1 || p.Rules[0].Action != "FailJob" {
			t.Fatalf("%s: a refusal must not be retried: pod failure policy %+v", tc.job.ID, p)
		}
	}
}

func TestFollowUpJobsCarryTheManagersPodSettings(t *testing.T) {
	d := JobDefaults{Image: "manager:1", ServiceAccountName: "fu", ImagePullPolicy: corev1.PullAlways,
		Resources:          corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}},
		SecurityContext:    &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)},
		PodSecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
	}
	parent := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask", Namespace: "ns", UID: "u"}, Spec: farmv1.AgentRunSpec{Trigger: "t"}}
	child := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask-f1", Namespace: "ns"}, Spec: parent.Spec}
	wait, err := WaitCronJob(parent, child, time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), d)
	if err != nil {
		t.Fatal(err)
	}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Name: "rig", Namespace: "ns", UID: "rig-uid"}}
	job, err := AgentJobCronJob(parent, rig, contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *"}, time.Now(), d)
	if err != nil {
		t.Fatal(err)
	}
	for _, cj := range []*batchv1.CronJob{wait, job} {
		spec := cj.Spec.JobTemplate.Spec.Template.Spec
		c := spec.Containers[0]
		if c.Image != "manager:1" || c.ImagePullPolicy != corev1.PullAlways || spec.ServiceAccountName != "fu" {
			t.Errorf("%s: image %q pull policy %q sa %q", cj.Name, c.Image, c.ImagePullPolicy, spec.ServiceAccountName)
		}
		if c.Resources.Requests.Memory().Cmp(resource.MustParse("32Mi")) != 0 {
			t.Errorf("%s: resources %+v", cj.Name, c.Resources)
		}
		if c.SecurityContext == nil || !*c.SecurityContext.ReadOnlyRootFilesystem || spec.SecurityContext == nil || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: security contexts %+v %+v", cj.Name, c.SecurityContext, spec.SecurityContext)
		}
		if c.SecurityContext == d.SecurityContext || spec.SecurityContext == d.PodSecurityContext {
			t.Errorf("%s: the job template aliases the manager's defaults", cj.Name)
		}
	}
}

// The model's recap and context may carry a NUL, which a trigger may not:
// the follow-up's trigger leaves it out rather than be refused.
func TestWaitTriggerDropsNULs(t *testing.T) {
	parent := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ask", Namespace: "ns"}, Spec: farmv1.AgentRunSpec{Trigger: "Ask Ana."}}
	parent.Status.Recap = "sent\x00 it"
	n, _ := NextOf(parent)
	got := WaitTrigger(parent, n, "her\x00 reply")
	if strings.Contains(got, "\x00") || !strings.Contains(got, "Its recap: sent it") || !strings.Contains(got, "check now: her reply") {
		t.Fatalf("trigger %q: want the recap and context without their NULs", got)
	}
}
