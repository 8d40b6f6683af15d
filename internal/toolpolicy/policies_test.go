package toolpolicy

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/rig/listing"
)

// A checkout screen as the rig lists it.
var checkout = listing.Parse(listing.Header + `
0 [text] "Cart" [0.100,0.050,0.300,0.090] 0.95
1 [text] "Pay now" [0.300,0.800,0.700,0.860] 0.97
2 [text] "Pay attention to sizes" [0.100,0.600,0.900,0.640] 0.93
3 [icon] "" [0.850,0.050,0.950,0.100] 0.85`)

func tapAt(l, t, r, b float64) Call {
	args, _ := json.Marshal(map[string]any{"bbox": []float64{l, t, r, b}})
	return Call{Tool: "tap", Args: args, Screen: checkout}
}

var payRule = Rule{Name: "no-pay", Tools: []string{"tap", "double_tap", "long_press", "sequence"},
	Expression: `targets.exists(e, e.label.matches('(?i)\\b(pay|buy|send)\\b'))`, Action: Block,
	Message: "paying is not allowed on this farm"}

func mustCompile(t *testing.T, set Set) *Policies {
	t.Helper()
	p, err := Compile(set)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestListingParse(t *testing.T) {
	if len(checkout) != 4 || checkout[1].Label != "Pay now" || checkout[1].BBox != [4]float64{0.3, 0.8, 0.7, 0.86} || checkout[3].Kind != "icon" || checkout[1].Conf != 0.97 {
		t.Fatalf("parsed %+v", checkout)
	}
	if listing.Parse("Tapped at bbox [0.1, 0.2, 0.3, 0.4]\nscreen: changed") != nil {
		t.Error("a text without a listing has no elements")
	}
}

// The example: a tap whose point lands on "Pay now" is blocked with
// the rule's message; a tap elsewhere, or another tool, runs.
func TestRuleBlocksPayTap(t *testing.T) {
	p := mustCompile(t, Set{Policies: []Policy{{Name: "shop", Rules: []Rule{payRule}}}})
	d := p.Before(context.Background(), 3, tapAt(0.4, 0.81, 0.6, 0.85))
	if !d.Blocked() || d.Policy != "shop" || d.Rule != "no-pay" || d.Message != "paying is not allowed on this farm" {
		t.Fatalf("tap on Pay now: %+v, want Block by shop/no-pay", d)
	}
	for name, c := range map[string]Call{
		"tap on Cart":              tapAt(0.12, 0.06, 0.2, 0.08),
		"tap on 'Pay attention'":   tapAt(0.2, 0.6, 0.3, 0.63),
		"peek":                     {Tool: "peek", Screen: checkout},
		"tap with no screen known": {Tool: "tap", Args: json.RawMessage(`{"bbox":[0.4,0.81,0.6,0.85]}`)},
	} {
		d := p.Before(context.Background(), 3, c)
		want := name == "tap on 'Pay attention'" // the rule matches "Pay" as a word: the next test carves an exception
		if d.Blocked() != want {
			t.Errorf("%s: %+v, blocked want %v", name, d, want)
		}
	}
	// A sequence whose second step taps Pay now is blocked too.
	seq, _ := json.Marshal(map[string]any{"actions": []any{
		map[string]any{"tool_name": "send_to_clipboard", "arg": "hello"},
		map[string]any{"tool_name": "tap", "arg": []float64{0.4, 0.81, 0.6, 0.85}},
	}})
	if d := p.Before(context.Background(), 3, Call{Tool: "sequence", Args: seq, Screen: checkout}); !d.Blocked() {
		t.Errorf("a sequence tapping Pay now: %+v", d)
	}
}

// Within a policy the first matching rule decides (an Allow above a broader
// Block is an exception); across policies the strongest wins.
func TestRuleOrderAndStrength(t *testing.T) {
	allowAttention := Rule{Name: "sizes-ok", Expression: `targets.exists(e, e.label.startsWith('Pay attention'))`, Action: Allow}
	onAttention := tapAt(0.2, 0.6, 0.3, 0.63)
	one := mustCompile(t, Set{Policies: []Policy{{Name: "shop", Rules: []Rule{allowAttention, payRule}}}})
	if d := one.Before(context.Background(), 1, onAttention); d.Blocked() || d.Action != Allow || d.Rule != "sizes-ok" {
		t.Errorf("Allow above Block in one policy: %+v, want Allow", d)
	}
	two := mustCompile(t, Set{Policies: []Policy{
		{Name: "a-exceptions", Rules: []Rule{allowAttention}},
		{Name: "b-safety", Rules: []Rule{payRule}},
	}})
	if d := two.Before(context.Background(), 1, onAttention); !d.Blocked() || d.Policy != "b-safety" {
		t.Errorf("another policy's Allow never clears a Block: %+v", d)
	}
	approve := mustCompile(t, Set{Policies: []Policy{
		{Name: "a", Rules: []Rule{{Name: "clip", Tools: []string{"send_to_clipboard"}, Expression: `text.contains('@')`, Action: Approve, Message: "an address leaves the farm"}}, ApprovalTimeoutSeconds: 30},
	}})
	d := approve.Before(context.Background(), 1, Call{Tool: "send_to_clipboard", Args: json.RawMessage(`{"text":"bob@example.com"}`)})
	if !d.NeedsApproval() || d.ApprovalTimeout != 30*time.Second || d.Message != "an address leaves the farm" {
		t.Errorf("Approve: %+v", d)
	}
	if d := approve.Before(context.Background(), 1, Call{Tool: "send_to_clipboard", Args: json.RawMessage(`{"text":"hello"}`)}); d.Action != "" {
		t.Errorf("no rule matches: %+v, want the zero decision", d)
	}
}

// A rule that cannot be evaluated blocks (a safety rule fails closed), and
// says why; compile errors name the policy and the rule.
func TestRuleErrors(t *testing.T) {
	p := mustCompile(t, Set{Policies: []Policy{{Name: "p", Rules: []Rule{{Name: "needs-bbox", Expression: `args.bbox[0] > 0.5`, Action: Block}}}}})
	d := p.Before(context.Background(), 1, Call{Tool: "home_screen"})
	if !d.Blocked() || !strings.Contains(d.Message, "could not be evaluated") || !strings.Contains(d.Message, "needs-bbox") {
		t.Errorf("an unevaluable rule: %+v, want a block that says so", d)
	}
	_, err := Compile(Set{Policies: []Policy{{Name: "bad", Rules: []Rule{
		{Name: "syntax", Expression: `tool ==`, Action: Block},
		{Name: "not-bool", Expression: `tool + "x"`, Action: Block},
		{Name: "no-action", Expression: `true`, Action: "Maybe"},
		{Name: "unknown-var", Expression: `phone.locked`, Action: Block},
		{Name: "misspelt-field", Expression: `targets.exists(e, e.lable == 'Pay')`, Action: Block},
	}}}})
	if err == nil {
		t.Fatal("bad rules compiled")
	}
	for _, want := range []string{"ToolPolicy bad, rule syntax", "rule not-bool", "want a bool", "rule no-action", `action "Maybe"`, "rule unknown-var", "undeclared reference", "rule misspelt-field", "lable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	seen     []ReviewRequest
	answer   func(ReviewRequest) (*ReviewResponse, time.Duration)
	caBundle []byte
}

func newHookServer(t *testing.T, answer func(ReviewRequest) (*ReviewResponse, time.Duration)) *hookServer {
	h := &hookServer{answer: answer}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rv Review
		if err := json.NewDecoder(r.Body).Decode(&rv); err != nil || rv.Kind != ReviewKind || rv.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.seen = append(h.seen, *rv.Request)
		h.mu.Unlock()
		resp, delay := h.answer(*rv.Request)
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		_ = json.NewEncoder(w).Encode(Review{APIVersion: ReviewAPIVersion, Kind: ReviewKind, Response: resp})
	}))
	t.Cleanup(h.Close)
	h.caBundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.Certificate().Raw})
	return h
}

