package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// readConfigMaps lets subject get the ConfigMaps of ns that names lists, or
// every ConfigMap of ns when names is empty.
func readConfigMaps(t *testing.T, ns, role string, subject rbacv1.Subject, names ...string) {
	t.Helper()
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: names}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}, Subjects: []rbacv1.Subject{subject}}
	for _, o := range []client.Object{r, rb} {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func withConfigMaps(run *farmv1.AgentRun, bootstrap, skills []string) *farmv1.AgentRun {
	for _, n := range bootstrap {
		run.Spec.Bootstrap = append(run.Spec.Bootstrap, farmv1.BootstrapSource{ConfigMapName: n})
	}
	for _, n := range skills {
		run.Spec.Skills = append(run.Spec.Skills, farmv1.SkillSource{ConfigMapName: n})
	}
	return run
}

func repeat(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// A run's bootstrap and skill ConfigMaps reach its system prompt and its
// trace, which its creator reads: a run may name only ConfigMaps its
// creator may get, so a run editor cannot read a ConfigMap through a run.
func TestRunNamesOnlyConfigMapsItsCreatorMayRead(t *testing.T) {
	ctx := context.Background()
	ns, alice := runCreator(t)
	aliceName := "alice-" + ns
	for _, name := range []string{"shared-notes", "private-notes", "other-private"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"AGENTS.md": name}}
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	readConfigMaps(t, ns, "read-shared-notes", user(aliceName), "shared-notes")

	const mayNot = "may not get in namespace"
	inForce(t, "clawfarm-agentrun-configmaps", mayNot, func() error {
		return alice.Create(ctx, withConfigMaps(newRun(ns, "probe"), []string{"private-notes"}, nil))
	})
	refused(t, "a bootstrap ConfigMap the creator may not read, after one they may",
		alice.Create(ctx, withConfigMaps(newRun(ns, "bootstrap"), []string{"shared-notes", "private-notes"}, nil)),
		"spec.bootstrap[1].configMapName names ConfigMap private-notes, which "+aliceName+" "+mayNot+" "+ns+": a run's ConfigMaps reach its system prompt and its trace")
	refused(t, "a skill ConfigMap the creator may not read",
		alice.Create(ctx, withConfigMaps(newRun(ns, "skills"), nil, []string{"shared-notes", "shared-notes", "private-notes"})),
		"spec.skills[2].configMapName names ConfigMap private-notes, which "+aliceName+" "+mayNot)
	refused(t, "a ConfigMap that does not exist yet, which the creator could not read once it does",
		alice.Create(ctx, withConfigMaps(newRun(ns, "later"), []string{"appears-later"}, nil)),
		"names ConfigMap appears-later, which "+aliceName+" "+mayNot)
	allowed(t, "ConfigMaps the creator may read",
		alice.Create(ctx, withConfigMaps(newRun(ns, "readable"), []string{"shared-notes"}, []string{"shared-notes"})))
	// Every item the CRD allows, each checked by name: the checks fit the
	// policy's cost budget.
	allowed(t, "8 bootstrap and 16 skill ConfigMaps the creator may read by name",
		alice.Create(ctx, withConfigMaps(newRun(ns, "full"), repeat(8, "shared-notes"), repeat(16, "shared-notes"))))

	// A creator who may read every ConfigMap of the namespace (the built-in
	// edit and admin roles) names any, in one check.
	bob := "bob-" + ns
	bind(t, ns, "clawfarm-run-editor", user(bob))
	readConfigMaps(t, ns, "read-all-configmaps", user(bob))
	allowed(t, "a creator who may read every ConfigMap names one", func() error {
		var err error
		deadline := time.Now().Add(30 * time.Second)
		for {
			err = as(t, identity{user: bob}).Create(ctx, withConfigMaps(newRun(ns, "bobs"), []string{"private-notes"}, []string{"private-notes"}))
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(200 * time.Millisecond) // the binding takes effect a moment after it is written
		}
	}())

	// On an update, only a name that is new is checked: alice may edit a run
	// an administrator made with a ConfigMap she may not read, but not add one.
	admins := withConfigMaps(newRun(ns, "admins"), []string{"private-notes"}, nil)
	if err := k8s.Create(ctx, admins); err != nil {
		t.Fatal(err)
	}
	allowed(t, "an edit of another field of a run naming a ConfigMap the editor may not read",
		alice.Patch(ctx, runRef(ns, "admins"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"trigger":"Set a 10 minute timer."}}`))))
	allowed(t, "an edit that names the run's own unreadable ConfigMap again, as a skill",
		alice.Patch(ctx, runRef(ns, "admins"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"skills":[{"configMapName":"private-notes"}]}}`))))
	refused(t, "an edit that adds a ConfigMap the editor may not read",
		alice.Patch(ctx, runRef(ns, "admins"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"skills":[{"configMapName":"private-notes"},{"configMapName":"other-private"}]}}`))),
		"spec.skills[1].configMapName names ConfigMap other-private, which "+aliceName+" "+mayNot)
	refused(t, "an edit that swaps a readable bootstrap ConfigMap for one the editor may not read",
		alice.Patch(ctx, runRef(ns, "readable"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"bootstrap":[{"configMapName":"private-notes"}]}}`))),
		"spec.bootstrap[0].configMapName names ConfigMap private-notes")
}

// The follow-up Job copies its parent's ConfigMaps into the follow-up run
// without reading them: its ServiceAccount may not get ConfigMaps, and is
// not asked to.
func TestFollowUpKeepsItsParentsConfigMaps(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	bind(t, ns, "clawfarm-followup", saSubject(ns, followUpSA))
	fu := as(t, serviceAccount(ns, followUpSA, "parent-fu-29000000-x7k2p"))
	parent := withConfigMaps(newRun(ns, "parent"), []string{"private-notes"}, []string{"private-skills"})
	if err := k8s.Create(ctx, parent); err != nil {
		t.Fatal(err)
	}
	parent.Status = farmv1.AgentRunStatus{Phase: farmv1.RunWaiting, Rig: "iphone-01", Attempt: 1}
	if err := k8s.Status().Update(ctx, parent); err != nil {
		t.Fatal(err)
	}
	// The policy is in force: a user who may not read the ConfigMap is refused it.
	carol := "carol-" + ns
	bind(t, ns, "clawfarm-run-editor", user(carol))
	inForce(t, "clawfarm-agentrun-configmaps", "may not get in namespace", func() error {
		return as(t, identity{user: carol}).Create(ctx, withConfigMaps(newRun(ns, "probe"), []string{"private-notes"}, nil))
	})

	req, jobName := waitFollowUpRequest(t, parent)
	name, err := followup.Create(ctx, fu, req, jobName)
	if err != nil {
		t.Fatalf("the follow-up identity creates a follow-up naming its parent's ConfigMaps: %v", err)
	}
	var got farmv1.AgentRun
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got); err != nil {
		t.Fatal(err)
	}
	if b, s := fmt.Sprint(got.Spec.Bootstrap), fmt.Sprint(got.Spec.Skills); b != "[{private-notes}]" || s != "[{private-skills}]" {
		t.Errorf("follow-up bootstrap %s, skills %s; want its parent's private-notes and private-skills", b, s)
	}
}
