package rig_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/clawfarm/clawfarm/internal/rig"
	"github.com/clawfarm/clawfarm/internal/testing/rigtest"
)

// The rig token goes out as a bearer token on every request, read again
// each time (the kubelet renews the file); a missing file sends none.
func TestRigTokenIsSentAndReadAgain(t *testing.T) {
	r := rigtest.New()
	defer r.Close()
	target, _ := url.Parse(r.URL)
	var mu sync.Mutex
	var auth []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		auth = append(auth, req.Header.Get("Authorization"))
		mu.Unlock()
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, req)
	}))
	defer proxy.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := rig.Dial(context.Background(), rig.Config{Endpoint: proxy.URL + "/mcp", TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(context.Background(), "peek", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("renewed-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(auth)
	mu.Unlock()
	if _, err := c.Call(context.Background(), "peek", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, a := range auth {
		want := "Bearer first-token"
		if i >= before {
			want = "Bearer renewed-token"
		}
		if a != want {
			t.Errorf("request %d: Authorization %q, want %q", i, a, want)
		}
	}
	if len(auth) <= before {
		t.Fatal("no request after the token was renewed")
	}
	os.Remove(file)
	auth = nil
	mu.Unlock()
	_, err = c.Call(context.Background(), "peek", []byte(`{}`))
	mu.Lock()
	if err != nil || len(auth) == 0 || auth[len(auth)-1] != "" {
		t.Errorf("with the file gone: %v, Authorization %q, want none", err, auth)
	}
}
