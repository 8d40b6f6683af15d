package contract

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSentinelTable(t *testing.T) {
	cases := []struct {
		s         Sentinel
		retryable bool
		code      int
		class     Class
	}{
		{Done, false, 0, ClassDone},
		{Fail, false, 1, ClassFail},
		{Wait, false, 10, ClassWait},
		{Idle, false, 11, ClassIdle},
		{Stuck, true, 12, ClassStuck},
		{Stuck, false, 13, ClassBudget},
	}
	for _, c := range cases {
		if got := ExitCode(c.s, c.retryable); got != c.code {
			t.Errorf("ExitCode(%s,%v) = %d, want %d", c.s, c.retryable, got, c.code)
		}
		if got := ClassOfExitCode(c.code); got != c.class {
			t.Errorf("ClassOfExitCode(%d) = %s, want %s", c.code, got, c.class)
		}
	}
	if got := ClassOfExitCode(2); got != ClassInvalidConfig {
		t.Errorf("exit 2 = %s, want InvalidConfig", got)
	}
	for _, code := range []int{137, 139, 143, -1, 3, 255} {
		if got := ClassOfExitCode(code); got != ClassStuck {
			t.Errorf("exit %d = %s, want a counted STUCK", code, got)
		}
	}
}

func TestParseSentinel(t *testing.T) {
	if s, err := ParseSentinel("wait"); err != nil || s != Wait {
		t.Fatalf("ParseSentinel(wait) = %q, %v", s, err)
	}
	if _, err := ParseSentinel("MAYBE"); err == nil || !strings.Contains(err.Error(), "DONE, FAIL") {
		t.Fatalf("ParseSentinel(MAYBE) error = %v, want one that lists the sentinels", err)
	}
}

