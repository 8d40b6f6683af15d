package riggate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// toolRig answers tools/call as a rig does: peek shows a screen with a Pay
// button; every other tool does what it is told, or answers busy while
// busy is set. It records the tools that reached it.
type toolRig struct {
	mu    sync.Mutex
	tools []string
	busy  bool
}

func (s *toolRig) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m struct {
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	_ = json.NewDecoder(r.Body).Decode(&m)
	s.mu.Lock()
	s.tools = append(s.tools, m.Params.Name)
	busy := s.busy
	s.mu.Unlock()
	text, isError := "done", false
	switch {
	case m.Params.Name == "peek":
		text = "Checkout\n" + listing.Header + "\n0 [text] \"Total 20.00\" [0.1,0.1,0.9,0.2] 0.99\n1 [icon] \"Pay\" [0.3,0.8,0.7,0.9] 0.98"
	case busy:
		text, isError = "busy, retry: another call runs", true
	}
	res, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}, "isError": isError})
	// A stream of one event, as the MCP SDK's server answers.
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":%s}\n\n", res)
}

func (s *toolRig) reached() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tools...)
}

// newPolicyFarm is a farm whose attempt pods carry a ToolPolicy that
// blocks tapping Pay and holds every clipboard write for approval, over a
// toolRig.
func newPolicyFarm(t *testing.T) (*farm, *toolRig) {
	f := newFarm(t)
	set := toolpolicy.Set{Policies: []toolpolicy.Policy{{Name: "payments", Rules: []toolpolicy.Rule{
		{Name: "no-pay", Tools: []string{"tap"}, Expression: `targets.exists(e, e.label == "Pay")`, Action: toolpolicy.Block},
		{Name: "clipboard", Tools: []string{"send_to_clipboard"}, Expression: `true`, Action: toolpolicy.Approve},
	}}}}
	var err error
	if f.policies, err = set.Encode(); err != nil {
		t.Fatal(err)
	}
	rig := &toolRig{}
	up := httptest.NewServer(rig)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	f.gw.Upstream = func(ns, r string) (*url.URL, bool) { return u, ns == f.ns && r == "rig-a" }
	return f, rig
}

// A loop that skips its own ToolPolicy check still cannot tap Pay: the
// gateway decides by the rules the manager gave the pod, on the screen it
// relayed last.
func TestGatewayRechecksToolPolicyRules(t *testing.T) {
	f, rig := newPolicyFarm(t)
	tok, _ := f.attemptToken(t, "r1", "rig-a", contract.DefaultRigAudience)

	pay := `{"bbox":[0.4,0.82,0.6,0.88]}`
	// No screen seen yet: nothing marks the spot as Pay.
	if code, body := f.callTool(t, "rig-a", tok, "tap", pay); code != http.StatusOK {
		t.Fatalf("a tap before any screen: %d %s", code, body)
	}
	if code, body := f.callTool(t, "rig-a", tok, "peek", `{}`); code != http.StatusOK {
		t.Fatalf("peek: %d %s", code, body)
	}
	code, body := f.callTool(t, "rig-a", tok, "tap", pay)
	if code != http.StatusForbidden || !strings.Contains(body, "refused by ToolPolicy payments (rule no-pay)") {
		t.Errorf("tapping Pay on the screen the gateway relayed: %d %s, want 403 naming the rule", code, body)
	}
	if code, body := f.callTool(t, "rig-a", tok, "tap", `{"bbox":[0.1,0.1,0.2,0.2]}`); code != http.StatusOK {
		t.Errorf("a tap elsewhere: %d %s", code, body)
	}
	if got := strings.Join(rig.reached(), ","); got != "tap,peek,tap" {
		t.Errorf("the rig saw %s, want the refused tap kept from it", got)
	}
	// What the rig reads is what the gateway checked: a second name, a
	// capitalised argument or JSON Go does not read cannot slip a tap of
	// Pay past it.
	for _, c := range []struct {
		body string
		code int
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"peek","NAME":"tap","arguments":` + pay + `}}`, http.StatusForbidden},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tap","arguments":{"BBOX":[0.4,0.82,0.6,0.88]}}}`, http.StatusForbidden},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tap","arguments":` + pay + `},"x":NaN}`, http.StatusBadRequest},
		{`{"jsonrpc":"2.0","id":1,"method":"notes","METHOD":"tools/call","params":{"name":"tap","arguments":` + pay + `}}`, http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, f.http.URL+"/rigs/"+f.ns+"/rig-a/mcp", strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s: %d %s, want %d", c.body, resp.StatusCode, b, c.code)
		}
	}
	if got := strings.Join(rig.reached(), ","); got != "tap,peek,tap" {
		t.Errorf("the rig saw %s, want none of the disguised taps", got)
	}

	// A batch cannot carry a call past the check: MCP sends none.
	req, _ := http.NewRequest(http.MethodPost, f.http.URL+"/rigs/"+f.ns+"/rig-a/mcp",
		strings.NewReader(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tap","arguments":`+pay+`}}]`))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a batched tap: %d, want 400", resp.StatusCode)
	}
}

