// Package agenttools are the engine-side tools (docs/rig-contract.md) that keep
// knowledge across sessions, backed by the rig's state directory
// (internal/state): append_log, save_memory, read_memory, read_logs,
// update_memory; create_job, get_job, list_jobs, finish_job (reported in the
// termination message for the operator to turn into CronJobs); wait; and
// Skill when skills exist.
package agenttools

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/state"
)

// The numbers.
const (
	// MinWaitSeconds and MaxWaitSeconds bound wait (docs/rig-contract.md: 1..60).
	MinWaitSeconds = 1
	MaxWaitSeconds = 60
	// MaxReadLogs bounds read_logs(entries) (ours).
	MaxReadLogs = 200
)

// Tools are the state-backed engine tools of one session.
type Tools struct {
	Dir    *state.Dir
	Clock  engine.Clock
	Skills []state.Skill
}

// Register adds every tool to reg (Skill only when there are skills).
func (t *Tools) Register(reg *engine.Registry) error {
	if t.Clock == nil {
		t.Clock = engine.RealClock{}
	}
	list := []engine.LocalTool{t.appendLog(), t.saveMemory(), t.readMemory(), t.readLogs(), t.updateMemory(),
		t.createJob(), t.getJob(), t.listJobs(), t.finishJob(), t.wait()}
	if len(t.Skills) > 0 {
		list = append(list, t.skill())
	}
	for _, lt := range list {
		if err := reg.Register(lt); err != nil {
			return err
		}
	}
	return nil
}

func spec(name, desc, schema string) provider.ToolSpec {
	return provider.ToolSpec{Name: name, Description: desc, Schema: json.RawMessage(schema)}
}

func fail(err error) engine.Output { return engine.Output{IsError: true, Text: err.Error()} }

func args[T any](c *engine.Call) T {
	var a T
	_ = json.Unmarshal(c.Args, &a) // the schema was checked before the call
	return a
}

func (t *Tools) appendLog() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolAppendLog, "Append an entry to today's log in the rig's state: what you did or learned, for later sessions.",
			`{"type":"object","properties":{"entry":{"type":"string","minLength":1}},"required":["entry"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ Entry string }](c)
			if err := t.Dir.AppendLog(t.Clock.Now(), a.Entry); err != nil {
				return fail(err)
			}
			return engine.Output{Text: "logged"}
		},
	}
}

func (t *Tools) saveMemory() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolSaveMemory, "Save a durable fact to memory.md (kept across sessions on this phone): passcodes hints, where things are, people's preferences.",
			`{"type":"object","properties":{"text":{"type":"string","minLength":1}},"required":["text"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ Text string }](c)
			if err := t.Dir.SaveMemory(t.Clock.Now(), a.Text); err != nil {
				return fail(err)
			}
			return engine.Output{Text: "saved to memory.md"}
		},
	}
}

func (t *Tools) readMemory() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolReadMemory, "Read memory.md: everything saved on this phone by earlier sessions.",
			`{"type":"object","properties":{},"additionalProperties":false}`),
		Run: func(_ context.Context, _ *engine.Call) engine.Output {
			m, err := t.Dir.ReadMemory()
			if err != nil {
				return fail(err)
			}
			if strings.TrimSpace(m) == "" {
				return engine.Output{Text: "memory.md is empty"}
			}
			return engine.Output{Text: "memory.md:\n" + m}
		},
	}
}

func (t *Tools) readLogs() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolReadLogs, fmt.Sprintf("Read the newest log entries (default %d).", state.DefaultLogEntries),
			fmt.Sprintf(`{"type":"object","properties":{"entries":{"type":"integer","minimum":1,"maximum":%d}},"additionalProperties":false}`, MaxReadLogs)),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ Entries int }](c)
			entries, err := t.Dir.ReadLogs(a.Entries)
			if err != nil {
				return fail(err)
			}
			if len(entries) == 0 {
				return engine.Output{Text: "the log is empty"}
			}
			var b strings.Builder
			fmt.Fprintf(&b, "the newest %d log entries, oldest first:\n", len(entries))
			for _, e := range entries {
				fmt.Fprintf(&b, "[%s] %s\n", e.Time.Format("2006-01-02 15:04"), e.Text)
			}
			return engine.Output{Text: b.String()}
		},
	}
}