func (h *hookServer) requests() []ReviewRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ReviewRequest(nil), h.seen...)
}

func TestWebhookDecides(t *testing.T) {
	h := newHookServer(t, func(r ReviewRequest) (*ReviewResponse, time.Duration) {
		if r.Tool == "force_quit" {
			return &ReviewResponse{UID: r.UID, Action: Block, Message: "the banking app must not be quit"}, 0
		}
		return &ReviewResponse{UID: r.UID, Action: Allow}, 0
	})
	p := mustCompile(t, Set{Policies: []Policy{{Name: "ext", Webhooks: []Webhook{{Name: "audit", URL: h.URL + "/review", CABundle: h.caBundle}}}}})
	p.Bind("farm/r1", 2, t.Logf)
	if d := p.Before(context.Background(), 4, Call{Tool: "force_quit", Screen: checkout}); !d.Blocked() || d.Rule != "webhook:audit" || d.Message != "the banking app must not be quit" {
		t.Errorf("webhook block: %+v", d)
	}
	if d := p.Before(context.Background(), 5, tapAt(0.1, 0.1, 0.2, 0.2)); d.Blocked() {
		t.Errorf("webhook allow: %+v", d)
	}
	got := h.requests()
	if len(got) != 2 || got[0].Run != "farm/r1" || got[0].Attempt != 2 || got[0].Turn != 4 || got[0].Policy != "ext" || got[0].Webhook != "audit" || len(got[0].Screen) != 4 || got[0].UID == "" {
		t.Errorf("the webhook saw %+v", got)
	}
	// A rule's block is final: the webhook is not asked.
	blocked := mustCompile(t, Set{Policies: []Policy{{Name: "ext", Rules: []Rule{payRule}, Webhooks: []Webhook{{Name: "audit", URL: h.URL, CABundle: h.caBundle}}}}})
	if d := blocked.Before(context.Background(), 6, tapAt(0.4, 0.81, 0.6, 0.85)); !d.Blocked() || d.Rule != "no-pay" {
		t.Errorf("rule block: %+v", d)
	}
	if n := len(h.requests()); n != 2 {
		t.Errorf("the webhook was asked %d times, want 2: a rule's block is final", n)
	}
}

