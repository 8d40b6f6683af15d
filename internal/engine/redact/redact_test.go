package redact

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	r := New("my-key-value-123")
	in := `key my-key-value-123; Authorization: Bearer abcdefghijklmnop; {"x-api-key":"zzzzzzzzzz"}; sk-proj-ABCDEFGH12345; api_key=qwertyuiop`
	out := r.String(in)
	for _, secret := range []string{"my-key-value-123", "abcdefghijklmnop", "zzzzzzzzzz", "sk-proj-ABCDEFGH12345", "qwertyuiop"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q survived: %s", secret, out)
		}
	}
	if plain := "tap the Settings icon"; r.String(plain) != plain {
		t.Error("plain text changed")
	}
}
