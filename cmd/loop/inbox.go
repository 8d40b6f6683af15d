package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
)

// runInbox delivers the run's steer messages into the session: the operator
// appends a steer run to the session's run as a status.joined entry of mode
// steer, and the loop, at every turn boundary, reads its own run (the
// loop's role may get it) and hands the model the entries after those the
// session already has. The session's State.Steered is the cursor — the
// opening message's steer messages (--steered), plus what the engine
// delivered since, restored with a resumed attempt's snapshot — so nothing
// is delivered twice within an attempt, and nothing is skipped.
//
// A read that fails is logged and tried again at the next turn boundary: a
// session never ends because the API server could not be read.
type runInbox struct {
	read  progress.ReadFunc
	state *engine.State
	logf  func(string, ...any)
}

// readTimeout bounds one read of the run: a turn never waits longer for it.
const readTimeout = 5 * time.Second

// readRunInto reads the run once, within readTimeout, and decodes it into
// v. A failure is logged (unless ctx ended) as "reading the run for
// <what>: <err> <retry>" and reported false: the caller tries again later.
func readRunInto(ctx context.Context, read progress.ReadFunc, v any, logf func(string, ...any), what, retry string) bool {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	raw, err := read(rctx)
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil && ctx.Err() == nil {
		logf("reading the run for %s: %v %s", what, err, retry)
	}
	return err == nil
}

// Take reads the run once and returns its undelivered steer messages, in order.
func (b *runInbox) Take(ctx context.Context) []engine.InboxMessage {
	var run struct {
		Status struct {
			Joined []struct {
				Name    string `json:"name"`
				Mode    string `json:"mode"`
				Trigger string `json:"trigger"`
			} `json:"joined"`
		} `json:"status"`
	}
	if !readRunInto(ctx, b.read, &run, b.logf, "steer messages", "(tried again at the next turn)") {
		return nil
	}
	var out []engine.InboxMessage
	n := 0
	for _, j := range run.Status.Joined {
		if j.Mode != "steer" {
			continue
		}
		if n >= b.state.Steered {
			out = append(out, engine.InboxMessage{From: j.Name, Text: j.Trigger})
		}
		n++
	}
	return out
}

// inboxFor is the session's inbox: nil without a run to read (no --run, or
// no way to reach the API server, which is logged).
func inboxFor(c config, st *engine.State, logf func(string, ...any)) engine.Inbox {
	if c.Run == "" {
		return nil
	}
	read, err := newRunReader(c.Run)
	if err != nil {
		logf("steer messages will not be delivered: %v", err)
		return nil
	}
	return &runInbox{read: read, state: st, logf: logf}
}

// newRunReader reads the run with the pod's service account; tests replace it.
var newRunReader = progress.NewInClusterReader
