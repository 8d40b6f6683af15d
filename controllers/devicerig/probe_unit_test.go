package devicerig

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// What the API refuses is refused again where the manager fetches: a rig
// stored before the rules, or a name that resolves where the literal could
// not be written.
func TestSameHostRefusesWhatTheAPIRefuses(t *testing.T) {
	for _, c := range []struct{ health, endpoint, want string }{
		{"http://x:2@127.0.0.3/api/status", "http://x:1@127.0.0.1:8048/mcp", "user information"},
		{"http://127.0.0.1/api/status", "http://u@127.0.0.1:8048/mcp", "user information"},
		{"http://127.0.0.3/api/status", "http://127.0.0.1:8048/mcp", "not an http(s) URL on the endpoint's host"},
		{"http://169.254.169.254/latest/meta-data/", "http://169.254.169.254/mcp", "link-local"},
		{"http://[fe80::1%25eth0]:80/api/status", "http://[fe80::1%25eth0]:8048/mcp", "link-local"},
		{"http://metadata.google.internal./api/status", "http://metadata.google.internal./mcp", "instance metadata"},
		{"http://[fd00:ec2::254]/api/status", "http://[fd00:ec2::254]/mcp", "instance metadata"},
		{"http://0.0.0.0:8048/api/status", "http://0.0.0.0:8048/mcp", "unspecified"},
	} {
		if err := sameHost(c.health, c.endpoint); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sameHost(%q, %q) = %v, want an error saying %q", c.health, c.endpoint, err, c.want)
		}
	}
	if err := sameHost("http://10.0.0.5:9000/api/status", "http://10.0.0.5:8048/mcp"); err != nil {
		t.Errorf("the rig's own host on another port: %v", err)
	}
}

// The probe's dialer checks the address a name resolved to: "localhost"
// passes; a name that would land on a link-local address does not.
func TestProbeDialerRefusesLinkLocal(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:80", true}, {"10.0.0.5:8048", true}, {"[::1]:80", true},
		{"169.254.169.254:80", false}, {"[fe80::1]:80", false}, {"100.100.100.200:80", false}, {"[::ffff:169.254.1.1]:80", false},
	} {
		err := refuseForbidden("tcp", c.addr, nil)
		if (err == nil) != c.ok {
			t.Errorf("dial %s: %v, want allowed %v", c.addr, err, c.ok)
		}
	}
	// Wired into the client SetupWithManager makes: a connection to a
	// link-local address fails before any packet leaves.
	client := (&Reconciler{Config: Config{ProbeTimeout: time.Second}}).probeClient()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://169.254.169.254/latest/meta-data/", nil)
	_, err := client.Do(req)
	if err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Fatalf("GET a link-local address through the probe client: %v, want refused", err)
	}
}
