package followup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
)

const ns = "farm"

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := farmv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newClient(t *testing.T, f interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&farmv1.AgentRun{}).WithInterceptorFuncs(f).Build()
}

func waitingParent(name string, uid types.UID) *farmv1.AgentRun {
	return &farmv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec: farmv1.AgentRunSpec{RigRef: &farmv1.RigReference{Name: "rig"}, Trigger: "Ask Ana for the code.",
			Model: farmv1.ModelSpec{Name: "m"}, FollowUp: farmv1.FollowUpPolicy{MaxChain: ptr.To[int32](3)}},
		Status: farmv1.AgentRunStatus{Phase: farmv1.RunWaiting},
	}
}

// waitFollowUp builds the CronJob the controller makes for parent's WAIT and
// the request its Jobs carry.
func waitFollowUp(t *testing.T, parent *farmv1.AgentRun) (*batchv1.CronJob, Request) {
	t.Helper()
	n, _ := NextOf(parent)
	cj, err := WaitCronJob(parent, ChildRun(parent, n, WaitTrigger(parent, n, "read her reply")), time.Now().Add(time.Minute), JobDefaults{Image: "m"})
	if err != nil {
		t.Fatal(err)
	}
	req, err := RequestOf(cj)
	if err != nil {
		t.Fatal(err)
	}
	return cj, req
}

func refusalEvents(t *testing.T, c client.Client) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Reason == farmv1.EventFollowUpRefused {
			out = append(out, e)
		}
	}
	return out
}

func exists(t *testing.T, c client.Client, obj client.Object, name string) bool {
	t.Helper()
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// `manager followup` makes a WAIT follow-up only for the parent that
// scheduled it, while that parent still waits; every refusal says why in an
// Event and deletes the CronJob that fired, so it fires no more.
func TestCreateChecksTheParent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		parent    func(p *farmv1.AgentRun) *farmv1.AgentRun // nil: the parent is gone
		refused   string                                    // "" when the follow-up is made
		regarding string                                    // the Event's object kind
	}{
		{"waiting", func(p *farmv1.AgentRun) *farmv1.AgentRun { return p }, "", ""},
		{"gone", func(*farmv1.AgentRun) *farmv1.AgentRun { return nil }, "is gone", "CronJob"},
		{"made again", func(p *farmv1.AgentRun) *farmv1.AgentRun { p.UID = "uid-2"; return p }, "is not the run that scheduled", "CronJob"},
		{"cancelled while waiting", func(p *farmv1.AgentRun) *farmv1.AgentRun { p.Spec.Cancel = true; return p }, "was cancelled", "AgentRun"},
		{"cancelled", func(p *farmv1.AgentRun) *farmv1.AgentRun { p.Status.Phase = farmv1.RunCancelled; return p }, "was cancelled", "AgentRun"},
		{"failed", func(p *farmv1.AgentRun) *farmv1.AgentRun { p.Status.Phase = farmv1.RunFailed; return p }, "is Failed, not Waiting", "AgentRun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cj, req := waitFollowUp(t, waitingParent("ask", "uid-1"))
			objs := []client.Object{cj}
			if p := tc.parent(waitingParent("ask", "uid-1")); p != nil {
				objs = append(objs, p)
			}
			c := newClient(t, interceptor.Funcs{}, objs...)
			name, err := Create(ctx, c, req, "ask-fu-29412000")
			made := exists(t, c, &farmv1.AgentRun{}, "ask-f1")
			if tc.refused == "" {
				if err != nil || name != "ask-f1" || !made {
					t.Fatalf("Create = %q, %v; run made %v", name, err, made)
				}
				if !exists(t, c, &batchv1.CronJob{}, "ask-fu") {
					t.Fatal("a WAIT follow-up's CronJob is the controller's to delete once it sees the run")
				}
				return
			}
			var refused *Refused
			if !errors.As(err, &refused) || !strings.Contains(refused.Message, tc.refused) || refused.Unrecorded != nil {
				t.Fatalf("Create = %v, want a refusal saying %q", err, tc.refused)
			}
			if made {
				t.Fatal("a refused follow-up was made")
			}
			evs := refusalEvents(t, c)
			if len(evs) != 1 || evs[0].Regarding.Kind != tc.regarding || evs[0].Note != refused.Message ||
				evs[0].Type != "Warning" || evs[0].ReportingController != ReportingController || evs[0].ReportingInstance != "ask-fu-29412000" {
				t.Fatalf("refusal Events %+v, want one on the %s", evs, tc.regarding)
			}
			if exists(t, c, &batchv1.CronJob{}, "ask-fu") {
				t.Fatal("the refused CronJob is still there: it would fire again")
			}
		})
	}
}

// A firing of a CronJob that was since made again for another run leaves
// that CronJob alone.
func TestRefusalKeepsAnotherRunsCronJob(t *testing.T) {
	_, req := waitFollowUp(t, waitingParent("ask", "uid-1"))
	theirs, _ := waitFollowUp(t, waitingParent("ask", "uid-2"))
	c := newClient(t, interceptor.Funcs{}, theirs, waitingParent("ask", "uid-2"))
	var refused *Refused
	if _, err := Create(context.Background(), c, req, ""); !errors.As(err, &refused) {
		t.Fatalf("Create = %v, want a refusal", err)
	}
	if !exists(t, c, &batchv1.CronJob{}, "ask-fu") {
		t.Fatal("the refusal deleted the new run's CronJob")
	}
}

