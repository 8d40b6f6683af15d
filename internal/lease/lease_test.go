package lease

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

const (
	ns  = "farm"
	rig = "rig-0"
)

var (
	ana  = Holder{Namespace: ns, Name: "ana", UID: "uid-ana"}
	ben  = Holder{Namespace: ns, Name: "ben", UID: "uid-ben"}
	cleo = Holder{Namespace: ns, Name: "cleo", UID: "uid-cleo"}
)

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func newClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithObjects(objs...).Build()
}

// heldLease is rig's Lease as hold writes it for h, with a UID as the API
// server would give it.
func heldLease(rig string, h Holder) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: rig, UID: types.UID("lease-" + rig)}}
	hold(l, h)
	return l
}

// stored reads rig's Lease from the client; nil when there is none.
func stored(t *testing.T, c client.Client, rig string) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: rig}, &l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &l
}

// assertHeld fails unless rig's Lease says h holds it: holder identity,
// acquire time and the rig, run and run-uid labels.
func assertHeld(t *testing.T, c client.Client, rig string, h Holder) *coordinationv1.Lease {
	t.Helper()
	l := stored(t, c, rig)
	if l == nil {
		t.Fatalf("rig %s has no Lease, want it held by %s", rig, h.Name)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != string(h.UID) {
		t.Errorf("holder identity %v, want %s", l.Spec.HolderIdentity, h.UID)
	}
	if l.Spec.AcquireTime == nil || time.Since(l.Spec.AcquireTime.Time) > time.Minute {
		t.Errorf("acquire time %v, want about now", l.Spec.AcquireTime)
	}
	want := map[string]string{farmv1.LabelRig: rig, farmv1.LabelRun: h.Name, farmv1.LabelRunUID: string(h.UID)}
	for k, v := range want {
		if l.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, l.Labels[k], v, l.Labels)
		}
	}
	return l
}

func transitions(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

func TestAcquire(t *testing.T) {
	ctx := context.Background()
	c := newClient()

	res, err := Acquire(ctx, c, rig, ana)
	if err != nil || !res.Acquired || res.HeldBy != "" {
		t.Fatalf("acquire of a free rig: %+v %v", res, err)
	}
	first := assertHeld(t, c, rig, ana)
	if transitions(first) != 0 {
		t.Errorf("a new Lease has %d transitions", transitions(first))
	}

	// The holder again: acquired, and the Lease is left as it was.
	if res, err := Acquire(ctx, c, rig, ana); err != nil || !res.Acquired {
		t.Fatalf("acquire by the holder: %+v %v", res, err)
	}
	if again := stored(t, c, rig); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("acquire by the holder rewrote the Lease (resourceVersion %s, was %s)", again.ResourceVersion, first.ResourceVersion)
	}

	// Another run: refused without an error, told who holds the rig.
	res, err = Acquire(ctx, c, rig, ben)
	if err != nil || res.Acquired || res.HeldBy != ana.Name {
		t.Fatalf("acquire of a held rig: %+v %v, want refused, held by %s", res, err, ana.Name)
	}
	if l := assertHeld(t, c, rig, ana); l.ResourceVersion != first.ResourceVersion {
		t.Errorf("a refused acquire changed the Lease")
	}
}

func TestAcquireErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("apiserver down")

	// The create fails for another reason than the Lease existing.
	c := interceptor.NewClient(newClient(), interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return boom },
	})
	if res, err := Acquire(ctx, c, rig, ana); !errors.Is(err, boom) || res.Acquired {
		t.Errorf("failed create: %+v %v", res, err)
	}

	// The Lease existed at the create and was released before the read:
	// not acquired, held by nobody, so the next reconcile tries again.
	c = interceptor.NewClient(newClient(), interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			return apierrors.NewAlreadyExists(leaseResource, obj.GetName())
		},
	})
	if res, err := Acquire(ctx, c, rig, ana); err != nil || res.Acquired || res.HeldBy != "" {
		t.Errorf("lease gone between create and get: %+v %v", res, err)
	}
}

func TestRelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		by     Holder
		remain bool // the Lease is still there, held by ana
	}{
		{"by the holder", ana, false},
		{"by another run", ben, true},
		{"by a run of the same name but another UID", Holder{Namespace: ns, Name: ana.Name, UID: "uid-ana-2"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(heldLease(rig, ana))
			if err := Release(context.Background(), c, rig, tc.by); err != nil {
				t.Fatal(err)
			}
			if tc.remain {
				assertHeld(t, c, rig, ana)
			} else if l := stored(t, c, rig); l != nil {
				t.Errorf("the Lease is still there: %+v", l)
			}
		})
	}
	t.Run("a free rig", func(t *testing.T) {
		if err := Release(context.Background(), newClient(), rig, ana); err != nil {
			t.Errorf("release of a free rig: %v", err)
		}
	})
}

func TestHandOver(t *testing.T) {
	ctx := context.Background()
	c := newClient(heldLease(rig, ana))
	before := stored(t, c, rig)

	ok, err := HandOver(ctx, c, rig, ana, ben)
	if err != nil || !ok {
		t.Fatalf("hand over from the holder: %v %v", ok, err)
	}
	l := assertHeld(t, c, rig, ben)
	if l.UID != before.UID {
		t.Errorf("the Lease was replaced (UID %s, was %s), not handed over", l.UID, before.UID)
	}
	if transitions(l) != 1 {
		t.Errorf("transitions %d after one hand-over, want 1", transitions(l))
	}

	if ok, err := HandOver(ctx, c, rig, ben, cleo); err != nil || !ok {
		t.Fatalf("second hand-over: %v %v", ok, err)
	}
	if l := assertHeld(t, c, rig, cleo); transitions(l) != 2 {
		t.Errorf("transitions %d after two hand-overs, want 2", transitions(l))
	}
}

func TestHandOverRefuses(t *testing.T) {
	deleting := heldLease(rig, ana)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"test/keep"}

	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease // rig's Lease before, nil: free
		from  Holder
	}{
		{"by a run that does not hold the rig", heldLease(rig, ana), ben},
		{"of a free rig", nil, ana},
		{"of a Lease being deleted", deleting, ana},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			c := newClient(objs...)
			before := stored(t, c, rig)
			ok, err := HandOver(context.Background(), c, rig, tc.from, cleo)
			if err != nil || ok {
				t.Fatalf("hand over: %v %v, want refused without an error", ok, err)
			}
			after := stored(t, c, rig)
			switch {
			case before == nil && after != nil:
				t.Errorf("a refused hand-over created a Lease: %+v", after)
			case before != nil && (after == nil || after.ResourceVersion != before.ResourceVersion):
				t.Errorf("a refused hand-over changed the Lease: %+v", after)
			}
			if after != nil {
				assertHeld(t, c, rig, ana)
			}
		})
	}
}

// A Lease that changes between HandOver's read and its write is left as
// the other writer made it.
func TestHandOverLosesARace(t *testing.T) {
	ctx := context.Background()
	base := newClient(heldLease(rig, ana))
	c := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := cl.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			// Another writer renews the Lease after this read.
			var other coordinationv1.Lease
			if err := cl.Get(ctx, key, &other); err != nil {
				return err
			}
			d := int32(30)
			other.Spec.LeaseDurationSeconds = &d
			return cl.Update(ctx, &other)
		},
	})
	ok, err := HandOver(ctx, c, rig, ana, ben)
	if err != nil || ok {
		t.Fatalf("hand over of a Lease changed meanwhile: %v %v, want refused without an error", ok, err)
	}
	l := assertHeld(t, base, rig, ana)
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 30 || transitions(l) != 0 {
		t.Errorf("the other writer's Lease was overwritten: %+v", l.Spec)
	}
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	if l, err := Get(ctx, newClient(), ns, rig); err != nil || l != nil {
		t.Errorf("free rig: %+v %v", l, err)
	}
	l, err := Get(ctx, newClient(heldLease(rig, ana)), ns, rig)
	if err != nil || l == nil || l.Name != rig || *l.Spec.HolderIdentity != string(ana.UID) {
		t.Errorf("held rig: %+v %v", l, err)
	}
	if l, err := Get(ctx, newClient(heldLease(rig, ana)), "elsewhere", rig); err != nil || l != nil {
		t.Errorf("another namespace: %+v %v", l, err)
	}
	boom := errors.New("apiserver down")
	c := interceptor.NewClient(newClient(), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return boom
		},
	})
	if l, err := Get(ctx, c, ns, rig); !errors.Is(err, boom) || l != nil {
		t.Errorf("failed read: %+v %v", l, err)
	}
}

