package turnshape

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		names     []string
		ok        bool
		offending string
	}{
		{[]string{"note", "tap"}, true, ""},
		{[]string{"peek", "note"}, true, ""},
		{nil, false, ""},
		{[]string{"note"}, false, "note"},
		{[]string{"tap"}, false, "tap"},
		{[]string{"note", "note"}, false, "note"},
		{[]string{"note", "tap", "peek"}, false, "peek"},
		{[]string{"tap", "peek"}, false, "peek"},
		{[]string{"note", "note", "tap"}, false, "note"},
	}
	for _, c := range cases {
		v := Check(c.names)
		if v.OK != c.ok || v.Offending != c.offending {
			t.Errorf("%v: ok=%v offending=%q, want %v %q", c.names, v.OK, v.Offending, c.ok, c.offending)
		}
		if !v.OK && (v.Corrective == "" || (c.offending != "" && !strings.Contains(v.Corrective, c.offending))) {
			t.Errorf("%v: corrective %q does not name %q", c.names, v.Corrective, c.offending)
		}
	}
	if !Check([]string{"end_session"}, "end_session").OK || Check([]string{"tap"}, "end_session").OK {
		t.Error("alone")
	}
}
