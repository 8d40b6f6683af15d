package modelsim

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
)

// Accounts are the model accounts modelsim has served, by AccountID: the
// provider's view of a farm's key, for tests that check a cap on sessions
// per key from the model's side (GET /api/sim/accounts).
type Account struct {
	// Requests counts the model requests made with the key.
	Requests int `json:"requests"`
	// InFlight is how many are being answered now; MaxInFlight the most at once.
	InFlight    int `json:"inFlight"`
	MaxInFlight int `json:"maxInFlight"`
}

// AccountID names a key without showing it: the first 12 hex digits of its
// SHA-256. A request with no key is the account "none".
func AccountID(key string) string {
	if key == "" {
		return "none"
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// requestKey is the key a request carries: OpenAI's bearer token or
// Anthropic's x-api-key.
func requestKey(r *http.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	k, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(k)
}

type accounts struct {
	mu sync.Mutex
	m  map[string]*Account
}

// count wraps a model endpoint: each request is in flight on its account
// while it is answered (a streamed answer until its last byte).
func (a *accounts) count(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := AccountID(requestKey(r))
		a.mu.Lock()
		if a.m == nil {
			a.m = map[string]*Account{}
		}
		acct := a.m[id]
		if acct == nil {
			acct = &Account{}
			a.m[id] = acct
		}
		acct.Requests++
		acct.InFlight++
		acct.MaxInFlight = max(acct.MaxInFlight, acct.InFlight)
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			acct.InFlight--
			a.mu.Unlock()
		}()
		h(w, r)
	}
}

func (a *accounts) snapshot() map[string]Account {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Account, len(a.m))
	for id, acct := range a.m {
		out[id] = *acct
	}
	return out
}