func (t *Tools) updateMemory() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolUpdateMemory, "Replace one passage of memory.md: old must be its exact text, occurring once; new replaces it (empty: delete).",
			`{"type":"object","properties":{"old":{"type":"string","minLength":1},"new":{"type":"string"}},"required":["old","new"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ Old, New string }](c)
			if err := t.Dir.UpdateMemory(a.Old, a.New); err != nil {
				return fail(err)
			}
			return engine.Output{Text: "memory.md updated"}
		},
	}
}

func (t *Tools) createJob() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolCreateJob, "Schedule a later session on this phone. schedule is a 5-field cron in UTC, \"M H D Mon W\": "+
			"kind one-time (default) names one minute, e.g. \"30 14 2 12 *\"; kind periodic repeats, at least 30 minutes apart. "+
			"context is what the woken session should know. Ending with WAIT after a one-time job uses it as the follow-up.",
			`{"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":40},"description":{"type":"string","minLength":1},`+
				`"schedule":{"type":"string","minLength":9},"context":{"type":"string"},"kind":{"type":"string","enum":["one-time","periodic"]}},`+
				`"required":["id","description","schedule","context"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ ID, Description, Schedule, Context, Kind string }](c)
			now := t.Clock.Now()
			j, err := t.Dir.CreateJob(now, state.NewJob{ID: a.ID, Kind: a.Kind, Schedule: a.Schedule, Description: a.Description, Context: a.Context})
			if err != nil {
				return fail(err)
			}
			c.State.Jobs = append(c.State.Jobs, contract.Job{Op: contract.JobCreate, ID: j.ID, Kind: contract.JobKind(j.Kind),
				Schedule: j.Schedule, Description: j.Description, Context: j.Context})
			t.pickFollowUp(c.State, now)
			return engine.Output{Text: fmt.Sprintf("job %s created (%s, %s UTC); next run %s", j.ID, j.Kind, j.Schedule, j.NextRun.Format(time.RFC3339))}
		},
	}
}

func (t *Tools) getJob() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolGetJob, "Show one job by id.",
			`{"type":"object","properties":{"id":{"type":"string","minLength":1}},"required":["id"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			j, err := t.Dir.GetJob(args[struct{ ID string }](c).ID)
			if err != nil {
				return fail(err)
			}
			return engine.Output{Text: describe(j)}
		},
	}
}

func (t *Tools) listJobs() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolListJobs, "List the jobs on this phone, optionally only those with a status.",
			`{"type":"object","properties":{"status":{"type":"string","enum":["active","done","fail","cancel","all"]}},"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			jobs, err := t.Dir.ListJobs(args[struct{ Status string }](c).Status)
			if err != nil {
				return fail(err)
			}
			if len(jobs) == 0 {
				return engine.Output{Text: "no jobs"}
			}
			lines := make([]string, len(jobs))
			for i, j := range jobs {
				lines[i] = describe(j)
			}
			return engine.Output{Text: strings.Join(lines, "\n")}
		},
	}
}

// pickFollowUp makes the earliest one-time job created in this session and
// still active the WAIT's follow-up (none: the run's default delay).
func (t *Tools) pickFollowUp(s *engine.State, now time.Time) {
	var best *state.Job
	for _, cj := range s.Jobs {
		if cj.Op != contract.JobCreate || cj.Kind != contract.JobOneTime {
			continue
		}
		j, err := t.Dir.GetJob(cj.ID)
		if err != nil || j.Status != state.JobActive || j.Kind != state.KindOneTime {
			continue
		}
		if best == nil || j.NextRun.Before(best.NextRun) {
			best = &j
		}
	}
	if best == nil {
		if s.FollowUp != nil && s.FollowUp.Job != "" {
			s.FollowUp = nil
		}
		return
	}
	mins := max(int(math.Ceil(best.NextRun.Sub(now).Minutes())), 1)
	s.FollowUp = &contract.FollowUp{AfterMinutes: mins, Context: best.Description + ". " + best.Context, Job: best.ID}
}

