package provider

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestSplicer(t *testing.T) {
	sp := NewSplicer()
	other := NewSplicer()
	doc := map[string]any{
		"a":     sp.Placeholder("AAAA"),
		"b":     []string{sp.Placeholder("data:image/jpeg;base64,BBBB"), other.Placeholder("x")},
		"model": "a note that mentions " + other.tag + "0",
	}
	enc, _ := json.Marshal(doc)
	open, size := sp.Body(enc, func(b []byte) []byte { return []byte(strings.ReplaceAll(string(b), `"model"`, `"MODEL"`)) })
	got, _ := io.ReadAll(open())
	if int64(len(got)) != size {
		t.Fatalf("size %d, body %d bytes", size, len(got))
	}
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("spliced body is not JSON: %s", got)
	}
	if back["a"] != "AAAA" || back["b"].([]any)[0] != "data:image/jpeg;base64,BBBB" || back["b"].([]any)[1] != other.tag+"0" || back["MODEL"] == nil {
		t.Errorf("spliced %s", got)
	}
	again, _ := io.ReadAll(open())
	if string(again) != string(got) {
		t.Error("a second open differs")
	}
	if !SpliceSafe("image/jpeg") || SpliceSafe(`image/"x`) {
		t.Error("SpliceSafe")
	}
}