func TestEncodeFitsAndCutsRecapFirst(t *testing.T) {
	m := TerminationMessage{
		Sentinel: Wait, Recap: strings.Repeat("réçap \"quoted\" ", 800), ExitReason: ReasonEndTurn,
		Turns: 42, Usage: Usage{PromptTokens: 1, CompletionTokens: 2, CachedTokens: 3},
		FollowUp: &FollowUp{AfterMinutes: 20, Context: "check the reply"},
		Jobs:     []Job{{Op: JobCreate, ID: "water", Kind: JobPeriodic, Schedule: "0 9 * * *", Description: "water plants"}},
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxTerminationMessageBytes {
		t.Fatalf("encoded %d bytes, limit %d", len(b), MaxTerminationMessageBytes)
	}
	got, err := DecodeTerminationMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sentinel != Wait || got.Turns != 42 || got.FollowUp == nil || got.FollowUp.Context != "check the reply" || len(got.Jobs) != 1 {
		t.Fatalf("cutting lost more than the recap: %+v", got)
	}
	if !strings.HasSuffix(got.Recap, "…[cut]") || len(got.Recap) < 1000 {
		t.Fatalf("recap should be cut, not emptied: %d bytes", len(got.Recap))
	}
}

func TestEncodeCutsJobsWhenRecapIsNotEnough(t *testing.T) {
	var jobs []Job
	for i := 0; i < 40; i++ {
		jobs = append(jobs, Job{Op: JobCreate, ID: strings.Repeat("j", 40), Kind: JobOneTime, Schedule: "5 4 3 2 *",
			Description: strings.Repeat("d", 200), Context: strings.Repeat("c", 200)})
	}
	m := TerminationMessage{Sentinel: Done, Recap: "short", Jobs: jobs}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxTerminationMessageBytes {
		t.Fatalf("encoded %d bytes", len(b))
	}
	var back TerminationMessage
	if err := json.Unmarshal(b, &back); err != nil || back.Sentinel != Done || len(back.Jobs) == 0 {
		t.Fatalf("decoded %+v, %v", back, err)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, in := range []string{"", "not json", `{"sentinel":"MAYBE"}`, `{"recap":"x"}`} {
		if _, err := DecodeTerminationMessage([]byte(in)); err == nil {
			t.Errorf("DecodeTerminationMessage(%q) accepted garbage", in)
		}
	}
}

func TestEnvironRoundTripNames(t *testing.T) {
	s := Settings{Run: "ns/r", Attempt: 2, RigEndpoint: "http://rig:8048/mcp", Trigger: "go",
		MaxTurns: 300, SkillsDirs: []string{"/a", "/b"}, DenyTools: []string{"force_quit"}, Resume: true}
	env := map[string]string{}
	for _, e := range s.Environ() {
		env[e.Name] = e.Value
	}
	want := map[string]string{
		"CLAWFARM_RUN": "ns/r", "CLAWFARM_ATTEMPT": "2", "CLAWFARM_RIG_ENDPOINT": "http://rig:8048/mcp",
		"CLAWFARM_TRIGGER": "go", "CLAWFARM_MAX_TURNS": "300", "CLAWFARM_SKILLS_DIRS": "/a,/b",
		"CLAWFARM_DENY_TOOLS": "force_quit", "CLAWFARM_RESUME": "true",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["CLAWFARM_MODEL_API_KEY"]; ok {
		t.Error("Environ must never carry the API key")
	}
	if _, _, err := ParseRunRef("noslash"); err == nil {
		t.Error("ParseRunRef accepted a ref without namespace")
	}
}

// followUp.job round-trips and is left out when empty, so older readers see the same JSON.
func TestFollowUpJob(t *testing.T) {
	m := TerminationMessage{Sentinel: Wait, FollowUp: &FollowUp{AfterMinutes: 20, Context: "c", Job: "read-ana-reply"}}
	b, err := m.Encode()
	if err != nil || !strings.Contains(string(b), `"followUp":{"afterMinutes":20,"context":"c","job":"read-ana-reply"}`) {
		t.Fatalf("%s %v", b, err)
	}
	got, err := DecodeTerminationMessage(b)
	if err != nil || got.FollowUp.Job != "read-ana-reply" {
		t.Fatalf("%+v %v", got, err)
	}
	m.FollowUp.Job = ""
	if b, _ = m.Encode(); strings.Contains(string(b), `"job"`) {
		t.Errorf("empty job encoded: %s", b)
	}
}

// A follow-up whose delay the agent did not choose leaves afterMinutes out:
// 0 or absent means the run's spec.followUp.defaultDelayMinutes.
func TestFollowUpWithoutDelay(t *testing.T) {
	m := TerminationMessage{Sentinel: Wait, FollowUp: &FollowUp{Context: "asked Ana; waiting"}}
	b, err := m.Encode()
	if err != nil || !strings.Contains(string(b), `"followUp":{"context":"asked Ana; waiting"}`) {
		t.Fatalf("%s %v", b, err)
	}
	got, err := DecodeTerminationMessage(b)
	if err != nil || got.FollowUp == nil || got.FollowUp.AfterMinutes != 0 || got.FollowUp.Context != "asked Ana; waiting" {
		t.Fatalf("%+v %v", got, err)
	}
}

// An approval answer is "<Approve|Deny>/<request id>"; the loop reads the
// decision in any case, and tells a malformed answer to a request (the id
// comes back) from a value that answers none.
func TestApprovalAnswer(t *testing.T) {
	if got := ApprovalAnswer(Approve, "a1-t7-1"); got != "Approve/a1-t7-1" {
		t.Errorf("ApprovalAnswer(Approve) = %q", got)
	}
	if got := ApprovalAnswer(Deny, "a1-t9-2"); got != "Deny/a1-t9-2" {
		t.Errorf("ApprovalAnswer(Deny) = %q", got)
	}
	for _, c := range []struct {
		v  string
		d  Decision
		id string
		ok bool
	}{
		{ApprovalAnswer(Approve, "a1-t2-1"), Approve, "a1-t2-1", true},
		{ApprovalAnswer(Deny, "a1-t2-1"), Deny, "a1-t2-1", true},
		{"deny/a1-t2-1", Deny, "a1-t2-1", true},
		{"APPROVE/a1-t2-1", Approve, "a1-t2-1", true},
		{"Sure/a1-t2-1", "", "a1-t2-1", false},
		{"yes please", "", "", false},
		{"", "", "", false},
	} {
		d, id, ok := ParseApprovalAnswer(c.v)
		if d != c.d || id != c.id || ok != c.ok {
			t.Errorf("ParseApprovalAnswer(%q) = %q, %q, %v; want %q, %q, %v", c.v, d, id, ok, c.d, c.id, c.ok)
		}
	}
}

// The progress patch is a merge patch of status.progress that always
// carries approval, null when none, so that it clears an answered request.
func TestProgressPatch(t *testing.T) {
	got := string(Progress{Attempt: 2, Turn: 3, UpdatedAt: "2026-11-29T18:00:00Z"}.Patch())
	want := `{"status":{"progress":{"attempt":2,"turn":3,"tokens":0,"updatedAt":"2026-11-29T18:00:00Z","approval":null}}}`
	if got != want {
		t.Errorf("patch %s, want %s", got, want)
	}
}
