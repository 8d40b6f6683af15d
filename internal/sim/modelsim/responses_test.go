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
