// Package rigtest is an in-process fake rig for tests and benchmarks: an MCP
// server (the official SDK's) over streamable HTTP with the rig's tool
// shapes, returning a text line and a JPEG per call. It is not the rig
// simulator (internal/sim/rigsim); it only lets the loop's tests script a rig.
package rigtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// Instructions is the fake rig's doctrine text.
const Instructions = "Fake rig: one phone, one camera, one stylus."

var bboxSchema = json.RawMessage(`{"type":"object","properties":{"bbox":{"type":"array","items":{"type":"number","minimum":0,"maximum":1},"minItems":4,"maxItems":4}},"required":["bbox"],"additionalProperties":false}`)
var noArgs = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

// Rig is a running fake rig.
type Rig struct {
	*httptest.Server
	// JPEG is returned by every call (nil: a tiny one).
	JPEG []byte
	// Busy makes the next n gesture calls answer "busy, retry".
	Busy atomic.Int32
	// Fail makes every call of the named tool return an error result.
	Fail sync.Map
	// PhysiClaw makes results take the real server's form: the first text
	// block one line, "<action> | <verdict> — <hint>", then the JPEG, then
	// the listing as a text block of its own. Otherwise (the older form)
	// one text block holds the action, the verdict and the listing, line by
	// line. Set it before the first call.
	PhysiClaw bool
	// Unchanged makes results say "screen: no visible change"; NoVerdict
	// makes them say no verdict at all (frames that could not be compared).
	Unchanged, NoVerdict atomic.Bool
	// NotSetUp makes every call answer as a PhysiClaw rig that is not set up.
	NotSetUp atomic.Bool
	calls    atomic.Int64
	mu       sync.Mutex
	log      []string
	screen   string // the listing rows every call returns (SetScreen)
	down     atomic.Bool
}

// New starts a fake rig.
func New() *Rig {
	r := &Rig{JPEG: TinyJPEG(1024)}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fakerig", Version: "0"}, &mcp.ServerOptions{Instructions: Instructions})
	add := func(name, desc string, schema json.RawMessage, readOnly bool) {
		t := &mcp.Tool{Name: name, Description: desc, InputSchema: schema}
		if readOnly {
			t.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
		}
		srv.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return r.handle(name, req.Params.Arguments), nil
		})
	}
	add(contract.ToolPeek, "overhead camera photo", noArgs, true)
	add(contract.ToolTap, "tap at the bbox centre", bboxSchema, false)
	add(contract.ToolHomeScreen, "go home", noArgs, false)
	add(contract.ToolForceQuit, "quit the current app", noArgs, false)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true})
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.down.Load() {
			hj, ok := w.(http.Hijacker)
			if ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, req)
	}))
	return r
}

// Endpoint is the MCP URL.
func (r *Rig) Endpoint() string { return r.URL + "/mcp" }

// SetDown makes the rig drop every connection (true) or serve again (false).
func (r *Rig) SetDown(down bool) {
	r.down.Store(down)
	if down {
		r.CloseClientConnections()
	}
}

// Calls is the number of tool calls served.
func (r *Rig) Calls() int64 { return r.calls.Load() }

// SetScreen sets the listing rows every call returns from now on (after
// the listing header), e.g. `0 [text] "Pay now" [0.300,0.800,0.700,0.860] 0.97`.
func (r *Rig) SetScreen(rows string) {
	r.mu.Lock()
	r.screen = rows
	r.mu.Unlock()
}

// Log lists the calls served, as "name args".
func (r *Rig) Log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

func (r *Rig) handle(name string, args json.RawMessage) *mcp.CallToolResult {
	if name != contract.ToolPeek && r.Busy.Load() > 0 {
		r.Busy.Add(-1)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "busy, retry"}}}
	}
	n := r.calls.Add(1)
	r.mu.Lock()
	r.log = append(r.log, strings.TrimSpace(name+" "+string(args)))
	r.mu.Unlock()
	if r.NotSetUp.Load() {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "Error executing tool " + name + ": Hardware not set up. Run /setup to connect and calibrate."}}}
	}
	if _, fail := r.Fail.Load(name); fail {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: name + " failed: the stylus did not reach the screen"}}}
	}
	r.mu.Lock()
	rows := r.screen
	r.mu.Unlock()
	if rows == "" {
		rows = `0 [text] "Settings" [0.510,0.550,0.590,0.630] 0.96`
	}
	verdict := "screen: changed"
	if r.Unchanged.Load() {
		verdict = "screen: no visible change"
	}
	if r.PhysiClaw {
		first := fmt.Sprintf("%s done (call %d) | %s — look at the attached view", name, n, verdict)
		if r.NoVerdict.Load() {
			first = fmt.Sprintf("%s done (call %d) — look at the attached view", name, n)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: first},
			&mcp.ImageContent{MIMEType: "image/jpeg", Data: r.JPEG},
			&mcp.TextContent{Text: listing.Header + "\n" + rows},
		}}
	}
	if r.NoVerdict.Load() {
		verdict = "hint: look at the attached view"
	}
	text := fmt.Sprintf("%s done (call %d)\n%s\n%s\n%s", name, n, verdict, listing.Header, rows)
	return &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: text},
		&mcp.ImageContent{MIMEType: "image/jpeg", Data: r.JPEG},
	}}
}

// TinyJPEG returns size bytes that start and end like a JPEG.
func TinyJPEG(size int) []byte {
	if size < 4 {
		size = 4
	}
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*131 + i>>8)
	}
	b[0], b[1], b[size-2], b[size-1] = 0xFF, 0xD8, 0xFF, 0xD9
	return b
}

// Unused reserves a local address nothing listens on.
func Unused() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "http://127.0.0.1:9/mcp"
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/mcp"
}
