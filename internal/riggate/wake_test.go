package riggate

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// watchRig is a rig's own server as far as its watch route goes: it answers
// what next holds, once, then no wake; like PhysiClaw it refuses a Host
// that is not loopback and any Origin.
type watchRig struct {
	mu    sync.Mutex
	next  *contract.RigWake
	polls atomic.Int64
}

func (s *watchRig) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if host, _, err := net.SplitHostPort(r.Host); err != nil || !slices.Contains([]string{"127.0.0.1", "localhost"}, host) || r.Header.Get("Origin") != "" {
		http.Error(w, "refused", http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Path != contract.RigWatchPath {
		http.NotFound(w, r)
		return
	}
	s.polls.Add(1)
	s.mu.Lock()
	answer := contract.RigWake{}
	if s.next != nil {
		answer, s.next = *s.next, nil
	}
	s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(answer)
}

func (s *watchRig) wake(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = &contract.RigWake{Wake: true, Reason: reason}
}

// wakeGateway is a gateway that watches one rig (wake-ns/rig-a), its Leases
// in a fake client, and the URL of its route for that rig.
func wakeGateway(t *testing.T, rig *watchRig, objs ...client.Object) (*Gateway, client.Client, string) {
	t.Helper()
	up := httptest.NewServer(rig)
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	leases := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	g := &Gateway{
		Upstream: func(ns, name string) (*url.URL, bool) { return upURL, ns == "wake-ns" && name == "rig-a" },
		Leases:   leases,
		Public:   DefaultPublicPaths,

		WatchInterval: 20 * time.Millisecond,
	}
	front := httptest.NewServer(g)
	t.Cleanup(front.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go g.RunWatches(ctx)
	return g, leases, front.URL + "/rigs/wake-ns/rig-a" + contract.RigWatchPath
}

func readWake(t *testing.T, u string) contract.RigWake {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	var w contract.RigWake
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return w
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The gateway polls a free rig's watch route once someone asks, keeps the
// first wake (reading it consumes nothing), forgets it when a run takes the
// rig, and does not poll while the rig is held.
func TestGatewayKeepsARigsWakeUntilARunTakesTheRig(t *testing.T) {
	rig := &watchRig{}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "wake-ns", Name: "rig-a"}}
	_, leases, route := wakeGateway(t, rig, lease)

	if w := readWake(t, route); w.Wake {
		t.Fatalf("first read %+v: no wake yet", w)
	}
	eventually(t, "the gateway to poll the rig", func() bool { return rig.polls.Load() >= 2 })
	rig.wake("notification banner appeared at top of screen")
	var first contract.RigWake
	eventually(t, "the wake to show on the gateway's route", func() bool { first = readWake(t, route); return first.Wake })
	if first.Reason != "notification banner appeared at top of screen" || first.At == nil {
		t.Fatalf("wake %+v: want the rig's reason and when the gateway saw it", first)
	}
	rig.wake("screen content changed in lower half") // a second wake while the first is kept changes nothing
	time.Sleep(100 * time.Millisecond)
	if again := readWake(t, route); !again.Wake || again.Reason != first.Reason || !again.At.Equal(*first.At) {
		t.Fatalf("second read %+v, want the same wake as the first %+v: reading consumes nothing", again, first)
	}

	// A run takes the rig: the wake is taken, and the rig is not polled.
	lease.Spec.HolderIdentity = ptr.To("run-uid")
	if err := leases.Update(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the wake to be taken", func() bool { return !readWake(t, route).Wake })
	time.Sleep(60 * time.Millisecond)
	held := rig.polls.Load()
	rig.wake("notification banner appeared at top of screen")
	time.Sleep(200 * time.Millisecond)
	if n := rig.polls.Load(); n != held {
		t.Fatalf("%d polls while a run held the rig: the watch route takes the phone's hardware lock", n-held)
	}
	if w := readWake(t, route); w.Wake {
		t.Fatalf("read %+v while the rig is held: want no wake", w)
	}

	// Released: polled again, and the wake it raised meanwhile shows.
	lease.Spec.HolderIdentity = nil
	if err := leases.Update(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the wake after the release", func() bool { return readWake(t, route).Wake })
}

// A rig nobody asks about is not polled; with no watch interval the route
// is not the gateway's and needs a token like any other.
func TestGatewayWatchesOnlyWhatIsAskedFor(t *testing.T) {
	rig := &watchRig{}
	_, _, route := wakeGateway(t, rig)
	time.Sleep(150 * time.Millisecond)
	if n := rig.polls.Load(); n != 0 {
		t.Fatalf("%d polls of a rig whose wakes nobody asked for", n)
	}
	readWake(t, route)
	eventually(t, "the gateway to poll the rig", func() bool { return rig.polls.Load() > 0 })

	off := httptest.NewServer(&Gateway{
		Upstream: func(string, string) (*url.URL, bool) { return &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, true },
		Public:   DefaultPublicPaths,
	})
	defer off.Close()
	route = off.URL + "/rigs/wake-ns/rig-a" + contract.RigWatchPath
	resp, err := http.Get(route)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET %s with wakes off: %s, want 401 (a rig path like any other)", route, resp.Status)
	}
}
