package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/state"
)

func TestKey(t *testing.T) {
	for in, want := range map[string]string{"ns/run-1": "ns_run-1-a2", "": "local-a2", "a b/../c": "a-b_.._c-a2"} {
		if got := Key(in, 2); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteLoadRoundTrip(t *testing.T) {
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, _, err := Load(dir, "k-a1"); !errors.Is(err, ErrNone) {
		t.Fatalf("no snapshot yet: %v", err)
	}
	w, err := NewWriter(dir, "k-a1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	screen := provider.NewImage("image/jpeg", []byte{0xff, 0xd8, 1, 2, 3})
	msgs := []provider.Message{
		{Role: provider.RoleUser, Text: "go"},
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "c1", Name: "peek", Arguments: "{}"}}, Reasoning: "look first", ReasoningSignature: "sig"},
		{Role: provider.RoleTool, ToolCallID: "c1", ToolName: "peek", Text: "0 [text] \"OK\" [0,0,1,1] 0.9"},
		{Role: provider.RoleUser, Text: "The screen after peek:", Images: []*provider.Image{screen}},
	}
	st := &engine.State{Turn: 1, Scratchpad: "pad", Plan: &engine.Plan{Steps: []engine.PlanStep{{Title: "a", Status: "in_progress"}}},
		Guard: engine.Guard{NoChange: map[string]int{"tap@5,5": 2}}}
	if err := w.Write(st, msgs); err != nil {
		t.Fatal(err)
	}
	// A second round with the same screen does not write it again.
	st.Turn = 2
	if err := w.Write(st, msgs); err != nil {
		t.Fatal(err)
	}
	w.Close()
	screens, _ := filepath.Glob(dir.Path("traces", "k-a1", "screen-*"))
	if len(screens) != 1 {
		t.Fatalf("screens %v", screens)
	}
	snap, got, err := Load(dir, "k-a1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.Turn != 2 || snap.State.Scratchpad != "pad" || snap.State.Plan.Current() != "1. a" || snap.State.Guard.NoChange["tap@5,5"] != 2 {
		t.Fatalf("state %+v", snap.State)
	}
	if len(got) != 4 || got[1].ToolCalls[0].ID != "c1" || got[1].ReasoningSignature != "sig" || string(got[3].Images[0].Data) != string(screen.Data) {
		t.Fatalf("transcript %+v", got)
	}
	// A screen lost to a power cut: the snapshot still loads, without it.
	os.Remove(screens[0])
	_, got, err = Load(dir, "k-a1")
	if err != nil || len(got[3].Images) != 0 || !strings.Contains(got[3].Text, "look again") {
		t.Fatalf("lost screen: %v %+v", err, got[3])
	}
	// A damaged snapshot is an error that says so.
	os.WriteFile(dir.Path("snapshots", "k-a1.json"), []byte("{"), 0o644)
	if _, _, err := Load(dir, "k-a1"); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("damaged: %v", err)
	}
	if err := w.Write(st, msgs); err == nil {
		t.Error("a closed writer accepted a snapshot")
	}
}

func TestPruneKeepsTheNewestTraces(t *testing.T) {
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	base := time.Now().Add(-time.Hour)
	for i := 1; i <= 5; i++ {
		key := Key("ns/run", i)
		if err := os.MkdirAll(dir.Path("traces", key), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir.Path("snapshots", key+".json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		mod := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(dir.Path("traces", key), mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	// The current attempt is the oldest folder (a resumed attempt): it stays.
	removed, err := Prune(dir, 3, Key("ns/run", 1))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, ",") != "ns_run-a3,ns_run-a2" {
		t.Errorf("removed %v; want a3 and a2 (the oldest, not the current a1)", removed)
	}
	for i, want := range []bool{true, false, false, true, true} {
		key := Key("ns/run", i+1)
		_, errT := os.Stat(dir.Path("traces", key))
		_, errS := os.Stat(dir.Path("snapshots", key+".json"))
		if (errT == nil) != want || (errS == nil) != want {
			t.Errorf("%s: trace kept %v, snapshot kept %v; want %v", key, errT == nil, errS == nil, want)
		}
	}
}
