package modelsim_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

type responseBody struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Output []struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Name   string `json:"name"`
	} `json:"output"`
	Usage struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
	Error struct {
		Code string `json:"code"`
	} `json:"error"`
}

func postResponses(t *testing.T, url string, body map[string]any) (int, responseBody, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/responses", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	var out responseBody
	_ = json.Unmarshal(raw.Bytes(), &out)
	return resp.StatusCode, out, raw.String()
}

// The Responses wire: a reply is the scenario's turn as function calls; a
// request continues a stored response by id, billed as cached; a response
// stored with store:false, or past its expiry, is "not found".
func TestResponsesStoreAndExpire(t *testing.T) {
	sim := modelsim.NewServer(builtin(t))
	sim.ResponseTTL = 300 * time.Millisecond
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()

	// A trigger long enough to be cached (1024 tokens and more).
	trigger := "set a timer. " + strings.Repeat("The timer app is on the home screen. ", 150)
	code, first, raw := postResponses(t, srv.URL, map[string]any{"model": "sim/timer", "instructions": "drive the phone", "input": trigger})
	if code != http.StatusOK || first.Status != "completed" || len(first.Output) != 2 || first.Output[0].Name != "note" || first.Output[1].Name != "peek" {
		t.Fatalf("first response %d %s, want [note, peek]", code, raw)
	}
	results := func(r responseBody) []map[string]any {
		var items []map[string]any
		for _, o := range r.Output {
			items = append(items, map[string]any{"type": "function_call_output", "call_id": o.CallID, "output": "ok\n" + homeListing})
		}
		return items
	}
	code, second, raw := postResponses(t, srv.URL, map[string]any{"model": "sim/timer", "previous_response_id": first.ID, "input": results(first)})
	if code != http.StatusOK || len(second.Output) != 2 || second.Output[1].Name == "peek" {
		t.Fatalf("continued response %d %s, want the script's next step", code, raw)
	}
	// The stored conversation is cached, in OpenAI's granularity: 1024
	// tokens, then whole steps of 128.
	if n := first.Usage.InputTokens; n < 1024+128 {
		t.Fatalf("the first request has %d input tokens, too few to test caching", n)
	}
	want := 1024 + (first.Usage.InputTokens-1024)/128*128
	if c := second.Usage.InputTokensDetails.CachedTokens; c != want || second.Usage.InputTokens <= c {
		t.Errorf("usage %+v, want %d of the stored conversation's %d tokens cached and the new input on top", second.Usage, want, first.Usage.InputTokens)
	}

	code, unstored, _ := postResponses(t, srv.URL, map[string]any{"model": "sim/timer", "input": "set a timer", "store": false})
	if code != http.StatusOK {
		t.Fatal(code)
	}
	if code, r, raw := postResponses(t, srv.URL, map[string]any{"model": "sim/timer", "previous_response_id": unstored.ID, "input": results(unstored)}); code != http.StatusBadRequest || r.Error.Code != "previous_response_not_found" {
		t.Errorf("continuing a store:false response: %d %s, want 400 previous_response_not_found", code, raw)
	}

	time.Sleep(400 * time.Millisecond)
	if code, r, raw := postResponses(t, srv.URL, map[string]any{"model": "sim/timer", "previous_response_id": second.ID, "input": results(second)}); code != http.StatusBadRequest || r.Error.Code != "previous_response_not_found" {
		t.Errorf("continuing an expired response: %d %s, want 400 previous_response_not_found", code, raw)
	}
}

