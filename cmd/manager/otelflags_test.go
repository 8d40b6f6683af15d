package main

import (
	"strings"
	"testing"
)

func TestOTelFlags(t *testing.T) {
	f, out, err := parseFlags(t, "--loop-otel-endpoint=http://otel-collector.observability.svc:4318",
		"--loop-otel-headers-secret=otlp-auth", "--loop-otel-resource-attributes=deployment.environment.name=lab")
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out)
	}
	loop, _ := f.podDefaults()
	if o := loop.OTel; o.Endpoint != "http://otel-collector.observability.svc:4318" || o.HeadersSecret != "otlp-auth" ||
		o.ResourceAttributes != "deployment.environment.name=lab" {
		t.Errorf("defaults %+v", o)
	}
	for _, bad := range []string{"--loop-otel-endpoint=collector:4318", "--loop-otel-endpoint=grpc://c:4317",
		"--loop-otel-headers-secret=Not_A_Name", "--loop-otel-resource-attributes=novalue"} {
		flag := strings.SplitN(strings.TrimPrefix(bad, "-"), "=", 2)[0]
		if _, out, err := parseFlags(t, bad); err == nil || !strings.Contains(out, flag) {
			t.Errorf("%s: err %v, output %q; want an error naming %s", bad, err, out, flag)
		}
	}
}
