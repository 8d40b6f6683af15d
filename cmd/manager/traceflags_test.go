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
