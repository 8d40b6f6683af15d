package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/policies"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/provider/openai"
	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/state"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

// screenRig answers every call with a line of text and a new screen.
type screenRig struct{ n int }

func (r *screenRig) Tools() []provider.ToolSpec {
	return []provider.ToolSpec{{Name: "peek", Description: "photo", Schema: json.RawMessage(`{"type":"object","properties":{}}`)}}
}
func (r *screenRig) Instructions() string { return rigtest.Instructions }
func (r *screenRig) Call(context.Context, string, json.RawMessage) (rig.Result, error) {
	r.n++
	return rig.Result{Text: fmt.Sprintf("peek done\n0 [text] \"Screen %d\" [0.5,0.5,0.6,0.6] 0.9", r.n),
		Images: []*provider.Image{provider.NewImage("image/jpeg", []byte(fmt.Sprintf("jpeg %d", r.n)))}}, nil
}

// transcripts records the transcript part of every request the engine
// makes, and how many pinned messages followed it.
type transcripts struct {
	provider.Provider
	seen   [][]provider.Message
	pinned []int
}

func (t *transcripts) Stream(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	t.seen = append(t.seen, append([]provider.Message(nil), req.Messages[:len(req.Messages)-req.Pinned]...))
	t.pinned = append(t.pinned, req.Pinned)
	return t.Provider.Stream(ctx, req, sink)
}

// A 70-turn session through the engine and its production policies (plan
// tail, latest screen, folds at 30 and 50) on both Responses wires. On the
// stateless wire every request's input is the engine's transcript, then
// the pinned tail, with no stored response behind it. On the chained wire
// the conversation the service rebuilt from its stored responses, once the
// latest-screen policy has run over it, is the transcript the engine meant
// to send — the chat wire's — and most requests continue a stored
// response. The session ends as it would on the chat wire.
func TestResponsesSessionSeesTheEngineTranscript(t *testing.T) {
	for _, api := range []string{openai.APIResponses, openai.APIResponsesChained} {
		t.Run(api, func(t *testing.T) { responsesSession(t, api) })
	}
}

func responsesSession(t *testing.T, api string) {
	const turns = 70
	rs, srv := newResponsesServer(t)
	rs.action = func(n int) (string, string) {
		switch {
		case n == 1:
			return "update_progress", `{"user_said":"look","steps":[{"title":"look","status":"in_progress"}]}`
		case n >= turns:
			return "end_session", `{"status":"DONE","recap":"looked"}`
		}
		return "peek", "{}"
	}
	rec := &transcripts{Provider: responsesAdapter(srv.URL, api)}
	cfg := engine.Config{Trigger: "look at the screen", MaxTurns: turns, ContextWindow: 1 << 30, SessionBudget: time.Hour,
		Provider: rec, Rig: &screenRig{}}
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := policies.Wire(&cfg, dir, nil); err != nil {
		t.Fatal(err)
	}
	m := engine.New(cfg).Run(context.Background())
	if m.Sentinel != contract.Done || m.Turns != turns {
		t.Fatalf("session ended %s/%s after %d turns, want DONE after %d", m.Sentinel, m.ExitReason, m.Turns, turns)
	}
	if len(rs.reqs) != len(rec.seen) {
		t.Fatalf("%d requests reached the service, the engine made %d", len(rs.reqs), len(rec.seen))
	}
	continued, folded := 0, false
	for i, c := range rs.reqs {
		var got, want []string
		if api == openai.APIResponses {
			if c.previous != "" || c.store {
				t.Fatalf("request %d: previous %q, store %v on the stateless wire", i+1, c.previous, c.store)
			}
			got = rawStrings(c.input[:len(c.input)-rec.pinned[i]])
			want = rawStrings(statelessItems(t, rec.seen[i]))
		} else {
			seen, _ := compaction.LatestScreen(decodeItems(t, c.conversation))
			got, want = keys(t, rawItems(t, seen)), keys(t, rawItems(t, rec.seen[i]))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("request %d: the service's conversation is not the engine's transcript:\n%s\nwant\n%s",
				i+1, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if c.previous != "" {
			continued++
		}
		folded = folded || strings.Contains(string(c.input[min(1, len(c.input)-1)]), compaction.FoldHeader)
	}
	if !folded {
		t.Errorf("no fold was sent")
	}
	if api == openai.APIResponsesChained && continued < turns/2 {
		t.Errorf("%d of %d requests continued a stored response; want most", continued, turns)
	}
}