// A streamed response: created, each output item added, its arguments in
// fragments, done, then completed with the whole response.
func TestResponsesStreamEvents(t *testing.T) {
	srv := httptest.NewServer(modelsim.NewServer(builtin(t)).Handler())
	defer srv.Close()
	b, _ := json.Marshal(map[string]any{"model": "sim/timer", "input": "set a timer", "stream": true})
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	args := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type   string `json:"type"`
			ItemID string `json:"item_id"`
			Delta  string `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		if ev.Type == "response.function_call_arguments.delta" {
			args[ev.ItemID] += ev.Delta
		}
	}
	got := strings.Join(types, " ")
	want := "response.created " + strings.Repeat("response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done ", 2) + "response.completed"
	if got != want {
		t.Fatalf("events:\n%s\nwant\n%s", got, want)
	}
	for id, a := range args {
		if !json.Valid([]byte(a)) {
			t.Errorf("arguments of %s joined from their fragments: %q", id, a)
		}
	}
	if len(args) != 2 {
		t.Errorf("arguments streamed for %d items, want 2", len(args))
	}
}

// Only the newest screen is alive: modelsim refuses a request without
// previous_response_id that carries a superseded screen, and a store:false
// request that refers to anything stored (a previous response, an item id,
// an item reference). A chained request may hold superseded screens on the
// service: modelsim answers it, tells how many in a header, and reports them.
func TestResponsesLatestScreenRule(t *testing.T) {
	sim := modelsim.NewServer(builtin(t))
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	screen := func(n int) map[string]any {
		return map[string]any{"type": "message", "role": "user", "content": []map[string]any{
			{"type": "input_text", "text": "The screen after peek:"},
			{"type": "input_image", "image_url": "data:image/jpeg;base64,c2NyZWVu" + strings.Repeat("A", n*4), "detail": "auto"}}}
	}
	user := map[string]any{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": "set a timer"}}}
	output := func(id string) map[string]any {
		return map[string]any{"type": "function_call_output", "call_id": id, "output": "peeked\n" + homeListing}
	}
	call := func(id string) map[string]any {
		return map[string]any{"type": "function_call", "call_id": id, "name": "peek", "arguments": "{}"}
	}
	post := func(body map[string]any) (int, responseBody, http.Header) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+"/v1/responses", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out responseBody
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out, resp.Header
	}
	refused := 0
	for _, c := range []struct {
		name string
		body map[string]any
	}{
		{"two screens, stateless", map[string]any{"model": "sim/timer", "store": false,
			"input": []any{user, call("a"), output("a"), screen(1), call("b"), output("b"), screen(2)}}},
		{"two screens, a new chain", map[string]any{"model": "sim/timer",
			"input": []any{user, call("a"), output("a"), screen(1), call("b"), output("b"), screen(2)}}},
		{"store false continuing a response", map[string]any{"model": "sim/timer", "store": false, "previous_response_id": "resp_x",
			"input": []any{output("a")}}},
		{"store false naming a stored item", map[string]any{"model": "sim/timer", "store": false,
			"input": []any{user, map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}}, call("a"), output("a"), screen(1)}}},
		{"an item reference", map[string]any{"model": "sim/timer", "store": false,
			"input": []any{user, map[string]any{"type": "item_reference", "id": "fc_1"}}}},
	} {
		code, r, _ := post(c.body)
		if code != http.StatusBadRequest || r.Error.Code != modelsim.SupersededScreenCode {
			t.Errorf("%s: %d %+v, want 400 %s", c.name, code, r.Error, modelsim.SupersededScreenCode)
			continue
		}
		refused++
	}
	// Stateless with the newest screen only, superseded results stubbed: answered.
	if code, _, _ := post(map[string]any{"model": "sim/timer", "store": false,
		"input": []any{user, call("a"), map[string]any{"type": "function_call_output", "call_id": "a", "output": "(superseded peek) peeked"},
			call("b"), output("b"), screen(2)}}); code != http.StatusOK {
		t.Errorf("a stateless request with the newest screen only: %d, want 200", code)
	}
	// A chain: the stored conversation keeps its screen when the next one comes.
	code, first, _ := post(map[string]any{"model": "sim/timer", "input": []any{user, call("a"), output("a"), screen(1)}})
	if code != http.StatusOK {
		t.Fatalf("the chain's first request: %d", code)
	}
	code, _, h := post(map[string]any{"model": "sim/timer", "previous_response_id": first.ID,
		"input": []any{output(first.Output[0].CallID), output(first.Output[1].CallID), screen(2)}})
	if code != http.StatusOK || h.Get(modelsim.StaleScreensHeader) != "1" {
		t.Errorf("a chained request over a stored screen: %d, %s %q; want 200 and 1 stale screen", code, modelsim.StaleScreensHeader, h.Get(modelsim.StaleScreensHeader))
	}
	r := sim.ResponsesReport()
	if len(r.Violations) != refused || r.Requests != refused+3 || r.Continued != 1 || r.StaleScreens != 1 || r.MaxStaleScreens != 1 || r.Stateless != 5 {
		t.Errorf("report %+v, want %d violations, %d requests, 1 continued with 1 stale screen, 5 stateless", r, refused, refused+3)
	}
}