func describe(j state.Job) string {
	s := fmt.Sprintf("%s: %s, %s %q UTC, %s", j.ID, j.Status, j.Kind, j.Schedule, j.Description)
	if j.Context != "" {
		s += "; context: " + j.Context
	}
	if j.Recap != "" {
		s += "; recap: " + j.Recap
	}
	return s
}

func (t *Tools) finishJob() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolFinishJob, "Finish a job: done, fail, or cancel (a cancelled periodic job stops firing).",
			`{"type":"object","properties":{"id":{"type":"string","minLength":1},"status":{"type":"string","enum":["done","fail","cancel"]},`+
				`"recap":{"type":"string"}},"required":["id","status","recap"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ ID, Status, Recap string }](c)
			j, err := t.Dir.FinishJob(t.Clock.Now(), a.ID, a.Status, a.Recap)
			if err != nil {
				return fail(err)
			}
			c.State.Jobs = append(c.State.Jobs, contract.Job{Op: contract.JobFinish, ID: j.ID, Status: j.Status})
			t.pickFollowUp(c.State, t.Clock.Now())
			return engine.Output{Text: "job " + j.ID + " finished: " + j.Status}
		},
	}
}

func (t *Tools) wait() engine.LocalTool {
	return engine.LocalTool{
		Spec: spec(contract.ToolWait, fmt.Sprintf("Wait %d-%d seconds for the phone (a slow load), then look again.", MinWaitSeconds, MaxWaitSeconds),
			fmt.Sprintf(`{"type":"object","properties":{"seconds":{"type":"integer","minimum":%d,"maximum":%d}},"required":["seconds"],"additionalProperties":false}`, MinWaitSeconds, MaxWaitSeconds)),
		Run: func(ctx context.Context, c *engine.Call) engine.Output {
			n := args[struct{ Seconds int }](c).Seconds
			if n < MinWaitSeconds || n > MaxWaitSeconds {
				return engine.Output{IsError: true, Text: fmt.Sprintf("wait: %d seconds is outside %d-%d", n, MinWaitSeconds, MaxWaitSeconds)}
			}
			if err := t.Clock.Sleep(ctx, time.Duration(n)*time.Second); err != nil {
				return engine.Output{IsError: true, Text: "wait interrupted: " + err.Error()}
			}
			return engine.Output{Text: fmt.Sprintf("waited %d s", n)}
		},
	}
}

func (t *Tools) skill() engine.LocalTool {
	names := make([]string, len(t.Skills))
	for i, s := range t.Skills {
		names[i] = s.Name
	}
	enum, _ := json.Marshal(names)
	return engine.LocalTool{
		Spec: spec(contract.ToolSkill, "Load a skill (a written workflow; the index is in the system prompt) and follow it. "+
			"reference loads one of its reference files instead.",
			`{"type":"object","properties":{"name":{"type":"string","enum":`+string(enum)+`},"reference":{"type":"string"}},"required":["name"],"additionalProperties":false}`),
		Run: func(_ context.Context, c *engine.Call) engine.Output {
			a := args[struct{ Name, Reference string }](c)
			for _, s := range t.Skills {
				if s.Name != a.Name {
					continue
				}
				if a.Reference != "" {
					text, err := s.Reference(a.Reference)
					if err != nil {
						return fail(err)
					}
					return engine.Output{Text: "skill " + s.Name + ", reference " + a.Reference + ":\n" + text}
				}
				text := "skill " + s.Name + ":\n" + s.Body
				if files := s.Files(); len(files) > 0 {
					text += "\n\n(reference files: " + strings.Join(files, ", ") + ")"
				}
				return engine.Output{Text: text}
			}
			return engine.Output{IsError: true, Text: fmt.Sprintf("no skill %q; the skills are %s", a.Name, strings.Join(names, ", "))}
		},
	}
}

// SkillIndex is the system prompt's section that lists the skills ("" when none).
func SkillIndex(skills []state.Skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Skills (written workflows for this phone; load one with Skill(name) before you start a task it covers):")
	for _, s := range skills {
		fmt.Fprintf(&b, "\n- %s: %s", s.Name, s.Description)
	}
	return b.String()
}
