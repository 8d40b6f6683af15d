package riggate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// The gateway checks a tools/call again against the rules of the run's
// ToolPolicies, as the manager gave them to the attempt pod (its
// CLAWFARM_TOOL_POLICIES, which the loop cannot change), and against the
// latest screen it relayed to that pod; and a call the rules hold for
// approval passes only once per approval a person gave it. So a loop that
// skips its own checks still cannot run a refused or unapproved call.
// Webhooks are the loop's alone: asking one again here would ask it twice.

// maxCallBytes bounds a request body the gateway reads to find a tool call.
const maxCallBytes = 4 << 20

// maxReplyBytes bounds what the gateway keeps of a tool call's reply to read
// its screen; a longer reply leaves the screen unknown.
const maxReplyBytes = 8 << 20

// maxRequests is how many approval requests of one run the gateway keeps.
const maxRequests = 16

// guard is the gateway's memory for the re-check.
type guard struct {
	mu       sync.Mutex
	compiled map[string]*toolpolicy.Policies  // by the set's JSON
	screens  map[string][]listing.Element     // namespace/pod → the latest screen relayed
	requests map[types.UID][]*approvalRequest // run UID → its approval requests seen, oldest first
}

type approvalRequest struct {
	farmv1.ApprovalRequest
	used bool // one call went through on it
}

// toolCall is the tool call a request carries, if it carries one.
type toolCall struct {
	Name string
	Args json.RawMessage
	// mixedCase: an argument's name has a capital letter. The rig contract's
	// names are lower case, and a rig that matches names regardless of case
	// (a Go server does) would read such an argument as the one the rules
	// did not see.
	mixedCase bool
}

// rpcMessage and callParams are the parts of a JSON-RPC tools/call the
// gateway reads, and forwards re-encoded: the rig gets exactly the call
// that was checked, with no second "name" or "arguments" for a parser that
// reads them otherwise than Go does.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

