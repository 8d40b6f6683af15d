package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/engine/snapshot"
	"github.com/clawfarm/clawfarm/internal/state"
)

// attemptFiles are what wire opens for one attempt and Close closes.
type attemptFiles struct {
	snapshots *snapshot.Writer
	trace     io.WriteCloser // the event stream's copy in the trace
}

// openState opens (and locks) the rig's state directory; without --state-dir
// a temporary one serves this attempt alone and is removed by done.
func openState(path string, logf func(string, ...any)) (dir *state.Dir, done func(), err error) {
	tmp := ""
	if path == "" {
		if tmp, err = os.MkdirTemp("", "clawfarm-state-"); err != nil {
			return nil, nil, err
		}
		logf("no --state-dir: memory, logs, jobs and snapshots live in %s for this attempt only", tmp)
		path = tmp
	}
	if dir, err = state.Open(path); err != nil {
		return nil, nil, err
	}
	return dir, func() {
		dir.Close()
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}, nil
}

// wire gives ec the production policies (policies.Wire) over the state
// directory, with the skills of the state directory and of --skills-dirs, a
// snapshot after every round and the event trace; with --resume the session
// goes on from the attempt's snapshot. It returns what must be closed.
func wire(ec *engine.Config, dir *state.Dir, c config, logf func(string, ...any)) (*attemptFiles, error) {
	p := &attemptFiles{}
	key := snapshot.Key(c.Run, c.Attempt)
	sw, err := snapshot.NewWriter(dir, key, nil, logf)
	if err != nil {
		return nil, err
	}
	p.snapshots = sw
	st := &engine.State{}
	if c.Resume {
		snap, msgs, err := snapshot.Load(dir, key)
		switch {
		case err == nil:
			st, ec.Resume = &snap.State, msgs
			sw.Adopt(snap, msgs)
		case errors.Is(err, snapshot.ErrNone):
			logf("resume requested but this attempt has no snapshot yet (%v): starting fresh", err)
		default:
			logf("resume requested but the snapshot cannot be used (%v): starting fresh", err)
		}
	}
	ec.State = st

	skills, err := state.LoadSkills(append([]string{dir.Path("skills")}, c.SkillsDirs...)...)
	if err != nil {
		logf("some skills were skipped: %v", err)
	}
	if err := policies.Wire(ec, dir, skills); err != nil {
		return nil, err
	}
	ec.Observers = append(ec.Observers, sw)

	f, err := os.OpenFile(sw.TracePath("events.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	p.trace = f
	return p, nil
}

func (p *attemptFiles) Close() {
	if p == nil {
		return
	}
	if p.snapshots != nil {
		p.snapshots.Close()
	}
	if p.trace != nil {
		p.trace.Close()
	}
}
