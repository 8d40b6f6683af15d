package validate

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	v := New()
	if err := v.Add("tap", json.RawMessage(`{"type":"object","properties":{"bbox":{"type":"array","items":{"type":"number"},"minItems":4,"maxItems":4}},"required":["bbox"]}`)); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ args, want string }{
		{`{"bbox":[0,0,1,1]}`, ""},
		{`{"bbox":[0,0,1]}`, "schema"},
		{`{}`, "schema"},
		{`{"bbox":[0,0`, "not valid JSON"},
		{`"x"`, "a string"},
	}
	for _, c := range cases {
		_, err := v.Check("tap", c.args)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := v.Check("untyped", ""); err != nil {
		t.Errorf("empty arguments are an empty object: %v", err)
	}
}
