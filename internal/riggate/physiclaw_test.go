//go:build physiclaw

package riggate

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// The gateway in front of a real PhysiClaw control plane (make
// check-physiclaw): PhysiClaw refuses a Host that is not loopback (421) and
// a foreign Origin (403), yet the health route and the holder's MCP
// handshake go through, reached by the rig network's name from a page with
// an Origin of its own.
func TestPhysiClawBehindTheGateway(t *testing.T) {
	base := os.Getenv("PHYSICLAW_URL")
	if base == "" {
		t.Fatal("PHYSICLAW_URL is not set: the control plane's base URL, e.g. http://127.0.0.1:18848")
	}
	up, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	f := newFarm(t)
	f.gw.Upstream = func(ns, rig string) (*url.URL, bool) { return up, ns == f.ns && rig == "rig-a" }
	f.gw.Public = DefaultPublicPaths
	holder, _ := f.attemptToken(t, "r1", "rig-a", contract.DefaultRigAudience)

	send := func(method, path, tok, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, f.http.URL+"/rigs/"+f.ns+"/rig-a"+path, strings.NewReader(body))
		req.Host = "rig-host-1.farm.example:8050"
		req.Header.Set("Origin", "http://rig-host-1.farm.example:8050")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if code, _, body := send(http.MethodGet, "/api/status", "", ""); code != http.StatusOK || !strings.Contains(body, `"ready"`) {
		t.Errorf("health route through the gateway: %d %s, want 200 and the status JSON", code, body)
	}
	code, h, body := send(http.MethodPost, "/mcp", holder,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"check","version":"0"}}}`)
	if code != http.StatusOK || h.Get("Mcp-Session-Id") == "" || !strings.Contains(body, `"physiclaw"`) {
		t.Errorf("the holder's initialize through the gateway: %d %v %s, want 200 with a session", code, h, body)
	}
}
