package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/engine/snapshot"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/rig/wire"
	"github.com/clawfarm/clawfarm/internal/state"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

// withPolicies wires the production policies into h as cmd/loop does
// (policies.Wire), over a state directory and the skills in it, from st (nil:
// a fresh state). With snap, a snapshot is written after every round.
func withPolicies(t *testing.T, h *harness, dir *state.Dir, st *engine.State, snap bool) *snapshot.Writer {
	t.Helper()
	skills, err := state.LoadSkills(dir.Path("skills"))
	if err != nil {
		t.Fatal(err)
	}
	h.cfg.State = st
	if err := policies.Wire(&h.cfg, dir, skills); err != nil {
		t.Fatal(err)
	}
	if !snap {
		return nil
	}
	w, err := snapshot.NewWriter(dir, snapshot.Key(h.cfg.Run, h.cfg.Attempt), h.clock.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.cfg.Observers = append(h.cfg.Observers, w)
	t.Cleanup(func() { w.Close() })
	return w
}

func openDir(t *testing.T) *state.Dir {
	t.Helper()
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func step(summary, tool, args string) pt.Step {
	return pt.Step{Calls: []pt.Call{{Name: "note", Args: `{"summary":"` + summary + `"}`}, {Name: tool, Args: args}}, PromptTokens: 1000, CompletionTokens: 20}
}

const onePlan = `{"user_said":"ask Ana","steps":[{"title":"ask","status":"in_progress"}]}`

// The state tools through the loop: memory, logs, jobs (reported in the
// termination message, the one-time job becoming the WAIT's follow-up), wait, Skill.
func TestStateToolsThroughTheLoop(t *testing.T) {
	dir := openDir(t)
	os.MkdirAll(dir.Path("skills", "message"), 0o755)
	os.WriteFile(dir.Path("skills", "message", "SKILL.md"), []byte("---\nname: message\ndescription: Send a message to a contact\n---\nOpen Messages, pick the contact, type, Send."), 0o644)
	os.WriteFile(dir.Path("skills", "message", "contacts.md"), []byte("Ana: +1 555 0100"), 0o644)
	// The fake clock starts at 2026-11-29 12:00 UTC.
	h := newHarness(t,
		step("planning", "update_progress", onePlan),
		step("remembering", "save_memory", `{"text":"Ana prefers texts to calls"}`),
		step("fixing memory", "update_memory", `{"old":"texts to calls","new":"texts, never calls"}`),
		step("reading memory", "read_memory", `{}`),
		step("logging", "append_log", `{"entry":"asked Ana about dinner"}`),
		step("reading logs", "read_logs", `{"entries":5}`),
		step("loading skill", "Skill", `{"name":"message"}`),
		step("loading contacts", "Skill", `{"name":"message","reference":"contacts.md"}`),
		step("bad job", "create_job", `{"id":"spam","kind":"periodic","schedule":"*/5 * * * *","description":"check","context":""}`),
		step("scheduling", "create_job", `{"id":"read-ana-reply","schedule":"20 12 29 11 *","description":"read Ana's answer","context":"asked about dinner"}`),
		step("periodic", "create_job", `{"id":"water","kind":"periodic","schedule":"0 9 * * *","description":"water plants","context":"daily"}`),
		step("listing", "list_jobs", `{"status":"active"}`),
		step("cancelling", "finish_job", `{"id":"water","status":"cancel","recap":"no plants after all"}`),
		step("waiting", "wait", `{"seconds":5}`),
		step("later look", "create_job", `{"id":"second-look","schedule":"0 13 29 11 *","description":"look again","context":"if still silent"}`),
		step("no second look", "finish_job", `{"id":"read-ana-reply","status":"cancel","recap":"replaced"}`),
		step("first look after all", "create_job", `{"id":"read-ana-reply","schedule":"20 12 29 11 *","description":"read Ana's answer","context":"asked about dinner"}`),
		end("WAIT"),
	)
	withPolicies(t, h, dir, nil, false)
	m := h.run(context.Background())
	want(t, m, contract.Wait, contract.ReasonEndTurn, contract.ExitWait)
	tr := h.sess.Transcript()
	checkPairing(t, tr)
	mem, _ := dir.ReadMemory()
	if !strings.Contains(mem, "Ana prefers texts, never calls") {
		t.Errorf("memory.md %q", mem)
	}
	if r := resultsFor(tr, "read_memory"); len(r) != 1 || !strings.Contains(r[0], "texts, never calls") {
		t.Errorf("read_memory %q", r)
	}
	if r := resultsFor(tr, "read_logs"); len(r) != 1 || !strings.Contains(r[0], "[2026-11-29 12:00] asked Ana about dinner") {
		t.Errorf("read_logs %q", r)
	}
	if r := resultsFor(tr, "Skill"); len(r) != 2 || !strings.Contains(r[0], "Open Messages") || !strings.Contains(r[0], "contacts.md") || !strings.Contains(r[1], "+1 555 0100") {
		t.Errorf("Skill %q", r)
	}
	if !strings.Contains(string(h.model.Body(0)), "message: Send a message to a contact") {
		t.Error("the skill index is not in the system prompt")
	}
	if r := resultsFor(tr, "create_job"); len(r) != 5 || !strings.Contains(r[0], "at least 30m0s apart") || !strings.Contains(r[1], "next run 2026-11-29T12:20:00Z") {
		t.Errorf("create_job %q", r)
	}
	if r := resultsFor(tr, "list_jobs"); len(r) != 1 || !strings.Contains(r[0], "read-ana-reply: active") || !strings.Contains(r[0], "water: active") {
		t.Errorf("list_jobs %q", r)
	}
	if h.clock.Slept() != 5e9 {
		t.Errorf("wait slept %s", h.clock.Slept())
	}
	wantJobs := []contract.Job{
		{Op: contract.JobCreate, ID: "read-ana-reply", Kind: contract.JobOneTime, Schedule: "20 12 29 11 *", Description: "read Ana's answer", Context: "asked about dinner"},
		{Op: contract.JobCreate, ID: "water", Kind: contract.JobPeriodic, Schedule: "0 9 * * *", Description: "water plants", Context: "daily"},
		{Op: contract.JobFinish, ID: "water", Status: "cancel"},
		{Op: contract.JobCreate, ID: "second-look", Kind: contract.JobOneTime, Schedule: "0 13 29 11 *", Description: "look again", Context: "if still silent"},
		{Op: contract.JobFinish, ID: "read-ana-reply", Status: "cancel"},
		{Op: contract.JobCreate, ID: "read-ana-reply", Kind: contract.JobOneTime, Schedule: "20 12 29 11 *", Description: "read Ana's answer", Context: "asked about dinner"},
	}
	if fmt.Sprint(m.Jobs) != fmt.Sprint(wantJobs) {
		t.Errorf("jobs %+v\nwant %+v", m.Jobs, wantJobs)
	}
	if m.FollowUp == nil || m.FollowUp.AfterMinutes != 20 || m.FollowUp.Job != "read-ana-reply" || !strings.Contains(m.FollowUp.Context, "asked about dinner") {
		t.Errorf("follow-up %+v", m.FollowUp)
	}
	if j, _ := dir.GetJob("water"); j.Status != state.JobCancel {
		t.Errorf("jobs.json: water is %s", j.Status)
	}
}

// A WAIT without a job carries its recap as the follow-up's context and no
// delay: afterMinutes 0 leaves it to the run's spec.followUp.defaultDelayMinutes,
// which only the controller knows.
func TestWaitWithoutJobLeavesTheDelayToTheRun(t *testing.T) {
	h := newHarness(t, step("planning", "update_progress", onePlan), end("WAIT"))
	withPolicies(t, h, openDir(t), nil, false)
	m := h.run(context.Background())
	if m.FollowUp == nil || m.FollowUp.AfterMinutes != 0 || m.FollowUp.Job != "" || !strings.Contains(m.FollowUp.Context, "recap for WAIT") {
		t.Fatalf("follow-up %+v", m.FollowUp)
	}
}

// The plan and the scratchpad ride at the tail of every request and never enter the transcript.
func TestPinnedTailNeverInTranscript(t *testing.T) {
	h := newHarness(t,
		step("planning", "update_progress", `{"user_said":"open Settings","steps":[{"title":"find the icon","status":"in_progress"}]}`),
		pt.Step{Calls: []pt.Call{{Name: "note", Args: `{"summary":"looking","scratchpad":"Settings is on page 2"}`}, {Name: "peek", Args: `{}`}}},
		end("DONE"))
	withPolicies(t, h, openDir(t), nil, false)
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	last := string(h.model.Body(2))
	if !strings.Contains(last, "[in_progress] find the icon") || !strings.Contains(last, "Settings is on page 2") {
		t.Fatalf("the last request lacks the plan or the scratchpad")
	}
	if !strings.Contains(string(h.model.Body(0)), "Plan: none yet") {
		t.Error("the first request does not ask for a plan")
	}
	for _, m := range h.sess.Transcript() {
		if strings.Contains(m.Text, "[Pinned") || strings.Contains(m.Text, "find the icon]") {
			t.Fatalf("the pinned tail leaked into the transcript: %q", m.Text)
		}
	}
}

// The scratchpad is capped at 8192 characters.
func TestScratchpadCap(t *testing.T) {
	big := strings.Repeat("y", engine.ScratchpadMaxChars+100)
	h := newHarness(t, pt.Step{Calls: []pt.Call{{Name: "note", Args: `{"summary":"s","scratchpad":"` + big + `"}`}, {Name: "peek", Args: `{}`}}}, end("DONE"))
	withPolicies(t, h, openDir(t), nil, false)
	h.run(context.Background())
	if n := len(h.cfg.State.Scratchpad); n != engine.ScratchpadMaxChars {
		t.Fatalf("scratchpad %d characters", n)
	}
	if r := resultsFor(h.sess.Transcript(), "note"); !strings.Contains(r[0], "scratchpad cut to 8192") {
		t.Errorf("note result %q", r[0])
	}
}

// Nine turns without a plan: the ninth turn's tap is refused, note is not.
// Rejected turn shapes do not count.
func TestPlanGateInTheLoop(t *testing.T) {
	steps := []pt.Step{{Text: "let me think"}, {Text: "still thinking"}}
	for i := 0; i < 9; i++ {
		steps = append(steps, step("tapping", "tap", `{"bbox":[0.1,0.1,0.2,0.2]}`))
	}
	steps = append(steps, end("STUCK"))
	h := newHarness(t, steps...)
	withPolicies(t, h, openDir(t), nil, false)
	h.run(context.Background())
	taps := resultsFor(h.sess.Transcript(), "tap")
	for i, r := range taps {
		blocked := strings.HasPrefix(r, "blocked:")
		if blocked != (i == 8) {
			t.Fatalf("tap %d: %q", i+1, r)
		}
	}
	if h.rig.Calls() != 8 {
		t.Errorf("%d taps reached the rig, want 8", h.rig.Calls())
	}
}

// A real fold in the loop: 45 turns of peeks, folds at turn 30 and 50 would
// follow; pairing holds, one screen keeps its image, summaries are kept.
func TestFoldsInTheLoop(t *testing.T) {
	steps := []pt.Step{step("planning", "update_progress", onePlan)}
	for i := 2; i <= 44; i++ {
		steps = append(steps, step(fmt.Sprintf("peek %d", i), "peek", `{}`))
	}
	steps = append(steps, end("DONE"))
	h := newHarness(t, steps...)
	withPolicies(t, h, openDir(t), nil, false)
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	tr := h.sess.Transcript()
	checkPairing(t, tr)
	images := 0
	for _, m := range tr {
		images += len(m.Images)
	}
	if images != 1 {
		t.Errorf("%d images in the transcript", images)
	}
	if !strings.HasPrefix(tr[1].Text, compaction.FoldHeader) || !strings.Contains(tr[1].Text, "- peek 20") || strings.Contains(tr[1].Text, "- peek 21\n") {
		t.Fatalf("fold message %q", tr[1].Text)
	}
	// The request before turn 30 nudged for the scratchpad; the fold happened before turn 31.
	if !strings.Contains(string(h.model.Body(29)), "Compaction after this turn") || strings.Contains(string(h.model.Body(28)), "Compaction after this turn") {
		t.Error("the scratchpad nudge is not in exactly the turn before the fold")
	}
	if len(h.events("compaction")) == 0 {
		t.Error("no compaction event")
	}
}

// A context overflow from the provider is answered by a fold, and the session goes on.
func TestOverflowTriggersFold(t *testing.T) {
	steps := []pt.Step{step("planning", "update_progress", onePlan)}
	for i := 2; i <= 12; i++ {
		steps = append(steps, step("peek", "peek", `{}`))
	}
	steps = append(steps, pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "This model's maximum context length is 8192 tokens"}, end("DONE"))
	h := newHarness(t, steps...)
	withPolicies(t, h, openDir(t), nil, false)
	want(t, h.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	tr := h.sess.Transcript()
	checkPairing(t, tr)
	if !strings.HasPrefix(tr[1].Text, compaction.FoldHeader) {
		t.Fatal("no fold after the overflow")
	}
	// Persistent overflow: folded until nothing is left, then compaction_exhausted.
	h2 := newHarness(t, append(steps[:12:12], pt.Step{Status: 400, ErrType: "invalid_request_error", ErrMessage: "maximum context length exceeded"})...)
	withPolicies(t, h2, openDir(t), nil, false)
	want(t, h2.run(context.Background()), contract.Stuck, contract.ReasonCompactionExhausted, contract.ExitStuck)
	if n := h2.model.Requests() - 12; n < 2 || n > compaction.MaxOverflowCompactions+1 {
		t.Errorf("%d overflowing requests", n)
	}
}

// A 40-turn session killed after a random turn and resumed from its snapshot
// ends with the same transcript as the uninterrupted one.
func TestResumeAfterKillAtRandomTurn(t *testing.T) {
	steps := []pt.Step{step("planning", "update_progress", onePlan)}
	for i := 2; i <= 39; i++ {
		if i%3 == 0 {
			steps = append(steps, pt.Step{Calls: []pt.Call{{Name: "note", Args: fmt.Sprintf(`{"summary":"turn %d","scratchpad":"seen %d screens"}`, i, i)}, {Name: "tap", Args: `{"bbox":[0.1,0.1,0.2,0.2]}`}}})
		} else {
			steps = append(steps, step(fmt.Sprintf("turn %d", i), "peek", `{}`))
		}
	}
	steps = withIDs(append(steps, end("DONE")))

	full := newHarness(t, steps...)
	withPolicies(t, full, openDir(t), nil, true)
	want(t, full.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	fullState := *full.cfg.State

	seed := rand.Uint64()
	kill := 2 + int(rand.New(rand.NewPCG(seed, 0)).IntN(36))
	t.Logf("kill after turn %d (seed %d)", kill, seed)
	dir := openDir(t)
	cut := newHarness(t, steps...)
	cutWriter := withPolicies(t, cut, dir, nil, true)
	ctx, cancel := context.WithCancel(context.Background())
	cut.cfg.Observers = append(cut.cfg.Observers, killAt{kill, cancel})
	cut.run(ctx)
	cutWriter.Close()

	snap, msgs, err := snapshot.Load(dir, snapshot.Key("ns/run", 1))
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.Turn != kill {
		t.Fatalf("snapshot at turn %d, want %d", snap.State.Turn, kill)
	}
	resumed := newHarness(t, steps[kill:]...)
	resumed.cfg.Rig = cut.rigCli // the same phone
	w := withPolicies(t, resumed, dir, &snap.State, true)
	w.Adopt(snap, msgs)
	resumed.cfg.Resume = msgs
	m := resumed.run(context.Background())
	w.Close()
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)
	if m.Turns != len(steps) {
		t.Errorf("turns %d, want %d", m.Turns, len(steps))
	}
	if a, b := render(full.sess.Transcript()), render(resumed.sess.Transcript()); a != b {
		t.Fatalf("the resumed transcript differs from the uninterrupted one:\n--- uninterrupted\n%s\n--- resumed\n%s", a, b)
	}
	if fullState.Scratchpad != resumed.cfg.State.Scratchpad || fullState.Watchdog != resumed.cfg.State.Watchdog {
		t.Errorf("state differs: %+v vs %+v", fullState, *resumed.cfg.State)
	}
	// The token calibration went on from the snapshot instead of starting over.
	if ft, rt := fullState.Tokens, resumed.cfg.State.Tokens; ft == nil || rt == nil || *ft != *rt || ft.Observations == 0 {
		t.Errorf("token calibration: uninterrupted %+v, resumed %+v", ft, rt)
	}
	// The trace holds the screens and the snapshot is valid JSON written atomically (no temp files left).
	screens, _ := filepath.Glob(dir.Path("traces", snapshot.Key("ns/run", 1), "screen-*.jpg"))
	if len(screens) == 0 {
		t.Error("no screens in the trace")
	}
	if tmp, _ := filepath.Glob(dir.Path("snapshots", ".*tmp*")); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
}

type killAt struct {
	turn   int
	cancel context.CancelFunc
}

func (k killAt) AfterRound(_ context.Context, s *engine.State, _ []provider.Message) {
	if s.Turn == k.turn {
		k.cancel()
	}
}

func render(msgs []provider.Message) string {
	var b bytes.Buffer
	for i, m := range msgs {
		fmt.Fprintf(&b, "%d %s %q calls=%v id=%s name=%s err=%v", i, m.Role, m.Text, m.ToolCalls, m.ToolCallID, m.ToolName, m.IsError)
		for _, im := range m.Images {
			fmt.Fprintf(&b, " img(%s,%d,%x)", im.MIMEType, len(im.Data), im.Data[:min(8, len(im.Data))])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// stillRig is a phone whose screen never changes.
type stillRig struct{ taps int }

func (r *stillRig) Tools() []provider.ToolSpec {
	return []provider.ToolSpec{{Name: "tap", Schema: []byte(`{"type":"object","properties":{"bbox":{"type":"array","items":{"type":"number"}}},"required":["bbox"]}`)}}
}
func (r *stillRig) Instructions() string { return "" }
func (r *stillRig) Call(_ context.Context, name string, _ json.RawMessage) (rig.Result, error) {
	r.taps++
	return rig.Result{Text: "Tapped at bbox [0.8, 0.9, 0.9, 0.95] | " + wire.UnchangedText + " — nothing there", Verdict: wire.Unchanged}, nil
}

// The stuck guard in the loop: the same dead target warns at the 3rd press
// and is refused at the 5th, which never reaches the phone.
func TestStuckGuardInTheLoop(t *testing.T) {
	steps := []pt.Step{step("planning", "update_progress", onePlan)}
	for i := 0; i < 5; i++ {
		steps = append(steps, step("tap send", "tap", `{"bbox":[0.8,0.9,0.9,0.95]}`))
	}
	h := newHarness(t, append(steps, end("STUCK"))...)
	withPolicies(t, h, openDir(t), nil, false)
	still := &stillRig{}
	h.cfg.Rig = still
	h.run(context.Background())
	taps := resultsFor(h.sess.Transcript(), "tap")
	if len(taps) != 5 || strings.Contains(taps[1], "warning") || !strings.Contains(taps[2], "warning: press 3") || !strings.HasPrefix(taps[4], "blocked: refused") {
		t.Fatalf("tap results %q", taps)
	}
	if still.taps != 4 {
		t.Errorf("%d taps reached the phone, want 4", still.taps)
	}
}

// The stuck guard reads the rig's verdict through the rig client, in both
// forms a rig writes (PhysiClaw's one line, the older line each), and only
// from the first text block: a listing that shows the verdict's words is the
// phone's screen and trips nothing.
func TestStuckGuardReadsTheWire(t *testing.T) {
	for _, c := range []struct {
		name                 string
		physiclaw, unchanged bool
		wantReached          int
	}{
		{"older form, no change", false, true, 4},
		{"PhysiClaw form, no change", true, true, 4},
		{"older form, a listing showing the verdict's words", false, false, 5},
		{"PhysiClaw form, a listing showing the verdict's words", true, false, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			steps := []pt.Step{step("planning", "update_progress", onePlan)}
			for i := 0; i < 5; i++ {
				steps = append(steps, step("tap send", "tap", `{"bbox":[0.8,0.9,0.9,0.95]}`))
			}
			h := newHarness(t, append(steps, end("STUCK"))...)
			h.rig.PhysiClaw = c.physiclaw
			h.rig.Unchanged.Store(c.unchanged)
			h.rig.SetScreen(`0 [text] "screen: no visible change" [0.300,0.800,0.700,0.860] 0.97`)
			withPolicies(t, h, openDir(t), nil, false)
			h.run(context.Background())
			taps := resultsFor(h.sess.Transcript(), "tap")
			warned := strings.Contains(strings.Join(taps, "\n"), "warning: press")
			if reached := int(h.rig.Calls()); reached != c.wantReached || warned != c.unchanged {
				t.Fatalf("%d taps reached the rig (want %d), warned %v (want %v): %q", reached, c.wantReached, warned, c.unchanged, taps)
			}
			for _, ev := range h.events("tool_result") {
				want := "changed"
				if c.unchanged {
					want = "unchanged"
				}
				if ev.Tool == "tap" && !ev.Blocked && ev.Verdict != want {
					t.Errorf("tool_result event verdict %q, want %q", ev.Verdict, want)
				}
			}
		})
	}
}

// Cancelling the follow-up's job hands the follow-up to the next one-time job.
func TestFollowUpMovesToTheNextJob(t *testing.T) {
	h := newHarness(t,
		step("planning", "update_progress", onePlan),
		step("soon", "create_job", `{"id":"soon","schedule":"20 12 29 11 *","description":"look soon","context":"a"}`),
		step("later", "create_job", `{"id":"later","schedule":"0 13 29 11 *","description":"look later","context":"b"}`),
		step("not soon", "finish_job", `{"id":"soon","status":"cancel","recap":"no"}`),
		end("WAIT"))
	withPolicies(t, h, openDir(t), nil, false)
	m := h.run(context.Background())
	if f := m.FollowUp; f == nil || f.Job != "later" || f.AfterMinutes != 60 {
		t.Fatalf("follow-up %+v, want the later job in 60 minutes", f)
	}
	h2 := newHarness(t,
		step("planning", "update_progress", onePlan),
		step("soon", "create_job", `{"id":"soon","schedule":"20 12 29 11 *","description":"look soon","context":"a"}`),
		step("not soon", "finish_job", `{"id":"soon","status":"done","recap":"no"}`),
		end("WAIT"))
	withPolicies(t, h2, openDir(t), nil, false)
	// With no job left the agent chose no delay: afterMinutes 0 means the run's default.
	if f := h2.run(context.Background()).FollowUp; f == nil || f.Job != "" || f.AfterMinutes != 0 {
		t.Fatalf("follow-up %+v, want none chosen (the run's default delay)", f)
	}
}

// chainedModel is a provider that keeps a conversation on the service
// (provider.Chained): its state names the turn of the newest reply.
type chainedModel struct {
	provider.Provider
	replies  int
	restored []byte
}

func (c *chainedModel) Stream(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	r, err := c.Provider.Stream(ctx, req, sink)
	if err == nil {
		c.replies++
	}
	return r, err
}

func (c *chainedModel) ChainState() []byte { return []byte(fmt.Sprintf(`{"reply":%d}`, c.replies)) }

func (c *chainedModel) RestoreChain(b []byte) error { c.restored = b; return nil }

// A provider's conversation on the service goes into the snapshot after
// every round, and a resumed session hands it back before its first request.
func TestResumeRestoresTheProviderChain(t *testing.T) {
	steps := withIDs([]pt.Step{step("planning", "update_progress", onePlan), step("look", "peek", `{}`),
		step("look again", "peek", `{}`), end("DONE")})
	dir := openDir(t)
	cut := newHarness(t, steps...)
	cut.cfg.Provider = &chainedModel{Provider: cut.cfg.Provider}
	w := withPolicies(t, cut, dir, nil, true)
	ctx, cancel := context.WithCancel(context.Background())
	cut.cfg.Observers = append(cut.cfg.Observers, killAt{2, cancel})
	cut.run(ctx)
	w.Close()
	snap, msgs, err := snapshot.Load(dir, snapshot.Key("ns/run", 1))
	if err != nil {
		t.Fatal(err)
	}
	if string(snap.State.Chain) != `{"reply":2}` {
		t.Fatalf("snapshot chain %s, want the state after the second reply", snap.State.Chain)
	}
	resumed := newHarness(t, steps[2:]...)
	model := &chainedModel{Provider: resumed.cfg.Provider}
	resumed.cfg.Provider = model
	withPolicies(t, resumed, dir, &snap.State, false)
	resumed.cfg.Resume = msgs
	want(t, resumed.run(context.Background()), contract.Done, contract.ReasonEndTurn, 0)
	if string(model.restored) != `{"reply":2}` {
		t.Errorf("restored chain %q, want the snapshot's", model.restored)
	}
}
