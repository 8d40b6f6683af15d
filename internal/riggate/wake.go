package riggate

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Wake-ups (docs/wake-ups.md). PhysiClaw's watch route compares the camera's
// frames a second apart and forgets its baseline after a few seconds
// without a poll, and each poll takes the rig's hardware lock: it is meant
// to be polled every second, on the rig's host, while no session drives the
// phone. So the gateway polls it, for each rig someone asked about in the
// last WakeInterest, while the rig's Lease is free; it keeps the first wake
// it sees until a run takes the rig (the session then looks at the phone),
// and answers the manager's reads of /rigs/<namespace>/<rig>/api/phone/watch
// from that record. Reading it consumes nothing: the manager decides what
// a wake starts, and a wake it could not act on yet is there at its next read.

// WakeInterest is how long after the last read of a rig's watch route the
// gateway keeps polling the rig's own: a manager reads it at every probe
// (15 s by default) of a rig with wake-ups, and no other.
const WakeInterest = 2 * time.Minute

// DefaultWatchInterval is how often the gateway polls a watched rig's own
// watch route, as PhysiClaw's own runtime does.
const DefaultWatchInterval = time.Second

// rigWake is what the gateway knows of one rig's wakes.
type rigWake struct {
	ns, rig string
	up      *url.URL
	asked   time.Time         // the last read of the gateway's route
	pending *contract.RigWake // a wake no session has taken yet
	polling bool
	failing bool // the last poll failed (logged once, not every second)
}

// wakeBook is the gateway's record of its rigs' wakes.
type wakeBook struct {
	mu   sync.Mutex
	rigs map[string]*rigWake
}

// serveWake answers a read of the rig's watch route from the record, and
// starts (or keeps) the rig's watching.
func (g *Gateway) serveWake(w http.ResponseWriter, ns, rig string, up *url.URL) {
	g.wakes.mu.Lock()
	if g.wakes.rigs == nil {
		g.wakes.rigs = map[string]*rigWake{}
	}
	k := rigKey(ns, rig)
	rw := g.wakes.rigs[k]
	if rw == nil {
		rw = &rigWake{ns: ns, rig: rig, up: up}
		g.wakes.rigs[k] = rw
	}
	rw.asked = time.Now()
	answer := contract.RigWake{}
	if rw.pending != nil {
		answer = *rw.pending
	}
	g.wakes.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(answer)
}

// takeWake forgets the rig's kept wake: a run holds the rig now.
func (g *Gateway) takeWake(ns, rig string) {
	g.wakes.mu.Lock()
	defer g.wakes.mu.Unlock()
	if rw := g.wakes.rigs[rigKey(ns, rig)]; rw != nil && rw.pending != nil {
		g.logf("rig %s/%s: a run holds the rig; its wake (%s) is taken", ns, rig, rw.pending.Reason)
		rw.pending = nil
	}
}

// RunWatches polls the watched rigs' own watch routes every WatchInterval
// until ctx ends; it returns at once when WatchInterval is zero.
func (g *Gateway) RunWatches(ctx context.Context) {
	if g.WatchInterval <= 0 {
		return
	}
	t := time.NewTicker(g.WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, rw := range g.watched(time.Now()) {
			if g.heldNow(ctx, rw.ns, rw.rig) {
				g.takeWake(rw.ns, rw.rig)
				g.donePolling(rw, nil, nil)
				continue
			}
			go func() {
				wake, err := g.pollRig(ctx, rw.up)
				g.donePolling(rw, wake, err)
			}()
		}
	}
}

// watched are the rigs read within WakeInterest whose last poll has
// finished, marked polling; the others are forgotten.
func (g *Gateway) watched(now time.Time) []*rigWake {
	g.wakes.mu.Lock()
	defer g.wakes.mu.Unlock()
	var out []*rigWake
	for k, rw := range g.wakes.rigs {
		if now.Sub(rw.asked) > WakeInterest {
			delete(g.wakes.rigs, k)
			continue
		}
		if !rw.polling {
			rw.polling = true
			out = append(out, rw)
		}
	}
	return out
}

// donePolling records a poll's answer: the first wake is kept until a run
// takes the rig.
func (g *Gateway) donePolling(rw *rigWake, wake *contract.RigWake, err error) {
	g.wakes.mu.Lock()
	defer g.wakes.mu.Unlock()
	rw.polling = false
	switch {
	case err != nil:
		if !rw.failing {
			g.logf("rig %s/%s: watch route: %v", rw.ns, rw.rig, err)
		}
		rw.failing = true
	case wake != nil:
		rw.failing = false
		if wake.Wake && rw.pending == nil {
			at := time.Now().UTC().Truncate(time.Millisecond)
			rw.pending = &contract.RigWake{Wake: true, Reason: clip(strings.TrimSpace(wake.Reason), 1024), At: &at}
			g.logf("rig %s/%s: the phone woke: %s", rw.ns, rw.rig, rw.pending.Reason)
		}
	}
}

// heldNow says whether a run holds the rig's Lease.
func (g *Gateway) heldNow(ctx context.Context, ns, rig string) bool {
	var l coordinationv1.Lease
	err := g.Leases.Get(ctx, client.ObjectKey{Namespace: ns, Name: rig}, &l)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return true // not known: leave the phone alone
	}
	return holderOf(&l) != "" && l.DeletionTimestamp == nil
}

// pollRig asks the rig's own watch route once, as its server wants to be
// asked (a loopback Host, no Origin).
func (g *Gateway) pollRig(ctx context.Context, up *url.URL) (*contract.RigWake, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := *up
	u.Path = strings.TrimSuffix(up.Path, "/") + contract.RigWatchPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Host = loopbackHost(up)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	wake, err := contract.ReadRigWake(resp, u.String())
	if err != nil {
		return nil, err
	}
	return &wake, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
