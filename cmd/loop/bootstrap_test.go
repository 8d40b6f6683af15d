package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

// configMapDir lays files out as a ConfigMap volume does: the data in a
// timestamped folder behind ..data, each key a symlink into it.
func configMapDir(t *testing.T, root, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	data := filepath.Join(dir, "..2026_12_01_00_00_00.1")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(data, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The system prompt is assembled in its documented order — the engine's
// rules, the rig's instructions, the rig's context files, the run's, the
// run's addition last — the model gets exactly that, and the trace and the
// termination message carry its hash.
func TestSystemPromptAssembly(t *testing.T) {
	model := pt.OpenAI(uniq(step(note, peek), closing("DONE")))
	defer model.Close()
	r1 := rigtest.New()
	defer r1.Close()
	root := t.TempDir()
	rig := configMapDir(t, root, "00-rig-phone-apps", map[string]string{"apps.md": "Messages is on the second home screen.", "accounts.md": "Signed in as farm-07."})
	run := configMapDir(t, root, "01-run-farm-setup", map[string]string{"setup.md": "Every phone is in airplane mode at night."})
	res := runChild(t, loopEnv(t, model.URL, r1.Endpoint(), "CLAWFARM_BOOTSTRAP_DIRS="+rig+","+run,
		"CLAWFARM_SYSTEM_PROMPT_APPEND=Answer the user in French."), nil, nil)
	check(t, res, 0, contract.Done, contract.ReasonEndTurn)

	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(model.Body(0), &body); err != nil || len(body.Messages) == 0 || body.Messages[0].Role != "system" {
		t.Fatalf("request: %v %s", err, model.Body(0))
	}
	system := body.Messages[0].Content
	order := []string{"Call exactly two tools per turn", "### rig/phone-apps/accounts.md", "Signed in as farm-07.",
		"### rig/phone-apps/apps.md", "### run/farm-setup/setup.md", "airplane mode", "Answer the user in French."}
	at := 0
	for _, s := range order {
		i := strings.Index(system[at:], s)
		if i < 0 {
			t.Fatalf("%q is missing or out of order in the system prompt:\n%s", s, system)
		}
		at += i + len(s)
	}
	if !strings.HasSuffix(system, "Answer the user in French.") {
		t.Errorf("the run's addition is not last:\n%s", system)
	}
	sum := sha256.Sum256([]byte(system))
	want := hex.EncodeToString(sum[:])
	if res.msg.SystemPromptSHA256 != want {
		t.Errorf("termination message hash %q, want %q (the prompt the model got)", res.msg.SystemPromptSHA256, want)
	}
	if !strings.Contains(res.stdout, `"type":"system_prompt"`) || !strings.Contains(res.stdout, `"sha256":"`+want+`"`) {
		t.Error("no system_prompt event with the hash in the trace")
	}
}

// A context file that is too big, or all of them together, is a bad
// configuration that names the file and what to change.
func TestBootstrapTooBig(t *testing.T) {
	root := t.TempDir()
	big := configMapDir(t, root, "00-rig-manual", map[string]string{"manual.md": strings.Repeat("x", contract.MaxBootstrapFileBytes+1)})
	var many []string
	for i, n := range []string{"a", "b", "c", "d", "e"} {
		many = append(many, configMapDir(t, root, "0"+string(rune('1'+i))+"-run-"+n, map[string]string{"notes.md": strings.Repeat("y", contract.MaxBootstrapFileBytes-10)}))
	}
	for _, c := range []struct {
		dirs []string
		want string
	}{
		{[]string{big}, "bootstrap file rig/manual/manual.md is 16385 bytes"},
		{many, "more than 65536 bytes at run/e/notes.md"},
		{[]string{filepath.Join(root, "gone")}, "bootstrap folder"},
	} {
		r1 := rigtest.New()
		res := runChild(t, loopEnv(t, "http://127.0.0.1:9", r1.Endpoint(), "CLAWFARM_BOOTSTRAP_DIRS="+strings.Join(c.dirs, ",")), nil, nil)
		r1.Close()
		if res.code != contract.ExitInvalidConfig || !strings.Contains(res.stderr, c.want) {
			t.Errorf("exit %d, stderr %q; want 2 naming %q", res.code, res.stderr, c.want)
		}
	}
}