// A run of the follow-up's name that another parent made is not this
// parent's follow-up: the firing refuses rather than take it for one.
func TestCreateRefusesAnotherParentsRun(t *testing.T) {
	parent := waitingParent("ask", "uid-1")
	cj, req := waitFollowUp(t, parent)
	leftover := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ask-f1",
		Labels: map[string]string{farmv1.LabelParent: "ask", farmv1.LabelParentUID: "uid-0"}}}
	c := newClient(t, interceptor.Funcs{}, parent, cj, leftover)
	var refused *Refused
	if _, err := Create(context.Background(), c, req, ""); !errors.As(err, &refused) || !strings.Contains(refused.Message, "another parent") {
		t.Fatalf("Create = %v, want a refusal naming another parent", err)
	}
	// Its own run there, made by a first try of the same Job, is success.
	mine := leftover.DeepCopy()
	mine.Labels[farmv1.LabelParentUID] = "uid-1"
	c = newClient(t, interceptor.Funcs{}, parent, cj, mine)
	if name, err := Create(context.Background(), c, req, ""); err != nil || name != "ask-f1" {
		t.Fatalf("a retried Job: %q, %v", name, err)
	}
}

// A parent cancelled (or deleted) between the firing's check and its create:
// the firing reads the parent again and cancels what it made.
func TestCreateCancelsWhatItMadeWhenTheParentWasCancelledMeanwhile(t *testing.T) {
	for _, what := range []string{"cancel", "delete"} {
		t.Run(what, func(t *testing.T) {
			ctx := context.Background()
			parent := waitingParent("ask", "uid-1")
			cj, req := waitFollowUp(t, parent)
			c := newClient(t, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*farmv1.AgentRun); ok {
					p := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ask"}}
					var err error
					if what == "cancel" {
						err = c.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`)))
					} else {
						err = c.Delete(ctx, p)
					}
					if err != nil {
						return err
					}
				}
				return c.Create(ctx, obj, opts...)
			}}, parent, cj)
			var refused *Refused
			if _, err := Create(ctx, c, req, ""); !errors.As(err, &refused) || !strings.Contains(refused.Message, "created and then cancelled") {
				t.Fatalf("Create = %v, want a refusal that cancelled the run", err)
			}
			var child farmv1.AgentRun
			if !exists(t, c, &child, "ask-f1") || !child.Spec.Cancel {
				t.Fatalf("the follow-up of a parent %sd meanwhile must be cancelled: %+v", what, child.Spec)
			}
		})
	}
}

func testRig(uid types.UID) *farmv1.DeviceRig {
	return &farmv1.DeviceRig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rig", UID: uid}}
}

// An agent job makes runs while its rig is the one it was made on and until
// it expires, and stops when the run that created it is cancelled; each
// refusal deletes its CronJob.
func TestCreateChecksAnAgentJob(t *testing.T) {
	creator := waitingParent("plan", "run-uid")
	creator.Status.Phase = farmv1.RunSucceeded
	job := contract.Job{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"}
	for _, tc := range []struct {
		name    string
		objs    func() []client.Object
		expired bool
		refused string
	}{
		{"due", func() []client.Object { return []client.Object{testRig("rig-uid"), creator} }, false, ""},
		{"creator gone", func() []client.Object { return []client.Object{testRig("rig-uid")} }, false, ""},
		{"expired", func() []client.Object { return []client.Object{testRig("rig-uid"), creator} }, true, "expired at"},
		{"rig gone", func() []client.Object { return []client.Object{creator} }, false, "rig rig is gone"},
		{"rig made again", func() []client.Object { return []client.Object{testRig("rig-uid-2"), creator} }, false, "deleted and registered again"},
		{"creator cancelled", func() []client.Object {
			c := creator.DeepCopy()
			c.Spec.Cancel = true
			return []client.Object{testRig("rig-uid"), c}
		}, false, "was cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj, err := AgentJobCronJob(creator, testRig("rig-uid"), job, time.Now(), JobDefaults{})
			if err != nil {
				t.Fatal(err)
			}
			req, err := RequestOf(cj)
			if err != nil {
				t.Fatal(err)
			}
			if tc.expired {
				req.Expires = &metav1.Time{Time: time.Now().Add(-time.Minute)}
			}
			c := newClient(t, interceptor.Funcs{}, append(tc.objs(), cj)...)
			name, err := Create(context.Background(), c, req, cj.Name+"-29412000")
			if tc.refused == "" {
				if err != nil || name != "rig-water-29412000" || !exists(t, c, &farmv1.AgentRun{}, name) {
					t.Fatalf("Create = %q, %v", name, err)
				}
				return
			}
			var refused *Refused
			if !errors.As(err, &refused) || !strings.Contains(refused.Message, tc.refused) {
				t.Fatalf("Create = %v, want a refusal saying %q", err, tc.refused)
			}
			if exists(t, c, &farmv1.AgentRun{}, "rig-water-29412000") || exists(t, c, &batchv1.CronJob{}, cj.Name) {
				t.Fatal("a refused agent job made its run or kept its CronJob")
			}
			if len(refusalEvents(t, c)) != 1 {
				t.Fatal("a refusal must be told in an Event")
			}
		})
	}
}
