package rigsim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// testRig is a rig behind a real HTTP server with a real MCP client session.
type testRig struct {
	rig *Rig
	url string
	cs  *mcp.ClientSession
}

func startRig(t testing.TB, cfg Config) *testRig {
	t.Helper()
	r := New("test", cfg)
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	return &testRig{rig: r, url: srv.URL, cs: connect(t, srv.URL+"/mcp")}
}

func connect(t testing.TB, endpoint string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "rigsim-test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// result is a tool result taken apart.
type result struct {
	isError bool
	texts   []string
	images  int
	jpeg    []byte
}

func (tr *testRig) call(t *testing.T, tool string, args any) result {
	t.Helper()
	res, err := tr.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return split(res)
}

func split(res *mcp.CallToolResult) result {
	out := result{isError: res.IsError}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			out.texts = append(out.texts, c.Text)
		case *mcp.ImageContent:
			out.images++
			out.jpeg = c.Data
		}
	}
	return out
}

func (r result) text() string { return strings.Join(r.texts, "\n") }

// listing is the last text part that is a listing.
func (r result) listing(t *testing.T) []row {
	t.Helper()
	for i := len(r.texts) - 1; i >= 0; i-- {
		if strings.HasPrefix(r.texts[i], ListingHeader) {
			return parseListing(t, r.texts[i])
		}
	}
	t.Fatalf("no listing in result: %q", r.text())
	return nil
}

// row is one parsed listing row.
type row struct {
	id    int
	kind  string
	label string
	box   [4]float64
	conf  float64
}

var rowPattern = regexp.MustCompile(`^(\d+) \[(icon|text)\] "(.*)" \[(\d\.\d{3}),(\d\.\d{3}),(\d\.\d{3}),(\d\.\d{3})\] (\d\.\d{2})$`)

func parseListing(t *testing.T, s string) []row {
	t.Helper()
	lines := strings.Split(s, "\n")
	if lines[0] != ListingHeader {
		t.Fatalf("listing header = %q, want %q", lines[0], ListingHeader)
	}
	var rows []row
	for i, l := range lines[1:] {
		m := rowPattern.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("listing row %d does not match the contract format: %q", i, l)
		}
		var rw row
		rw.id, _ = strconv.Atoi(m[1])
		rw.kind = m[2]
		rw.label = m[3]
		for j := range 4 {
			rw.box[j], _ = strconv.ParseFloat(m[4+j], 64)
		}
		rw.conf, _ = strconv.ParseFloat(m[8], 64)
		rows = append(rows, rw)
	}
	return rows
}

// find returns the first row labelled label.
func find(t *testing.T, rows []row, label string) row {
	t.Helper()
	for _, r := range rows {
		if r.label == label {
			return r
		}
	}
	var labels []string
	for _, r := range rows {
		labels = append(labels, r.label)
	}
	t.Fatalf("no element labelled %q on screen; labels: %q", label, labels)
	return row{}
}

func has(rows []row, label string) bool {
	for _, r := range rows {
		if r.label == label {
			return true
		}
	}
	return false
}

func bboxArg(r row) map[string]any { return map[string]any{"bbox": r.box[:]} }

// tapLabel peeks, finds label and taps it; it returns the tap's result.
func (tr *testRig) tapLabel(t *testing.T, label string) result {
	t.Helper()
	rows := tr.call(t, "peek", nil).listing(t)
	res := tr.call(t, "tap", bboxArg(find(t, rows, label)))
	if res.isError {
		t.Fatalf("tap %q: %s", label, res.text())
	}
	return res
}

func (tr *testRig) state(t *testing.T) phone.State {
	t.Helper()
	var s phone.State
	getJSON(t, tr.url+"/api/sim/state", &s)
	return s
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
