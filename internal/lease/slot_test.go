package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// Many holders racing for an account capped at 3 fill exactly 3 slots: the
// create of a slot's Lease is the atomic step, whatever each racer read
// before. A holder asking again gets the slot it has, never a second.
func TestTakeSlotFillsTheCapExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient()
	const racers, limit = 20, 3
	holders := make([]Holder, racers)
	got := make([]string, racers)
	var wg sync.WaitGroup
	for i := range holders {
		holders[i] = Holder{Namespace: ns, Name: fmt.Sprintf("run-%d", i), UID: types.UID(fmt.Sprintf("uid-run-%d", i))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot, fresh, err := TakeSlot(ctx, c, c, "key", limit, holders[i])
			if err != nil || fresh != (slot != "") {
				t.Errorf("TakeSlot: %q, fresh %v, %v", slot, fresh, err)
			}
			got[i] = slot
		}()
	}
	wg.Wait()
	bySlot := map[string]int{}
	for i, slot := range got {
		if slot != "" {
			bySlot[slot]++
			again, fresh, err := TakeSlot(ctx, c, c, "key", limit, holders[i])
			if err != nil || again != slot || fresh {
				t.Errorf("%s asked again: %q, %v; want its slot %s", holders[i].Name, again, err, slot)
			}
		}
	}
	if len(bySlot) != limit {
		t.Fatalf("%d slots taken, want %d: %v", len(bySlot), limit, bySlot)
	}
	for slot, n := range bySlot {
		if n != 1 {
			t.Errorf("slot %s taken by %d holders", slot, n)
		}
	}
	held, err := Slots(ctx, c, ns, "key")
	if err != nil || len(held) != limit {
		t.Fatalf("Slots: %d, %v; want %d", len(held), err, limit)
	}
	for _, l := range held {
		if _, ok := l.Labels[farmv1.LabelRunUID]; ok || IsRigLease(&l) {
			t.Errorf("slot %s reads as a rig's Lease", l.Name)
		}
	}

	// A slot given back goes to the next holder; a lowered cap lets no one
	// take a slot at or past it.
	first := -1
	for i, slot := range got {
		if slot == SlotName("key", 0) {
			first = i
		}
	}
	if n, err := ReleaseSlots(ctx, c, c, holders[first]); err != nil || n != 1 {
		t.Fatalf("ReleaseSlots: %d, %v", n, err)
	}
	late := Holder{Namespace: ns, Name: "late", UID: "uid-late"}
	if slot, _, err := TakeSlot(ctx, c, c, "key", limit, late); err != nil || slot != SlotName("key", 0) {
		t.Fatalf("after a release: %q, %v; want slot 0", slot, err)
	}
	if err := ReleaseSlot(ctx, c, c, SlotName("key", 0), late); err != nil {
		t.Fatal(err)
	}
	if slot, _, err := TakeSlot(ctx, c, c, "key", 0, late); err != nil || slot != "" {
		t.Fatalf("cap 0: %q, %v", slot, err)
	}
	other := Holder{Namespace: ns, Name: "other", UID: "uid-other"}
	if slot, _, err := TakeSlot(ctx, c, c, "other-key", 1, other); err != nil || slot != SlotName("other-key", 0) {
		t.Fatalf("another account's slot: %q, %v", slot, err)
	}
}

// A slot's name and account label fit any Secret name.
func TestSlotNamesFit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", validation.DNS1123SubdomainMaxLength)
	for _, secret := range []string{"key", long} {
		if errs := validation.IsDNS1123Subdomain(SlotName(secret, 12)); len(errs) > 0 {
			t.Errorf("SlotName(%d chars): %v", len(secret), errs)
		}
		if errs := validation.IsValidLabelValue(AccountLabel(secret)); len(errs) > 0 {
			t.Errorf("AccountLabel(%d chars): %v", len(secret), errs)
		}
	}
	if SlotName(long, 0) == SlotName(long+"x", 0) || AccountLabel(long) == AccountLabel(long+"x") {
		t.Error("two long names share a slot")
	}
}