// A call held for approval passes the gateway once per approval a person
// gave it: not before, not twice, not on another request's answer; a busy
// answer gives the approval back for the loop's retry.
func TestGatewayHoldsWhatNeedsApproval(t *testing.T) {
	f, rig := newPolicyFarm(t)
	tok, _ := f.attemptToken(t, "r1", "rig-a", contract.DefaultRigAudience)
	ctx := context.Background()
	clip := `{"text":"4111 1111 1111 1111"}`
	if code, body := f.callTool(t, "rig-a", tok, "send_to_clipboard", clip); code != http.StatusForbidden || !strings.Contains(body, "holds send_to_clipboard for a person's approval") {
		t.Fatalf("an unapproved call: %d %s, want 403", code, body)
	}

	// The loop publishes its request, then clears it once answered.
	var run farmv1.AgentRun
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "r1"}, &run); err != nil {
		t.Fatal(err)
	}
	run.Status.Progress = &farmv1.RunProgress{Approval: &farmv1.ApprovalRequest{ID: "a1-t3-1-abcdef", Tool: "send_to_clipboard", Policy: "payments", Rule: "clipboard"}}
	if err := env.Client.Status().Update(ctx, &run); err != nil {
		t.Fatal(err)
	}
	f.gw.NoteRun(&run) // the runs' watch does this in the binary
	answer := func(v string) {
		t.Helper()
		p := client.MergeFrom(run.DeepCopy())
		run.Annotations = map[string]string{contract.AnnotationApproval: v}
		if err := env.Client.Patch(ctx, &run, p); err != nil {
			t.Fatal(err)
		}
	}
	answer(contract.ApprovalAnswer(contract.Deny, "a1-t3-1-abcdef"))
	if code, _ := f.callTool(t, "rig-a", tok, "send_to_clipboard", clip); code != http.StatusForbidden {
		t.Errorf("a denied call: %d, want 403", code)
	}
	answer(contract.ApprovalAnswer(contract.Approve, "a1-t3-1-abcdef"))
	run.Status.Progress.Approval = nil
	if err := env.Client.Status().Update(ctx, &run); err != nil {
		t.Fatal(err)
	}

	rig.mu.Lock()
	rig.busy = true
	rig.mu.Unlock()
	if code, body := f.callTool(t, "rig-a", tok, "send_to_clipboard", clip); code != http.StatusOK || !strings.Contains(body, "busy") {
		t.Fatalf("the approved call, the rig busy: %d %s", code, body)
	}
	rig.mu.Lock()
	rig.busy = false
	rig.mu.Unlock()
	if code, body := f.callTool(t, "rig-a", tok, "send_to_clipboard", clip); code != http.StatusOK {
		t.Fatalf("the approved call retried after busy: %d %s", code, body)
	}
	if code, body := f.callTool(t, "rig-a", tok, "send_to_clipboard", clip); code != http.StatusForbidden || !strings.Contains(body, "no approval of it left") {
		t.Errorf("the approved call a second time: %d %s, want 403", code, body)
	}
	if got := strings.Join(rig.reached(), ","); got != "send_to_clipboard,send_to_clipboard" {
		t.Errorf("the rig saw %s, want the busy try and its retry", got)
	}
}

func TestReplyText(t *testing.T) {
	for _, c := range []struct {
		ct, body string
		text     string
		isErr    bool
		ok       bool
	}{
		{"application/json", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a"},{"type":"image","data":"x"},{"type":"text","text":"b"}]}}`, "a\nb", false, true},
		{"text/event-stream", "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[],\"isError\":true}}\r\n\r\n", "", true, true},
		{"application/json", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"busy"}}`, "busy", true, true},
		{"application/json", `not json`, "", false, false},
	} {
		text, isErr, ok := replyText(c.ct, []byte(c.body))
		if text != c.text || isErr != c.isErr || ok != c.ok {
			t.Errorf("replyText(%s, %q) = %q %v %v, want %q %v %v", c.ct, c.body, text, isErr, ok, c.text, c.isErr, c.ok)
		}
	}
}
