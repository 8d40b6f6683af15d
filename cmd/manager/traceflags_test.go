package main

import (
	"strings"
	"testing"
)

func TestTraceFlags(t *testing.T) {
	f, out, err := parseFlags(t, "--trace-url=http://clawfarm-server.clawfarm-system.svc:8080", "--rig-trace-keep=5")
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	loop, _ := f.podDefaults()
	if loop.TraceURL != "http://clawfarm-server.clawfarm-system.svc:8080" || loop.TraceAudience != "clawfarm-trace" || loop.TraceKeep != 5 {
		t.Errorf("defaults %+v", loop)
	}
	for _, bad := range [][]string{{"--trace-url=clawfarm-server:8080"}, {"--trace-url=ftp://x/"}, {"--rig-trace-keep=0"}} {
		if _, out, err := parseFlags(t, bad...); err == nil || !strings.Contains(out, strings.SplitN(strings.TrimPrefix(bad[0], "--"), "=", 2)[0]) {
			t.Errorf("%v: err %v, output %q; want an error naming the flag", bad, err, out)
		}
	}
}

func TestLoopAPIServerFlag(t *testing.T) {
	f, out, err := parseFlags(t, "--loop-api-server=127.0.0.1:17402")
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	if loop, _ := f.podDefaults(); loop.APIServer != "127.0.0.1:17402" {
		t.Errorf("APIServer %q", loop.APIServer)
	}
	for _, bad := range []string{"127.0.0.1", "https://127.0.0.1:6443", ":6443", "h:0", "h:x"} {
		if _, out, err := parseFlags(t, "--loop-api-server="+bad); err == nil || !strings.Contains(out, "-loop-api-server") || !strings.Contains(out, "want host:port") {
			t.Errorf("%q: err %v, output %q; want an error naming the flag", bad, err, out)
		}
	}
}
