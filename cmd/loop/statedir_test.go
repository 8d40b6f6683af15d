package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	"github.com/clawfarm/clawfarm/internal/state"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

// simulated starts modelsim (the built-in scenarios, and those in
// scenarioDir when given) and a rigsim phone, both closed with the test.
func simulated(t *testing.T, scenarioDir string) (model, rig *httptest.Server) {
	t.Helper()
	lib, err := modelsim.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	if scenarioDir != "" {
		if err := lib.LoadDir(scenarioDir); err != nil {
			t.Fatal(err)
		}
	}
	model = httptest.NewServer(modelsim.NewServer(lib).Handler())
	t.Cleanup(model.Close)
	rig = httptest.NewServer(rigsim.New("r1", rigsim.Config{}).Handler())
	t.Cleanup(rig.Close)
	return model, rig
}

// The message scenario on a simulated phone: the agent sends the message,
// schedules a look at the answer with create_job and ends WAIT. The job is in
// the termination message, it is the follow-up's source, and the state
// directory holds it, the trace and the snapshot.
func TestMessageScenarioReportsItsJob(t *testing.T) {
	model, sim := simulated(t, "")
	dir := t.TempDir()
	env := loopEnv(t, model.URL, sim.URL+"/mcp", "CLAWFARM_MODEL=sim/message", "CLAWFARM_STATE_DIR="+dir,
		"CLAWFARM_TRIGGER=Ask Ana what time dinner is tomorrow.", "CLAWFARM_MODEL_TIMEOUT_SECONDS=30")
	res := runChild(t, env, nil, nil)
	check(t, res, contract.ExitWait, contract.Wait, contract.ReasonEndTurn)
	if len(res.msg.Jobs) != 1 {
		t.Fatalf("jobs %+v", res.msg.Jobs)
	}
	j := res.msg.Jobs[0]
	if j.Op != contract.JobCreate || j.ID != "read-ana-reply" || j.Kind != contract.JobOneTime || len(strings.Fields(j.Schedule)) != 5 || !strings.Contains(j.Context, "waiting for Ana's reply") {
		t.Errorf("job %+v", j)
	}
	if f := res.msg.FollowUp; f == nil || f.Job != "read-ana-reply" || f.AfterMinutes < 19 || f.AfterMinutes > 21 {
		t.Errorf("follow-up %+v, want the job's 20 minutes", f)
	}
	d, err := state.Open(dir)
	if err != nil {
		t.Fatalf("the state directory is still locked after the loop exited: %v", err)
	}
	defer d.Close()
	if got, err := d.GetJob("read-ana-reply"); err != nil || got.Status != state.JobActive {
		t.Errorf("jobs.json: %+v %v", got, err)
	}
	trace := filepath.Join(dir, "traces", "ns_run-1-a1")
	if b, err := os.ReadFile(filepath.Join(trace, "events.jsonl")); err != nil || !strings.Contains(string(b), `"type":"done"`) {
		t.Errorf("trace events: %v", err)
	}
	if screens, _ := filepath.Glob(filepath.Join(trace, "screen-*.jpg")); len(screens) == 0 {
		t.Error("no screens in the trace")
	}
	var snap struct{ State struct{ Turn int } }
	b, err := os.ReadFile(filepath.Join(dir, "snapshots", "ns_run-1-a1.json"))
	// The last snapshot follows the last tool round before end_session's turn.
	if err != nil || json.Unmarshal(b, &snap) != nil || snap.State.Turn != res.msg.Turns-1 {
		t.Errorf("snapshot at turn %d (%v), the session took %d", snap.State.Turn, err, res.msg.Turns)
	}
}

// Two loops can never write one rig's state: the second ends STUCK
// (retryable) before its first turn and says why.
func TestLockedStateDirectory(t *testing.T) {
	dir := t.TempDir()
	held, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	model := pt.OpenAI(uniq(closing("DONE")))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	res := runChild(t, loopEnv(t, model.URL, r1.Endpoint(), "CLAWFARM_STATE_DIR="+dir), nil, nil)
	check(t, res, contract.ExitStuck, contract.Stuck, contract.ReasonRigUnavailable)
	if !strings.Contains(res.msg.Recap, "locked") || model.Requests() != 0 || r1.Calls() != 0 {
		t.Errorf("recap %q, %d model requests, %d rig calls", res.msg.Recap, model.Requests(), r1.Calls())
	}
}

