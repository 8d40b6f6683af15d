package rigsim

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// tools/list has exactly the twelve tools of docs/rig-contract.md, in wire order, with its argument schemas.
func TestToolsListMatchesTheRigContract(t *testing.T) {
	tr := startRig(t, Config{})
	res, err := tr.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	schemas := map[string]map[string]any{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		b, _ := json.Marshal(tool.InputSchema)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		schemas[tool.Name] = m
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
	}
	want := []string{"peek", "screenshot", "tap", "double_tap", "long_press", "swipe", "home_screen", "go_back", "force_quit", "unlock_phone", "send_to_clipboard", "sequence"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("tools/list = %v\nwant (wire order) %v", names, want)
	}

	prop := func(tool, name string) map[string]any {
		t.Helper()
		p, _ := schemas[tool]["properties"].(map[string]any)[name].(map[string]any)
		if p == nil {
			t.Fatalf("%s has no argument %s", tool, name)
		}
		return p
	}
	required := func(tool string) []any { r, _ := schemas[tool]["required"].([]any); return r }
	checkBBox := func(tool string) {
		b := prop(tool, "bbox")
		items, _ := b["items"].(map[string]any)
		if b["type"] != "array" || b["minItems"] != 4.0 || b["maxItems"] != 4.0 || items["type"] != "number" || items["minimum"] != 0.0 || items["maximum"] != 1.0 {
			t.Errorf("%s bbox schema = %v, want 4 numbers in 0..1", tool, b)
		}
	}
	for _, tool := range []string{"tap", "double_tap", "long_press", "swipe"} {
		checkBBox(tool)
	}
	for _, tool := range []string{"tap", "double_tap", "long_press"} {
		if r := required(tool); !reflect.DeepEqual(r, []any{"bbox"}) {
			t.Errorf("%s required = %v", tool, r)
		}
	}
	for _, tool := range []string{"peek", "screenshot", "home_screen", "go_back", "force_quit", "unlock_phone"} {
		if p, _ := schemas[tool]["properties"].(map[string]any); schemas[tool]["type"] != "object" || len(p) != 0 {
			t.Errorf("%s schema = %v, want an object without arguments", tool, schemas[tool])
		}
	}
	enum := func(p map[string]any) []any { e, _ := p["enum"].([]any); return e }
	if d := prop("swipe", "direction"); !reflect.DeepEqual(enum(d), []any{"up", "down", "left", "right"}) {
		t.Errorf("swipe direction = %v", d)
	}
	if s := prop("swipe", "size"); !reflect.DeepEqual(enum(s), []any{"s", "m", "l", "xl", "xxl"}) || s["default"] != "m" {
		t.Errorf("swipe size = %v", s)
	}
	if s := prop("swipe", "speed"); !reflect.DeepEqual(enum(s), []any{"slow", "medium", "fast"}) || s["default"] != "medium" {
		t.Errorf("swipe speed = %v", s)
	}
	if r := required("swipe"); !reflect.DeepEqual(r, []any{"bbox", "direction"}) {
		t.Errorf("swipe required = %v", r)
	}
	if tx := prop("send_to_clipboard", "text"); tx["type"] != "string" || tx["minLength"] != 1.0 || tx["maxLength"] != 10000.0 {
		t.Errorf("send_to_clipboard text = %v", tx)
	}
	// The steps are left to the sequence itself (a bad one is a FAIL line),
	// as PhysiClaw's schema leaves them.
	a := prop("sequence", "actions")
	if a["type"] != "array" || a["minItems"] != 2.0 || a["maxItems"] != 5.0 || !reflect.DeepEqual(a["items"], map[string]any{"type": "object"}) {
		t.Errorf("sequence actions = %v, want an array of 2 to 5 objects", a)
	}

	init := tr.cs.InitializeResult()
	if init.ServerInfo.Name != "physiclaw" || !strings.Contains(init.Instructions, ListingHeader) || !strings.Contains(init.Instructions, "PhysiClaw is busy") {
		t.Errorf("server %q instructions %q: want PhysiClaw's name and its doctrine", init.ServerInfo.Name, init.Instructions)
	}
}
