package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/followup"
)

// The follow-up Jobs' role (config/rbac/followup_role.yaml, which the chart
// carries) grants exactly what `manager followup` does: every call the
// command makes in each of its paths is allowed, and every verb granted is
// used by one of them.
func TestFollowUpRoleIsWhatTheCommandDoes(t *testing.T) {
	b, err := os.ReadFile("../../config/rbac/followup_role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string]bool{}
	for _, r := range decodeAll(t, b)[0]["rules"].([]any) {
		for _, g := range dig(r, "apiGroups").([]any) {
			for _, res := range dig(r, "resources").([]any) {
				for _, v := range dig(r, "verbs").([]any) {
					granted[g.(string)+"/"+res.(string)+":"+v.(string)] = true
				}
			}
		}
	}

	used := map[string]bool{}
	for name, path := range followUpPaths(t) {
		calls := path()
		for _, c := range calls {
			if !granted[c] {
				t.Errorf("%s: `manager followup` calls %s, which the follow-up role does not grant", name, c)
			}
			used[c] = true
		}
	}
	for g := range granted {
		if !used[g] {
			t.Errorf("the follow-up role grants %s, which `manager followup` never uses", g)
		}
	}
}

// followUpPaths runs followup.Create down each of its paths on a fake API
// server and returns the calls each made, as group/resource:verb.
func followUpPaths(t *testing.T) map[string]func() []string {
	const ns = "farm"
	parent := &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ask", UID: "run-uid"},
		Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "t", Model: farmv1.ModelSpec{Name: "m"},
			FollowUp: farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](3)}},
		Status: farmv1.AgentRunStatus{Phase: farmv1.RunWaiting},
	}
	rig := &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rig", UID: "rig-uid"}}
	n, _ := followup.NextOf(parent)
	waitCJ, err := followup.WaitCronJob(parent, followup.ChildRun(parent, n, "t"), time.Now(), followup.JobDefaults{})
	if err != nil {
		t.Fatal(err)
	}
	oneTime := contract.Job{Op: contract.JobCreate, ID: "call", Kind: contract.JobOneTime, Schedule: "30 14 2 5 *", Description: "call"}
	jobCJ, err := followup.AgentJobCronJob(parent, rig, oneTime, time.Now(), followup.JobDefaults{})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := parent.DeepCopy()
	cancelled.Spec.Cancel = true

	run := func(req func() followup.Request, cancelOnCreate bool, objs ...client.Object) func() []string {
		return func() []string {
			s := newScheme()
			var calls []string
			note := func(obj runtime.Object, verb string) {
				gvk, err := apiutil.GVKForObject(obj, s)
				if err != nil {
					t.Fatal(err)
				}
				res := strings.ToLower(strings.TrimSuffix(gvk.Kind, "List")) + "s"
				calls = append(calls, gvk.Group+"/"+res+":"+verb)
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&farmv1.AgentRun{}).
				WithInterceptorFuncs(interceptor.Funcs{
					Get: func(ctx context.Context, w client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						note(obj, "get")
						return w.Get(ctx, key, obj, opts...)
					},
					Create: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
						note(obj, "create")
						if _, ok := obj.(*farmv1.AgentRun); ok && cancelOnCreate {
							p := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ask"}}
							if err := w.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))); err != nil {
								return err
							}
						}
						return w.Create(ctx, obj, opts...)
					},
					Patch: func(ctx context.Context, w client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
						note(obj, "patch")
						return w.Patch(ctx, obj, patch, opts...)
					},
					Delete: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
						note(obj, "delete")
						return w.Delete(ctx, obj, opts...)
					},
					List: func(ctx context.Context, w client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
						note(list, "list")
						return w.List(ctx, list, opts...)
					},
					Update: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
						note(obj, "update")
						return w.Update(ctx, obj, opts...)
					},
				}).Build()
			_, _ = followup.Create(context.Background(), c, req(), waitCJ.Name+"-29412000")
			slices.Sort(calls)
			return slices.Compact(calls)
		}
	}
	waitReq := func() followup.Request {
		r, err := followup.RequestOf(waitCJ)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	jobReq := func() followup.Request {
		r, err := followup.RequestOf(jobCJ)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	expired := func() followup.Request {
		r := jobReq()
		r.Expires = &metav1.Time{Time: time.Now().Add(-time.Hour)}
		return r
	}
	return map[string]func() []string{
		"a follow-up":                         run(waitReq, false, parent, waitCJ),
		"a refused follow-up":                 run(waitReq, false, cancelled, waitCJ),
		"a follow-up cancelled as it is made": run(waitReq, true, parent, waitCJ),
		"a one-time agent job":                run(jobReq, false, parent, rig, jobCJ),
		"an expired agent job":                run(expired, false, parent, rig, jobCJ),
	}
}
