package runinbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine"
)

// joinedRun is a run whose status.joined holds a collected run, then the
// steer runs named.
func joinedRun(steers ...string) []byte {
	entries := []string{`{"name":"c1","mode":"collect","trigger":"collected task","attempt":1}`}
	for _, s := range steers {
		entries = append(entries, fmt.Sprintf(`{"name":%q,"mode":"steer","trigger":"from %s","attempt":1}`, s, s))
	}
	return []byte(`{"metadata":{"name":"run-1"},"status":{"phase":"Running","joined":[` + strings.Join(entries, ",") + `]}}`)
}

// Take hands over the steer entries of status.joined after the session's
// cursor (State.Steered), in order, and never the collected ones; a read
// that fails, or a run it cannot decode, is logged and gives nothing, so
// the next turn tries again; a stopped session's failed read is not logged.
func TestInboxTake(t *testing.T) {
	msgs := func(names ...string) []engine.InboxMessage {
		var out []engine.InboxMessage
		for _, n := range names {
			out = append(out, engine.InboxMessage{From: n, Text: "from " + n})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		steered int
		run     []byte
		err     error
		want    []engine.InboxMessage
		logged  string
	}{
		{"all steer entries from the start", 0, joinedRun("s1", "s2"), nil, msgs("s1", "s2"), ""},
		{"those after the cursor", 1, joinedRun("s1", "s2", "s3"), nil, msgs("s2", "s3"), ""},
		{"nothing new", 2, joinedRun("s1", "s2"), nil, nil, ""},
		{"no joined runs", 0, []byte(`{"status":{}}`), nil, nil, ""},
		{"a failed read", 0, nil, errors.New("the API server is away"),
			nil, "reading the run for steer messages: the API server is away (tried again at the next turn)"},
		{"a run that does not decode", 0, []byte(`{"status":{"joined":"s1"}}`), nil, nil, "reading the run for steer messages: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs []string
			read := func(ctx context.Context) ([]byte, error) {
				if d, ok := ctx.Deadline(); !ok || time.Until(d) > readTimeout {
					t.Errorf("the read may take longer than %s", readTimeout)
				}
				return c.run, c.err
			}
			in := NewInbox(read, &engine.State{Steered: c.steered}, func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
			if got := in.Take(context.Background()); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Take = %+v, want %+v", got, c.want)
			}
			if c.logged == "" && len(logs) > 0 || c.logged != "" && (len(logs) != 1 || !strings.HasPrefix(logs[0], c.logged)) {
				t.Errorf("logged %q, want %q", logs, c.logged)
			}
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	logged := false
	in := NewInbox(func(ctx context.Context) ([]byte, error) { return nil, ctx.Err() }, &engine.State{}, func(string, ...any) { logged = true })
	if got := in.Take(ctx); got != nil || logged {
		t.Errorf("a stopped session's read: %+v, logged %v; want nothing, silently", got, logged)
	}
}
