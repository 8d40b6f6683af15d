package attempt

import (
	"fmt"
	"strings"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// MaxOpeningBytes bounds an attempt's opening message once other runs have
// joined its session: it travels in one environment variable
// (CLAWFARM_TRIGGER), which a kernel caps at 128 KiB, and it goes with every
// request. A run that would push it past the bound does not join.
const MaxOpeningBytes = 64 << 10

// Opening is the opening message of an attempt of run, and how many steer
// messages it carries (the loop delivers the ones after them, --steered).
//
// A run no other run joined opens with its own trigger. Once runs joined its
// session (status.joined), every task is numbered with the name of its run —
// the run's own first, then the collected runs' — and the steer messages
// that came while an earlier attempt ran follow, in the order they came: a
// fresh attempt starts from the whole task as it stands.
func Opening(run *farmv1.AgentRun) (text string, steered int) {
	if len(run.Status.Joined) == 0 {
		return run.Spec.Trigger, 0
	}
	tasks := []farmv1.JoinedRun{{Name: run.Name, Trigger: run.Spec.Trigger}}
	var steer []farmv1.JoinedRun
	for _, j := range run.Status.Joined {
		if j.Mode == farmv1.QueueModeSteer {
			steer = append(steer, j)
		} else {
			tasks = append(tasks, j)
		}
	}
	var b strings.Builder
	if len(tasks) > 1 {
		fmt.Fprintf(&b, "This session serves %d runs, one task each, numbered below. Do all of them in this one session. "+
			"The sentinel and recap you end it with apply to every run, so end it DONE only when every task is done, "+
			"and say in the recap how each one went.\n", len(tasks))
	}
	for i, t := range tasks {
		fmt.Fprintf(&b, "\n%d. (run %s) %s\n", i+1, t.Name, t.Trigger)
	}
	if len(steer) > 0 {
		b.WriteString("\nNew instructions arrived while an earlier attempt of this session ran; they are part of the task now:\n")
		for _, j := range steer {
			fmt.Fprintf(&b, "\n- From run %s: %s\n", j.Name, j.Trigger)
		}
	}
	return strings.TrimSpace(b.String()), len(steer)
}

// OpeningFits reports whether run's opening message stays within
// MaxOpeningBytes with one more run joined.
func OpeningFits(run *farmv1.AgentRun, more farmv1.JoinedRun) bool {
	r := run.DeepCopy()
	r.Status.Joined = append(r.Status.Joined, more)
	text, _ := Opening(r)
	return len(text) <= MaxOpeningBytes && len(r.Status.Joined) <= MaxJoined
}

// MaxJoined is how many runs may join one session (status.joined's bound).
const MaxJoined = 32
