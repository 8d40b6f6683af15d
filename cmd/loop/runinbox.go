package main

import (
	"fmt"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/progress"
	"github.com/clawfarm/clawfarm/internal/runinbox"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// What reaches the session through its own run (internal/runinbox): the
// steer inbox and the approver, each wired only when there is a run to read.

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
	return runinbox.NewInbox(read, st, logf)
}

// toolPoliciesFor compiles the run's ToolPolicies into the hook chain's
// member and the approver their Approve decisions need (nil without a run
// to read: such calls are then denied, saying why).
func toolPoliciesFor(c config, clock engine.Clock, logf func(string, ...any)) (*toolpolicy.Policies, engine.Approver, error) {
	set, err := toolpolicy.Decode(c.ToolPolicies)
	if err != nil {
		return nil, nil, err
	}
	p, err := toolpolicy.Compile(set)
	if err != nil {
		return nil, nil, fmt.Errorf("tool policies: %w", err)
	}
	p.Bind(c.Run, c.Attempt, logf)
	if p.Empty() || !set.MayAskApproval() || c.Run == "" {
		return p, nil, nil
	}
	read, err := newRunReader(c.Run)
	if err != nil {
		logf("calls that need approval will be denied: %v", err)
		return p, nil, nil
	}
	allowance := time.Duration(set.LongestApprovalTimeout()*toolpolicy.ApprovalWaitsPerAttempt) * time.Second
	return p, runinbox.NewApprover(read, clock, allowance, logf), nil
}

// newRunReader reads the run with the pod's service account; tests replace it.
var newRunReader = progress.NewInClusterReader