// An infrastructure retry started with --resume carries on from the
// attempt's snapshot: the turns already taken are not taken again.
func TestResumeContinuesFromTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	tap := pt.Call{Name: "tap", Args: `{"bbox":[0.1,0.2,0.3,0.4]}`}
	plan := pt.Call{Name: "update_progress", Args: `{"steps":[{"title":"tap it","status":"in_progress"}]}`}
	// The first pod: three turns, then the model stalls and the pod is cut (SIGTERM, an eviction).
	first := pt.OpenAI(uniq(step(note, plan), step(note, tap), step(note, peek), pt.Step{Stall: true}))
	defer first.Close()
	r1 := rigtest.New()
	defer r1.Close()
	res := runChild(t, loopEnv(t, first.URL, r1.Endpoint(), "CLAWFARM_STATE_DIR="+dir, "CLAWFARM_MODEL_TIMEOUT_SECONDS=30"), nil, func(p *os.Process) {
		waitFor(t, func() bool { return first.Requests() >= 4 })
		_ = p.Signal(os.Interrupt)
	})
	check(t, res, contract.ExitStuck, contract.Stuck, contract.ReasonUserCancel)
	// The retry pod resumes: its first request already carries the three turns.
	second := pt.OpenAI(uniq(closing("DONE")))
	defer second.Close()
	res = runChild(t, loopEnv(t, second.URL, r1.Endpoint(), "CLAWFARM_STATE_DIR="+dir), []string{"--resume=true"}, nil)
	check(t, res, contract.ExitDone, contract.Done, contract.ReasonEndTurn)
	if res.msg.Turns != 4 {
		t.Errorf("turns %d, want 3 before the cut plus 1", res.msg.Turns)
	}
	body := string(second.Body(0))
	if !strings.Contains(body, `"update_progress"`) || !strings.Contains(body, "[in_progress] tap it") || strings.Count(body, "open Settings and turn on Wi-Fi") != 1 {
		t.Errorf("the resumed request does not carry the earlier turns and plan exactly once")
	}
	if r1.Calls() != 2 {
		t.Errorf("%d rig calls, want 2 (no turn was repeated)", r1.Calls())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000 && !cond(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !cond() {
		t.Fatal("timed out waiting")
	}
}

// test/scenarios/remember.yaml through the loop: the plan, memory and log
// tools reach the rig's state directory.
func TestRememberScenario(t *testing.T) {
	model, sim := simulated(t, "../../test/scenarios")
	dir := t.TempDir()
	env := loopEnv(t, model.URL, sim.URL+"/mcp", "CLAWFARM_MODEL=sim/remember", "CLAWFARM_STATE_DIR="+dir,
		"CLAWFARM_TRIGGER=Turn Wi-Fi off.", "CLAWFARM_MODEL_TIMEOUT_SECONDS=30")
	res := runChild(t, env, nil, nil)
	check(t, res, contract.ExitDone, contract.Done, contract.ReasonEndTurn)
	mem, err := os.ReadFile(filepath.Join(dir, "memory.md"))
	if err != nil || !strings.Contains(string(mem), "Wi-Fi switch: Settings → Wi-Fi") {
		t.Errorf("memory.md %q %v", mem, err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.md"))
	if len(logs) != 1 {
		t.Fatalf("logs %v", logs)
	}
	if b, _ := os.ReadFile(logs[0]); !strings.Contains(string(b), "turned Wi-Fi off on request") {
		t.Errorf("log %q", b)
	}
	// The plan was accepted, and the plan gate never refused a tool.
	if !strings.Contains(res.stdout, "plan updated; step in progress: 1. read what I know about this phone") || strings.Contains(res.stdout, "blocked:") {
		t.Error("the plan was rejected or a tool was blocked")
	}
}

// Skills come from the rig's state directory and from the folders of
// --skills-dirs (mounted ConfigMaps, one skill each): the index of all of
// them is in the system prompt, Skill loads a mounted one's body and
// reference file, and the state directory wins a name both have.
func TestSkillsFromMountedFolders(t *testing.T) {
	writeSkill := func(dir, name, desc, body string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		text := "---\nname: " + name + "\ndescription: " + desc + "\n---\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := t.TempDir()
	writeSkill(filepath.Join(stateDir, "skills", "unlock"), "unlock", "unlock the phone", "Type the passcode from memory.")
	mountA, mountB := t.TempDir(), t.TempDir()
	writeSkill(mountA, "checkout", "buy what is in the cart", "Open the cart, then tap Checkout.")
	if err := os.WriteFile(filepath.Join(mountA, "cards.md"), []byte("Use the card ending 4242."), 0o644); err != nil {
		t.Fatal(err)
	}
	writeSkill(mountB, "unlock", "a mounted twin the state directory overrides", "Never used.")

	model := pt.OpenAI(uniq(
		step(note, pt.Call{Name: "Skill", Args: `{"name":"checkout"}`}),
		step(note, pt.Call{Name: "Skill", Args: `{"name":"checkout","reference":"cards.md"}`}),
		step(note, pt.Call{Name: "Skill", Args: `{"name":"unlock"}`}),
		closing("DONE")))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	env := loopEnv(t, model.URL, r1.Endpoint(), "CLAWFARM_STATE_DIR="+stateDir)
	res := runChild(t, env, []string{"--skills-dirs=" + mountA + "," + mountB}, nil)
	check(t, res, contract.ExitDone, contract.Done, contract.ReasonEndTurn)

	first := string(model.Body(0))
	for _, want := range []string{"- unlock: unlock the phone", "- checkout: buy what is in the cart"} {
		if !strings.Contains(first, want) {
			t.Errorf("the system prompt's skill index lacks %q", want)
		}
	}
	if strings.Contains(first, "mounted twin") {
		t.Error("the mounted twin of a state-directory skill is in the index")
	}
	if b := string(model.Body(1)); !strings.Contains(b, "skill checkout:\\n") || !strings.Contains(b, "Open the cart, then tap Checkout.") || !strings.Contains(b, "cards.md") {
		t.Error("Skill(checkout) did not return the mounted skill's body and its reference file")
	}
	if b := string(model.Body(2)); !strings.Contains(b, "Use the card ending 4242.") {
		t.Error("Skill(checkout, cards.md) did not return the reference file")
	}
	if b := string(model.Body(3)); !strings.Contains(b, "Type the passcode from memory.") || strings.Contains(b, "Never used.") {
		t.Error("Skill(unlock) did not load the state directory's skill")
	}
}
