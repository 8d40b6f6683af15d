package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/engine/snapshot"
	"github.com/clawfarm/clawfarm/internal/state"
	"github.com/clawfarm/clawfarm/internal/trace/upload"
)

// attemptFiles are what wire opens for one attempt and Close closes.
type attemptFiles struct {
	snapshots *snapshot.Writer
	trace     io.WriteCloser // the event stream's copy in the trace
	upload    *upload.Uploader
	logf      func(string, ...any)
}

// uploadCloseTimeout bounds how long the end of an attempt waits for its
// trace to reach the trace server.
const uploadCloseTimeout = 10 * time.Second

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
	p := &attemptFiles{logf: logf}
	key := snapshot.Key(c.Run, c.Attempt)
	sw, err := snapshot.NewWriter(dir, key, nil, logf)
	if err != nil {
		return nil, err
	}
	p.snapshots = sw
	if removed, err := snapshot.Prune(dir, c.TraceKeep, key); err != nil {
		logf("pruning old traces: %v", err)
	} else if len(removed) > 0 {
		logf("pruned the traces of %d older attempts (keeping %d)", len(removed), c.TraceKeep)
	}
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

// startUpload sends the trace to the trace server as it is written: the
// screens from the snapshot writer, the events through the returned writer.
// notice reports, in the event stream, what the upload could not do.
func (p *attemptFiles) startUpload(c config, notice func(string)) io.Writer {
	ns, name, _ := contract.ParseRunRef(c.Run)
	p.upload = upload.New(upload.Config{
		URL: c.TraceURL, TokenFile: c.TraceTokenFile, Namespace: ns, Run: name, Attempt: c.Attempt,
		LocalTrace: p.snapshots.TracePath(""), Notice: notice,
	})
	p.snapshots.OnScreen(p.upload.Screen)
	return p.upload
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
	if p.upload != nil {
		ctx, cancel := context.WithTimeout(context.Background(), uploadCloseTimeout)
		st := p.upload.Close(ctx)
		cancel()
		if st.Waiting > 0 || st.Dropped > 0 {
			p.logf("trace upload: %d items not sent, %d given up; the full trace is in %s", st.Waiting, st.Dropped, p.snapshots.TracePath(""))
		}
	}
}
