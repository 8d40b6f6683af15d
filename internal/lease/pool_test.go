package lease

import (
	"context"
	"testing"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// A rig's Lease carries its holder's pool, through a hand-over too, so a
// sharded manager's cache holds it (docs/sharding.md).
func TestLeaseCarriesTheHoldersPool(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	a, b := ana, ben
	a.Pool, b.Pool = "a", ""
	if res, err := Acquire(ctx, c, rig, a); err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	if got := stored(t, c, rig).Labels[farmv1.LabelPool]; got != "a" {
		t.Errorf("pool %q, want a", got)
	}
	if ok, err := HandOver(ctx, c, rig, a, b); err != nil || !ok {
		t.Fatalf("hand over: %v %v", ok, err)
	}
	if got, ok := stored(t, c, rig).Labels[farmv1.LabelPool]; ok {
		t.Errorf("handed to a run with no pool, the Lease keeps pool %q", got)
	}
}