func TestHeldBy(t *testing.T) {
	// rig-stale carries ana's run-uid label but is held by ben.
	stale := heldLease("rig-stale", ben)
	stale.Labels[farmv1.LabelRunUID] = string(ana.UID)
	deleting := heldLease("rig-deleting", ana)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"test/keep"}
	elsewhere := heldLease("rig-elsewhere", Holder{Namespace: "elsewhere", Name: ana.Name, UID: ana.UID})

	c := newClient(heldLease("rig-a", ana), heldLease("rig-b", ben), heldLease("rig-c", ana), stale, deleting, elsewhere)
	for _, tc := range []struct {
		h    Holder
		want []string
	}{
		{ana, []string{"rig-a", "rig-c"}},
		{ben, []string{"rig-b"}},
		{cleo, nil},
	} {
		got, err := HeldBy(context.Background(), c, tc.h)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("held by %s: %v, want %v", tc.h.Name, got, tc.want)
		}
	}
}

func TestHolderRun(t *testing.T) {
	name, uid := HolderRun(heldLease(rig, ana))
	if name != ana.Name || uid != ana.UID {
		t.Errorf("holder run %q %q, want %q %q", name, uid, ana.Name, ana.UID)
	}
	name, uid = HolderRun(&coordinationv1.Lease{})
	if name != "" || uid != "" {
		t.Errorf("holder of an empty Lease %q %q", name, uid)
	}
}

func TestHolderOfAndIsRigLease(t *testing.T) {
	run := &farmv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ana", UID: "uid-ana"}}
	if h := HolderOf(run); h != ana {
		t.Errorf("holder of run %+v", h)
	}
	if !IsRigLease(heldLease(rig, ana)) {
		t.Error("a held rig's Lease is not a rig Lease")
	}
	if IsRigLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Labels: map[string]string{"app": "x"}}}) {
		t.Error("a foreign Lease counts as a rig Lease")
	}
}

func TestReleaseStale(t *testing.T) {
	ctx := context.Background()

	t.Run("deletes the Lease as read", func(t *testing.T) {
		c := newClient(heldLease(rig, ana))
		if err := ReleaseStale(ctx, c, stored(t, c, rig)); err != nil {
			t.Fatal(err)
		}
		if l := stored(t, c, rig); l != nil {
			t.Errorf("the stale Lease is still there: %+v", l)
		}
	})

	t.Run("keeps a Lease re-taken since it was read", func(t *testing.T) {
		c := newClient(heldLease(rig, ana))
		read := stored(t, c, rig)
		if ok, err := HandOver(ctx, c, rig, ana, ben); err != nil || !ok {
			t.Fatalf("hand over: %v %v", ok, err)
		}
		if err := ReleaseStale(ctx, c, read); err != nil {
			t.Fatalf("a conflict is no error: %v", err)
		}
		assertHeld(t, c, rig, ben)
	})

	t.Run("a Lease already gone", func(t *testing.T) {
		if err := ReleaseStale(ctx, newClient(), heldLease(rig, ana)); err != nil {
			t.Errorf("release of a gone Lease: %v", err)
		}
	})

	t.Run("guarded by UID and resourceVersion", func(t *testing.T) {
		var got client.DeleteOptions
		c := interceptor.NewClient(newClient(heldLease(rig, ana)), interceptor.Funcs{
			Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				got.ApplyOptions(opts)
				return cl.Delete(ctx, obj, opts...)
			},
		})
		read := stored(t, c, rig)
		if err := ReleaseStale(ctx, c, read); err != nil {
			t.Fatal(err)
		}
		p := got.Preconditions
		if p == nil || p.UID == nil || *p.UID != read.UID || p.ResourceVersion == nil || *p.ResourceVersion != read.ResourceVersion {
			t.Errorf("delete preconditions %+v, want UID %s and resourceVersion %s", p, read.UID, read.ResourceVersion)
		}
	})

	t.Run("other errors are returned", func(t *testing.T) {
		boom := errors.New("apiserver down")
		c := interceptor.NewClient(newClient(heldLease(rig, ana)), interceptor.Funcs{
			Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return boom },
		})
		if err := ReleaseStale(ctx, c, heldLease(rig, ana)); !errors.Is(err, boom) {
			t.Errorf("failed delete: %v", err)
		}
	})
}
