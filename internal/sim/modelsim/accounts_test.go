package modelsim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

// GET /api/sim/accounts counts each key's requests and the most answered
// at once, naming keys by AccountID, never by the key.
func TestAccountsCountRequestsPerKey(t *testing.T) {
	srv := httptest.NewServer(modelsim.NewServer(builtin(t)).Handler())
	defer srv.Close()
	client := func(key string) *openai.Client {
		cfg := openai.DefaultConfig(key)
		cfg.BaseURL = srv.URL + "/v1"
		return openai.NewClientWithConfig(cfg)
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := client("sk-farm").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: opening("set a timer")}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := client("sk-team").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "sim/timer", Messages: opening("set a timer")}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/api/sim/accounts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]modelsim.Account
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	farm, team := got[modelsim.AccountID("sk-farm")], got[modelsim.AccountID("sk-team")]
	if farm.Requests != 3 || farm.InFlight != 0 || farm.MaxInFlight < 1 || farm.MaxInFlight > 3 || team.Requests != 1 || team.MaxInFlight != 1 || len(got) != 2 {
		t.Fatalf("accounts %+v: want sk-farm 3 requests, none in flight, 1-3 at once; sk-team 1", got)
	}
	if _, ok := got["sk-farm"]; ok || modelsim.AccountID("sk-farm") == "sk-farm" {
		t.Fatal("the report shows a key")
	}
}