type callParams struct {
	Meta      json.RawMessage `json:"_meta,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// readCall reads r's body, one JSON-RPC message, and finds the tool call in
// it. The message goes on re-encoded (rpcMessage), so that a rig parsing
// JSON otherwise than Go does (case-sensitive names, the first of two
// keys, NaN) still reads the message the gateway read. A body that is not
// one JSON object is refused: MCP sends no batches.
func readCall(r *http.Request) (*toolCall, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxCallBytes+1))
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(b) > maxCallBytes {
		return nil, errTooLarge
	}
	setBody := func(b []byte) { r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b)) }
	var m rpcMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: want one JSON-RPC message, a JSON object: %v", errMalformed, err)
	}
	if m.Method != "tools/call" {
		out, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		setBody(out)
		return nil, nil
	}
	var p callParams
	if err := json.Unmarshal(m.Params, &p); err != nil || p.Name == "" {
		return nil, fmt.Errorf("%w: a tools/call whose params name no tool", ErrForbidden)
	}
	call := &toolCall{Name: p.Name}
	if len(p.Arguments) > 0 && !bytes.Equal(bytes.TrimSpace(p.Arguments), []byte("null")) {
		var args any
		d := json.NewDecoder(bytes.NewReader(p.Arguments))
		d.UseNumber()
		if err := d.Decode(&args); err != nil {
			return nil, fmt.Errorf("%w: the arguments of %s are not JSON: %v", ErrForbidden, p.Name, err)
		}
		call.mixedCase = hasCapitalKey(args)
		if p.Arguments, err = json.Marshal(args); err != nil {
			return nil, err
		}
		call.Args = p.Arguments
	}
	params, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	m.Params = params
	out, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	setBody(out)
	return call, nil
}

// hasCapitalKey reports whether an object in v has a key with a capital letter.
func hasCapitalKey(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.ToLower(k) != k || hasCapitalKey(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasCapitalKey(e) {
				return true
			}
		}
	}
	return false
}

var (
	errTooLarge  = errors.New("request body over 4 MiB")
	errMalformed = errors.New("malformed request")
)

// ticket is an approval a call went through on; given back when the rig
// answered busy, as the loop then sends the same call again.
type ticket struct{ req *approvalRequest }

// check decides a call of caller c: nil when it may go to the rig.
func (g *Gateway) check(ctx context.Context, c *Caller, call *toolCall) (*ticket, error) {
	if c.Policies == "" {
		return nil, nil
	}
	if call.mixedCase {
		return nil, fmt.Errorf("%w: an argument of %s has a capital letter in its name; the rig's arguments are lower case", ErrForbidden, call.Name)
	}
	p, err := g.guard.policies(c.Policies)
	if err != nil {
		return nil, fmt.Errorf("%w: the ToolPolicies of pod %s/%s do not compile at the gateway: %v", ErrForbidden, c.Namespace, c.Pod, err)
	}
	d := p.Rules(toolpolicy.Call{Tool: call.Name, Args: call.Args, Screen: g.guard.screen(c)})
	switch {
	case d.Blocked():
		g.logf("rig %s/%s: refused %s of pod %s: ToolPolicy %s, rule %s", c.Namespace, c.Rig, call.Name, c.Pod, d.Policy, d.Rule)
		return nil, fmt.Errorf("%w: %s is refused by ToolPolicy %s (rule %s), checked again at the rig's gateway", ErrForbidden, call.Name, d.Policy, d.Rule)
	case !d.NeedsApproval():
		return nil, nil
	}
	var run farmv1.AgentRun
	if err := g.Runs.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Run}, &run); err != nil {
		return nil, fmt.Errorf("run %s/%s, to see its approvals: %w", c.Namespace, c.Run, err)
	}
	if run.UID == c.RunUID {
		g.NoteRun(&run)
	}
	decision, id, ok := contract.ParseApprovalAnswer(run.Annotations[contract.AnnotationApproval])
	if ok && decision == contract.Approve && run.UID == c.RunUID {
		if t := g.guard.take(c.RunUID, id, call.Name, d); t != nil {
			g.logf("rig %s/%s: %s of pod %s goes through on approval %s (ToolPolicy %s, rule %s)", c.Namespace, c.Rig, call.Name, c.Pod, id, d.Policy, d.Rule)
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: ToolPolicy %s (rule %s) holds %s for a person's approval, and run %s has no approval of it left (kubectl claw approve answers the request the loop publishes)",
		ErrForbidden, d.Policy, d.Rule, call.Name, c.Run)
}

// NoteRun remembers the approval request a run publishes, so that the call
// it approves is known once the loop has cleared it. The binary calls it
// from the runs' watch; a run that is deleted is forgotten.
func (g *Gateway) NoteRun(run *farmv1.AgentRun) {
	gd := &g.guard
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if run.DeletionTimestamp != nil {
		delete(gd.requests, run.UID)
		return
	}
	if run.Status.Progress == nil || run.Status.Progress.Approval == nil {
		return
	}
	a := run.Status.Progress.Approval
	for _, r := range gd.requests[run.UID] {
		if r.ID == a.ID {
			return
		}
	}
	if gd.requests == nil {
		gd.requests = map[types.UID][]*approvalRequest{}
	}
	reqs := append(gd.requests[run.UID], &approvalRequest{ApprovalRequest: *a})
	if len(reqs) > maxRequests {
		reqs = reqs[len(reqs)-maxRequests:]
	}
	gd.requests[run.UID] = reqs
}

// ForgetRun drops what the gateway remembers of a run that is gone.
func (g *Gateway) ForgetRun(uid types.UID) {
	g.guard.mu.Lock()
	defer g.guard.mu.Unlock()
	delete(g.guard.requests, uid)
}

// take uses up the approval id of the run, if it is a request for this
// tool by the same policy and rule that has not carried a call yet.
func (gd *guard) take(run types.UID, id, tool string, d toolpolicy.Decision) *ticket {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	for _, r := range gd.requests[run] {
		if r.ID == id && r.Tool == tool && r.Policy == d.Policy && r.Rule == d.Rule && !r.used {
			r.used = true
			return &ticket{req: r}
		}
	}
	return nil
}

func (gd *guard) giveBack(t *ticket) {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	t.req.used = false
}

func (gd *guard) policies(set string) (*toolpolicy.Policies, error) {
	gd.mu.Lock()
	p, ok := gd.compiled[set]
	gd.mu.Unlock()
	if ok {
		return p, nil
	}
	s, err := toolpolicy.Decode(set)
	if err != nil {
		return nil, err
	}
	if p, err = toolpolicy.Compile(s); err != nil {
		return nil, err
	}
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if gd.compiled == nil || len(gd.compiled) >= 64 {
		gd.compiled = map[string]*toolpolicy.Policies{}
	}
	gd.compiled[set] = p
	return p, nil
}

func podKey(c *Caller) string { return c.Namespace + "/" + c.Pod }

func (gd *guard) screen(c *Caller) []listing.Element {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	return gd.screens[podKey(c)]
}

// replied reads a tool call's reply the gateway relayed: its screen, when it
// shows one, becomes the pod's latest; a busy answer gives the approval the
// call went through on back.
func (gd *guard) replied(c *Caller, contentType string, body []byte, complete bool, t *ticket) {
	text, isError, ok := replyText(contentType, body)
	if !complete || !ok {
		return
	}
	if t != nil && isError && strings.Contains(strings.ToLower(text), "busy") {
		gd.giveBack(t)
	}
	if screen := listing.Parse(text); screen != nil {
		gd.mu.Lock()
		if gd.screens == nil {
			gd.screens = map[string][]listing.Element{}
		}
		gd.screens[podKey(c)] = screen
		gd.mu.Unlock()
	}
}

// forgetPod drops a pod's screen.
func (gd *guard) forgetPod(namespace, pod string) {
	gd.mu.Lock()
	defer gd.mu.Unlock()
	delete(gd.screens, namespace+"/"+pod)
}

// replyText is the text of a tools/call reply, JSON or a stream of events,
// its content's texts joined as the loop joins them; a JSON-RPC error is
// an error reply with its message.
func replyText(contentType string, body []byte) (text string, isError, ok bool) {
	var payloads [][]byte
	if strings.HasPrefix(contentType, "text/event-stream") {
		for _, line := range bytes.Split(body, []byte("\n")) {
			if d, found := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:")); found {
				payloads = append(payloads, bytes.TrimSpace(d))
			}
		}
	} else {
		payloads = [][]byte{body}
	}
	for _, p := range payloads {
		var m struct {
			Result *struct {
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				IsError bool `json:"isError"`
			} `json:"result"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(p, &m) != nil {
			continue
		}
		switch {
		case m.Error != nil:
			return m.Error.Message, true, true
		case m.Result != nil:
			var texts []string
			for _, c := range m.Result.Content {
				if c.Type == "text" {
					texts = append(texts, c.Text)
				}
			}
			return strings.Join(texts, "\n"), m.Result.IsError, true
		}
	}
	return "", false, false
}

// capture is a ResponseWriter that keeps a copy of what it writes, up to
// maxReplyBytes.
type capture struct {
	http.ResponseWriter
	buf      bytes.Buffer
	overflow bool
}

func (c *capture) Write(b []byte) (int, error) {
	if !c.overflow {
		if c.buf.Len()+len(b) > maxReplyBytes {
			c.overflow = true
			c.buf.Reset()
		} else {
			c.buf.Write(b)
		}
	}
	return c.ResponseWriter.Write(b)
}

// Flush passes flushes on, so events still go out as they come.
func (c *capture) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
