package main

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/clawfarm/clawfarm/internal/trace"
)

// The chart's trace server: its args are the server's flags, its Service
// selects its pod, and the manager sends loop pods to that Service with the
// audience the server checks.
func TestChartTraceServer(t *testing.T) {
	t.Parallel()
	objs := renderChart(t)
	dep := find(objs, "Deployment", "farm", "t-clawfarm-server")
	if dep == nil {
		t.Fatal("the chart renders no trace server Deployment")
	}
	c := dig(dep, "spec", "template", "spec", "containers").([]any)[0]
	var args []string
	for _, a := range dig(c, "args").([]any) {
		args = append(args, a.(string))
	}
	fs := flag.NewFlagSet("clawfarm-server", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	sf := trace.NewFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the chart passes args the server refuses: %v\n%s", err, out.String())
	}
	if err := sf.Check(); err != nil {
		t.Fatal(err)
	}
	if dig(c, "image") != "ghcr.io/clawfarm/clawfarm-server:0.1.0" || sf.Retention.String() != "720h0m0s" {
		t.Errorf("image %v, retention %s", dig(c, "image"), sf.Retention)
	}
	if find(objs, "PersistentVolumeClaim", "farm", "t-clawfarm-server") == nil {
		t.Error("no PersistentVolumeClaim for the traces")
	}
	svc := find(objs, "Service", "farm", "t-clawfarm-server")
	podLabels := dig(dep, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range dig(svc, "spec", "selector").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("the server Service selects %s=%v, which the server pod lacks", k, v)
		}
	}
	mgr := chartManagerFlags(t, find(objs, "Deployment", "farm", "t-clawfarm-manager"))
	if *mgr.traceURL != "http://t-clawfarm-server.farm.svc:8080" || *mgr.traceAudience != sf.Audience {
		t.Errorf("the manager sends loops to %q with audience %q; the server is http://t-clawfarm-server.farm.svc:8080 and checks %q",
			*mgr.traceURL, *mgr.traceAudience, sf.Audience)
	}
	// The manager's pods never select the server's, nor the reverse.
	if find(objs, "Service", "farm", "t-clawfarm-metrics") != nil {
		sel := dig(find(objs, "Service", "farm", "t-clawfarm-metrics"), "spec", "selector").(map[string]any)
		if sel["app.kubernetes.io/component"] == podLabels["app.kubernetes.io/component"] {
			t.Error("the metrics Service selects the trace server's pod")
		}
	}

	// TLS: HTTPS URL, the Secret mounted, the server given its files.
	objs = renderChart(t, "--set", "server.tls.secretName=trace-tls", "--set", "server.persistence.enabled=false")
	mgr = chartManagerFlags(t, find(objs, "Deployment", "farm", "t-clawfarm-manager"))
	if !strings.HasPrefix(*mgr.traceURL, "https://") {
		t.Errorf("with TLS the manager's --trace-url is %q", *mgr.traceURL)
	}
	if find(objs, "PersistentVolumeClaim", "farm", "t-clawfarm-server") != nil {
		t.Error("persistence off still makes a claim")
	}
	// Off: no server, and loop pods are not told of one.
	objs = renderChart(t, "--set", "server.enabled=false")
	if find(objs, "Deployment", "farm", "t-clawfarm-server") != nil {
		t.Error("server.enabled=false still renders the server")
	}
	if mgr = chartManagerFlags(t, find(objs, "Deployment", "farm", "t-clawfarm-manager")); *mgr.traceURL != "" {
		t.Errorf("server off, the manager's --trace-url is %q", *mgr.traceURL)
	}
	// An S3 bucket: the server's flags name it, its credentials come from
	// the Secret, and no volume is claimed.
	objs = renderChart(t, "--set", "server.s3.bucket=traces", "--set", "server.s3.endpoint=minio.storage:9000",
		"--set", "server.s3.insecure=true", "--set", "server.s3.credentialsSecret=trace-s3")
	dep = find(objs, "Deployment", "farm", "t-clawfarm-server")
	c = dig(dep, "spec", "template", "spec", "containers").([]any)[0]
	args = nil
	for _, a := range dig(c, "args").([]any) {
		args = append(args, a.(string))
	}
	fs = flag.NewFlagSet("clawfarm-server", flag.ContinueOnError)
	sf = trace.NewFlags(fs)
	if err := fs.Parse(args); err != nil || sf.Check() != nil {
		t.Fatalf("S3 args %q: %v %v", args, err, sf.Check())
	}
	if sf.S3.Bucket != "traces" || sf.S3.Endpoint != "minio.storage:9000" || !sf.S3.Insecure {
		t.Errorf("S3 flags %+v", sf.S3)
	}
	if ref := dig(c, "envFrom"); ref == nil || !strings.Contains(fmt.Sprint(ref), "trace-s3") {
		t.Errorf("the credentials Secret is not in the server's environment: %v", ref)
	}
	if find(objs, "PersistentVolumeClaim", "farm", "t-clawfarm-server") != nil || dig(c, "volumeMounts") != nil {
		t.Error("with S3 the chart still claims or mounts a volume for traces")
	}
	if _, stderr, err := renderChartErr(t, "--set", "server.s3.bucket=traces"); err == nil || !strings.Contains(stderr, "server.s3.endpoint") {
		t.Errorf("a bucket without an endpoint is accepted: %v %s", err, stderr)
	}
	if _, stderr, err := renderChartErr(t, "--set", "server.retention=forever"); err == nil || !strings.Contains(stderr, "retention") {
		t.Errorf("a bad retention is accepted: %v %s", err, stderr)
	}
}
