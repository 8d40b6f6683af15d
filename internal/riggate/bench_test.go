package riggate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/clawfarm/clawfarm/internal/rig/listing"
	"github.com/clawfarm/clawfarm/internal/toolpolicy"
)

// oneCaller is a steady state's authority: the token's review cached, its
// pod in the cache.
type oneCaller struct{ c Caller }

func (o oneCaller) Caller(context.Context, string) (*Caller, error) { c := o.c; return &c, nil }

// BenchmarkGatewayCall is the cost the gateway adds to a rig call once the
// token's review is cached: the Lease read from an in-memory reader (the
// watch-fed cache of production), the proxying, one more loopback hop; and,
// in "policies", the call checked again against three ToolPolicy rules on
// the screen read from the last reply (a 40-row listing, as a real screen
// has). It reports the median and p99 of calls through the gateway and of
// the same calls straight to the rig, and their difference; the design
// budget is 5 ms at p99 (docs/benchmarks.md, "Rig gateway").
func BenchmarkGatewayCall(b *testing.B) {
	set := toolpolicy.Set{Policies: []toolpolicy.Policy{{Name: "farm", Rules: []toolpolicy.Rule{
		{Name: "no-pay", Tools: []string{"tap"}, Expression: `targets.exists(e, e.label.matches('(?i)pay|buy'))`, Action: toolpolicy.Block},
		{Name: "no-settings", Tools: []string{"tap"}, Expression: `screen.exists(e, e.label == "Erase All Content")`, Action: toolpolicy.Block},
		{Name: "clipboard", Tools: []string{"send_to_clipboard"}, Expression: `text.size() > 100`, Action: toolpolicy.Approve},
	}}}}
	policies, err := set.Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bare", func(b *testing.B) { benchGateway(b, "") })
	b.Run("policies", func(b *testing.B) { benchGateway(b, policies) })
}

func benchGateway(b *testing.B, policies string) {
	rows := []string{listing.Header}
	for i := range 40 {
		rows = append(rows, fmt.Sprintf(`%d [text] "Row %d" [0.1,%.3f,0.9,%.3f] 0.97`, i, i, float64(i)/40, float64(i+1)/40))
	}
	text, _ := json.Marshal("Tapped at bbox [0.4, 0.6, 0.58, 0.66]\n" + strings.Join(rows, "\n"))
	reply := fmt.Sprintf("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":%s}]}}\n\n", text)
	rig := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, reply)
	}))
	defer rig.Close()
	up, _ := url.Parse(rig.URL)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	holder := "run-uid"
	leases := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "farm", Name: "rig-a"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}).Build()
	gw := &Gateway{
		Upstream: func(string, string) (*url.URL, bool) { return up, true },
		Auth:     oneCaller{Caller{Namespace: "farm", Pod: "r-a1", Run: "r", RunUID: "run-uid", Rig: "rig-a", Policies: policies}},
		Leases:   leases,
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tap","arguments":{"bbox":[0.4,0.6,0.58,0.66]}}}`
	call := func(u string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", u, resp.StatusCode)
		}
		return time.Since(start)
	}
	through, direct := front.URL+"/rigs/farm/rig-a/mcp", rig.URL+"/mcp"
	var viaGW, straight []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		viaGW = append(viaGW, call(through))
		straight = append(straight, call(direct))
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) float64 {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(viaGW, 0.5), "gateway-p50-ms")
	b.ReportMetric(q(viaGW, 0.99), "gateway-p99-ms")
	b.ReportMetric(q(straight, 0.5), "direct-p50-ms")
	b.ReportMetric(q(straight, 0.99), "direct-p99-ms")
	b.ReportMetric(q(viaGW, 0.99)-q(straight, 0.99), "added-p99-ms")
}
