package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// The flags for the pods the manager creates reach those pods: loop pods
// (attempt.BuildPod) and follow-up Jobs (the CronJobs' job template).

func parseFlags(t *testing.T, args ...string) (*managerFlags, string, error) {
	t.Helper()
	f := newManagerFlags()
	var out bytes.Buffer
	f.fs.SetOutput(&out)
	err := f.parse(args)
	return f, out.String(), err
}

func TestPodFlagsReachLoopPodsAndFollowUpJobs(t *testing.T) {
	f, out, err := parseFlags(t,
		"--image-pull-policy=Always",
		`--loop-resources={"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"memory":"1Gi"}}`,
		`--loop-security-context={"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}`,
		`--loop-pod-security-context={"runAsUser":1000,"runAsGroup":1000,"fsGroup":1000}`,
		`--followup-resources={"requests":{"cpu":"10m","memory":"32Mi"},"limits":{"memory":"64Mi"}}`,
		`--followup-security-context={"readOnlyRootFilesystem":true,"runAsNonRoot":true,"runAsUser":65532}`,
		`--followup-pod-security-context={"seccompProfile":{"type":"RuntimeDefault"}}`,
	)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	loop, fu := f.podDefaults()

	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: "u"},
		Spec: farmv1.AgentRunSpec{Trigger: "go", Model: farmv1.ModelSpec{Name: "m"}}}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rig"},
		Spec: farmv1.DeviceRigSpec{NodeName: "node", Endpoint: farmv1.RigEndpoint{URL: "http://rig/mcp"}}}
	pod := attempt.BuildPod(attempt.Spec{Run: run, Rig: rig, Attempt: 1, Defaults: loop})
	c := pod.Spec.Containers[0]
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("loop pull policy %q", c.ImagePullPolicy)
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("250m")) != 0 {
		t.Errorf("loop cpu request %s", q.String())
	}
	if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("loop memory limit %s", q.String())
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("loop container securityContext %+v", c.SecurityContext)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 1000 || psc.FSGroup == nil || *psc.FSGroup != 1000 {
		t.Errorf("loop pod securityContext %+v", pod.Spec.SecurityContext)
	}

	// A run's spec.pod.resources replaces the default; two pods never share
	// the defaults' maps.
	run.Spec.Pod = &farmv1.PodOverrides{Resources: &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}
	own := attempt.BuildPod(attempt.Spec{Run: run, Rig: rig, Attempt: 2, Defaults: loop})
	if r := own.Spec.Containers[0].Resources; r.Requests.Cpu().Cmp(resource.MustParse("2")) != 0 || len(r.Limits) != 0 {
		t.Errorf("spec.pod.resources did not replace the default: %+v", r)
	}
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("9")
	*pod.Spec.SecurityContext.RunAsUser = 0
	if again := attempt.BuildPod(attempt.Spec{Run: &farmv1.AgentRun{ObjectMeta: run.ObjectMeta, Spec: farmv1.AgentRunSpec{}}, Rig: rig, Attempt: 3, Defaults: loop}); again.Spec.Containers[0].Resources.Requests.Cpu().Cmp(resource.MustParse("250m")) != 0 ||
		*again.Spec.SecurityContext.RunAsUser != 1000 {
		t.Error("a pod's resources or security context alias the manager's defaults")
	}

	child := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run-f1"}, Spec: run.Spec}
	for name, build := range map[string]func() (*corev1.PodSpec, error){
		"WAIT follow-up": func() (*corev1.PodSpec, error) {
			cj, err := followup.WaitCronJob(run, child, time.Now().Add(time.Hour), fu)
			if err != nil {
				return nil, err
			}
			return &cj.Spec.JobTemplate.Spec.Template.Spec, nil
		},
		"agent job": func() (*corev1.PodSpec, error) {
			job := contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"}
			cj, err := followup.AgentJobCronJob(run, rig, job, time.Now(), fu)
			if err != nil {
				return nil, err
			}
			return &cj.Spec.JobTemplate.Spec.Template.Spec, nil
		},
	} {
		spec, err := build()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := spec.Containers[0]
		if c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("%s: pull policy %q, want the manager's --image-pull-policy", name, c.ImagePullPolicy)
		}
		if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("64Mi")) != 0 {
			t.Errorf("%s: memory limit %s", name, q.String())
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || *sc.RunAsUser != 65532 {
			t.Errorf("%s: container securityContext %+v", name, c.SecurityContext)
		}
		if psc := spec.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v", name, spec.SecurityContext)
		}
	}
}

func TestPodFlagsUnsetLeaveThePodsAsBefore(t *testing.T) {
	f, out, err := parseFlags(t, "--loop-resources=", "--followup-security-context=null")
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	loop, fu := f.podDefaults()
	if loop.SecurityContext != nil || loop.PodSecurityContext != nil || len(loop.Resources.Requests)+len(loop.Resources.Limits) != 0 {
		t.Errorf("loop defaults %+v, want none", loop)
	}
	if fu.SecurityContext != nil || fu.PodSecurityContext != nil || len(fu.Resources.Requests)+len(fu.Resources.Limits) != 0 {
		t.Errorf("follow-up defaults %+v, want none", fu)
	}
	if loop.ImagePullPolicy != corev1.PullIfNotPresent || fu.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("pull policies %q, %q; want IfNotPresent", loop.ImagePullPolicy, fu.ImagePullPolicy)
	}
}

func TestPodFlagsRefuseBadValuesNamingTheFlag(t *testing.T) {
	for _, tc := range []struct{ arg, flag, says string }{
		{`--loop-resources={"request":{"cpu":"1"}}`, "-loop-resources", `unknown field "request"`},
		{`--loop-resources={"requests":{"cpu":"lots"}}`, "-loop-resources", "quantities must match"},
		{`--followup-resources={"requests":{"memory":"2Gi"},"limits":{"memory":"1Gi"}}`, "-followup-resources", "above its limit"},
		{`--loop-security-context={"runAsUser":"root"}`, "-loop-security-context", "runAsUser"},
		{`--followup-security-context={"readOnlyRootFs":true}`, "-followup-security-context", `unknown field "readOnlyRootFs"`},
		{`--loop-pod-security-context={"fsGroup":-1}`, "-loop-pod-security-context", "negative"},
		{`--followup-pod-security-context={"runAsUser":1}{}`, "-followup-pod-security-context", "trailing data"},
		{`--followup-pod-security-context=[1]`, "-followup-pod-security-context", "PodSecurityContext"},
		{`--image-pull-policy=Sometimes`, "-image-pull-policy", "Always, IfNotPresent or Never"},
	} {
		_, out, err := parseFlags(t, tc.arg)
		if err == nil {
			t.Errorf("%s was accepted", tc.arg)
			continue
		}
		if !strings.Contains(err.Error(), tc.flag) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %q should name %s and say %q", tc.arg, err, tc.flag, tc.says)
		}
		if !strings.Contains(out, tc.flag) {
			t.Errorf("%s: the manager's output %q does not name the flag", tc.arg, out)
		}
	}
}