// A webhook that does not answer in time, answers nonsense or cannot be
// trusted follows its failurePolicy.
func TestWebhookFailurePolicy(t *testing.T) {
	slow := newHookServer(t, func(r ReviewRequest) (*ReviewResponse, time.Duration) {
		return &ReviewResponse{UID: r.UID, Action: Allow}, 3 * time.Second
	})
	wrongUID := newHookServer(t, func(r ReviewRequest) (*ReviewResponse, time.Duration) {
		return &ReviewResponse{UID: "someone-else", Action: Allow}, 0
	})
	badAction := newHookServer(t, func(r ReviewRequest) (*ReviewResponse, time.Duration) {
		return &ReviewResponse{UID: r.UID, Action: "Perhaps"}, 0
	})
	cases := []struct {
		name    string
		hook    Webhook
		blocked bool
		says    string
	}{
		{"timeout, Fail", Webhook{Name: "slow", URL: slow.URL, CABundle: slow.caBundle, TimeoutSeconds: 1}, true, "no answer within 1s"},
		{"timeout, Ignore", Webhook{Name: "slow", URL: slow.URL, CABundle: slow.caBundle, TimeoutSeconds: 1, FailurePolicy: FailurePolicyIgnore}, false, ""},
		{"untrusted certificate, Fail", Webhook{Name: "slow", URL: slow.URL, TimeoutSeconds: 1}, true, "certificate"},
		{"wrong uid", Webhook{Name: "uid", URL: wrongUID.URL, CABundle: wrongUID.caBundle}, true, "is not the request's"},
		{"unknown action", Webhook{Name: "act", URL: badAction.URL, CABundle: badAction.caBundle}, true, `"Perhaps" is none of`},
	}
	for _, c := range cases {
		p := mustCompile(t, Set{Policies: []Policy{{Name: "ext", Webhooks: []Webhook{c.hook}}}})
		start := time.Now()
		d := p.Before(context.Background(), 1, Call{Tool: "peek"})
		if d.Blocked() != c.blocked || !strings.Contains(d.Message, c.says) {
			t.Errorf("%s: %+v, want blocked %v saying %q", c.name, d, c.blocked, c.says)
		}
		if c.hook.TimeoutSeconds == 1 && time.Since(start) > 2500*time.Millisecond {
			t.Errorf("%s: took %s, past the 1 s timeout", c.name, time.Since(start))
		}
	}
	if _, err := Compile(Set{Policies: []Policy{{Name: "ext", Webhooks: []Webhook{{Name: "plain", URL: "http://example.com"}, {Name: "ca", URL: "https://x", CABundle: []byte("junk")}}}}}); err == nil ||
		!strings.Contains(err.Error(), "not an https URL") || !strings.Contains(err.Error(), "caBundle holds no PEM") {
		t.Errorf("bad webhooks compiled: %v", err)
	}
}

