// Package runinbox is what reaches a running loop through its own AgentRun:
// the steer messages the manager appends to status.joined (Inbox), and a
// person's answers to the loop's approval requests, in the run's annotations
// (Approver). Both read the run with the pod's service account (the loop's
// role may get it; progress.ReadFunc) in the formats of the pod contract
// (contract.Joined, contract.ParseApprovalAnswer), never through the
// operator's API types. It ships in the loop.
package runinbox

import (
	"context"
	"encoding/json"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
)

// Inbox delivers the run's steer messages into the session: the operator
// appends a steer run to the session's run as a status.joined entry of mode
// steer, and the loop, at every turn boundary, reads its own run and hands
// the model the entries after those the session already has. The session's
// State.Steered is the cursor — the opening message's steer messages
// (--steered), plus what the engine delivered since, restored with a resumed
// attempt's snapshot — so nothing is delivered twice within an attempt, and
// nothing is skipped.
//
// A read that fails is logged and tried again at the next turn boundary: a
// session never ends because the API server could not be read.
type Inbox struct {
	read  progress.ReadFunc
	state *engine.State
	logf  func(string, ...any)
}

// NewInbox is the inbox of the session whose state is st, reading its run
// with read.
func NewInbox(read progress.ReadFunc, st *engine.State, logf func(string, ...any)) *Inbox {
	return &Inbox{read: read, state: st, logf: logf}
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
func (b *Inbox) Take(ctx context.Context) []engine.InboxMessage {
	var run struct {
		Status struct {
			Joined []contract.Joined `json:"joined"`
		} `json:"status"`
	}
	if !readRunInto(ctx, b.read, &run, b.logf, "steer messages", "(tried again at the next turn)") {
		return nil
	}
	var out []engine.InboxMessage
	n := 0
	for _, j := range run.Status.Joined {
		if j.Mode != contract.JoinedModeSteer {
			continue
		}
		if n >= b.state.Steered {
			out = append(out, engine.InboxMessage{From: j.Name, Text: j.Trigger})
		}
		n++
	}
	return out
}
