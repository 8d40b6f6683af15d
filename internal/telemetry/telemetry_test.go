package telemetry

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// No endpoint, the SDK turned off, or another exporter: no export at all.
func TestNothingWithoutAnEndpoint(t *testing.T) {
	for _, e := range []map[string]string{
		{},
		{EnvEndpoint: "http://127.0.0.1:4318", EnvSDKDisabled: "true"},
		{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesExporter: "none"},
	} {
		exp, err := FromEnv(env(e), Identity{})
		if exp != nil || err != nil {
			t.Errorf("%v: exporter %v, error %v; want neither", e, exp, err)
		}
	}
}

func TestEndpoints(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		{map[string]string{EnvEndpoint: "http://collector:4318"}, "http://collector:4318/v1/traces", false},
		{map[string]string{EnvEndpoint: "https://otlp.example/api/public/otel/"}, "https://otlp.example/api/public/otel/v1/traces", false},
		{map[string]string{EnvEndpoint: "http://a:4318", EnvTracesEndpoint: "http://b:4318/custom"}, "http://b:4318/custom", false},
		{map[string]string{EnvEndpoint: "collector:4318"}, "", true},
		{map[string]string{EnvEndpoint: "http://collector:4318", EnvProtocol: "grpc"}, "", true},
		{map[string]string{EnvEndpoint: "http://collector:4318", EnvHeaders: "novalue"}, "", true},
	} {
		exp, err := FromEnv(env(c.env), Identity{})
		if (err != nil) != c.wantErr {
			t.Errorf("%v: error %v, want one: %v", c.env, err, c.wantErr)
			continue
		}
		if err == nil && exp.Endpoint() != c.want {
			t.Errorf("%v: endpoint %s, want %s", c.env, exp.Endpoint(), c.want)
		}
		if exp != nil {
			_ = exp.Shutdown()
		}
	}
}

// Spans reach the collector at /v1/traces with the headers asked for and
// the resource: the environment's attributes, the loop's identity over
// them, OTEL_SERVICE_NAME over both.
func TestExportCarriesHeadersAndResource(t *testing.T) {
	var (
		mu   sync.Mutex
		got  []*collectortrace.ExportTraceServiceRequest
		auth []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got, auth = append(got, &req), append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	defer srv.Close()
	exp, err := FromEnv(env(map[string]string{
		EnvEndpoint: srv.URL, EnvHeaders: "Authorization=Basic%20cGs6c2s=",
		EnvResourceAttributes: "clawfarm.rig.name=rig-0,k8s.namespace.name=wrong,deployment.environment.name=lab",
	}), Identity{Run: "farm/timer", Attempt: 2, Pod: "timer-a2"})
	if err != nil || exp == nil {
		t.Fatalf("exporter %v, error %v", exp, err)
	}
	_, span := exp.Tracer().Start(context.Background(), "invoke_agent clawfarm")
	span.End()
	if err := exp.Shutdown(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := got
	mu.Unlock()
	if len(first) != 1 || len(got[0].ResourceSpans) != 1 {
		t.Fatalf("collector got %d requests: %v", len(first), first)
	}
	if auth[0] != "Basic cGs6c2s=" {
		t.Errorf("Authorization %q", auth[0])
	}
	res := map[string]string{}
	for _, kv := range got[0].ResourceSpans[0].Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	for k, v := range map[string]string{"service.name": DefaultServiceName, "k8s.namespace.name": "farm", "clawfarm.run.name": "timer",
		"clawfarm.attempt": "2", "k8s.pod.name": "timer-a2", "clawfarm.rig.name": "rig-0", "deployment.environment.name": "lab"} {
		if res[k] != v {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, res[k], v, res)
		}
	}
	spans := got[0].ResourceSpans[0].ScopeSpans[0].Spans
	if len(spans) != 1 || spans[0].Name != "invoke_agent clawfarm" {
		t.Errorf("spans %v", spans)
	}

	named, err := FromEnv(env(map[string]string{EnvEndpoint: srv.URL, EnvServiceName: "farm-a-loop",
		EnvResourceAttributes: "service.name=other"}), Identity{})
	if err != nil {
		t.Fatal(err)
	}
	_, span = named.Tracer().Start(context.Background(), "x")
	span.End()
	if err := named.Shutdown(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("collector got %d requests, want 2", len(got))
	}
	for _, kv := range got[len(got)-1].ResourceSpans[0].Resource.Attributes {
		if kv.Key == "service.name" && kv.Value.GetStringValue() != "farm-a-loop" {
			t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", kv.Value.GetStringValue())
		}
	}
}

// A collector that is not there costs the attempt at most ShutdownTimeout
// at its end.
func TestDeadCollectorIsBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	exp, err := FromEnv(env(map[string]string{EnvEndpoint: "http://" + addr}), Identity{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := exp.Tracer().Start(context.Background(), "x")
	span.End()
	start := time.Now()
	_ = exp.Shutdown() // the spans are lost: what matters is that it returns
	if took := time.Since(start); took > ShutdownTimeout+2*time.Second {
		t.Errorf("shutdown took %s", took)
	}
}

func TestErrorLogIsRateLimited(t *testing.T) {
	var lines []string
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := ErrorLog(func(f string, a ...any) { lines = append(lines, f) }, func() time.Time { return now })
	for range 5 {
		h(io.ErrUnexpectedEOF)
		now = now.Add(10 * time.Second)
	}
	now = now.Add(time.Minute)
	h(io.ErrUnexpectedEOF)
	if len(lines) != 2 {
		t.Errorf("%d lines for 6 errors over two minutes, want 2: %v", len(lines), lines)
	}
}