// After and End are observe-only: sent off the session's path, waited for at the end.
func TestWebhookObserves(t *testing.T) {
	h := newHookServer(t, func(r ReviewRequest) (*ReviewResponse, time.Duration) { return nil, 0 })
	p := mustCompile(t, Set{Policies: []Policy{{Name: "ext", Webhooks: []Webhook{{Name: "log", URL: h.URL, CABundle: h.caBundle,
		Events: []string{EventAfterToolCall, EventSessionEnd}}}}}})
	p.Bind("farm/r1", 1, t.Logf)
	if d := p.Before(context.Background(), 1, Call{Tool: "peek"}); d.Action != "" {
		t.Errorf("a webhook not on BeforeToolCall decided %+v", d)
	}
	p.After(1, Call{Tool: "tap", Args: json.RawMessage(`{"bbox":[0.1,0.1,0.2,0.2]}`)}, "Tapped", false)
	p.End("DONE", "paid nothing")
	got := h.requests()
	if len(got) != 2 {
		t.Fatalf("the webhook saw %d requests, want 2 (after, end): %+v", len(got), got)
	}
	events := map[string]ReviewRequest{}
	for _, r := range got {
		events[r.Event] = r
	}
	if a := events[EventAfterToolCall]; a.Tool != "tap" || a.Result != "Tapped" {
		t.Errorf("after: %+v", a)
	}
	if e := events[EventSessionEnd]; e.Sentinel != "DONE" || e.Recap != "paid nothing" {
		t.Errorf("end: %+v", e)
	}
}

func TestSetEncodeAndApprovalTimeouts(t *testing.T) {
	set := Set{Policies: []Policy{{Name: "a", Rules: []Rule{payRule}}, {Name: "b", ApprovalTimeoutSeconds: 900, Rules: []Rule{{Name: "x", Expression: "true", Action: Approve}}}}}
	if !set.MayAskApproval() || set.LongestApprovalTimeout() != 900 {
		t.Errorf("approval: %v %d", set.MayAskApproval(), set.LongestApprovalTimeout())
	}
	if (Set{Policies: []Policy{{Name: "a", Rules: []Rule{payRule}}}}).LongestApprovalTimeout() != 0 {
		t.Error("a set with no Approve rule and no webhook never waits")
	}
	s, err := set.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(s)
	if err != nil || len(back.Policies) != 2 || back.Policies[1].Rules[0].Action != Approve {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	big := Set{Policies: []Policy{{Name: "big", Rules: []Rule{{Name: "x", Expression: strings.Repeat("a", MaxSetBytes), Action: Block}}}}}
	if _, err := big.Encode(); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an oversized set: %v", err)
	}
}

// An element's fields are typed: numbers compare as numbers, the box is a list.
func TestElementFields(t *testing.T) {
	p := mustCompile(t, Set{Policies: []Policy{{Name: "p", Rules: []Rule{{Name: "low-confidence-icon-at-top",
		Expression: `targets.exists(e, e.kind == 'icon' && e.conf < 0.9 && e.bbox[1] < 0.2 && e.id == 3) && size(screen) == 4`, Action: Block}}}}})
	if d := p.Before(context.Background(), 1, tapAt(0.86, 0.06, 0.94, 0.09)); !d.Blocked() {
		t.Errorf("tap on the icon: %+v", d)
	}
	if d := p.Before(context.Background(), 1, tapAt(0.12, 0.06, 0.2, 0.08)); d.Action != "" {
		t.Errorf("tap on Cart: %+v", d)
	}
}
