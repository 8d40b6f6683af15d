// Package telemetry exports the loop's OpenTelemetry spans (docs/otel.md)
// over OTLP/HTTP to the endpoint the standard OTEL_* environment names.
// Nothing is set up, and nothing costs, when it names none: the engine and
// the rig client then record into a no-op tracer.
//
// It reads the environment through the getenv it is given (the loop's
// settings seam), not the process's, so a test can point one loop at a
// collector without touching the others.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// The environment the loop reads, after the OpenTelemetry SDK's
// specification; the chart's otel values set them in loop pods.
const (
	EnvEndpoint           = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint     = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvHeaders            = "OTEL_EXPORTER_OTLP_HEADERS"
	EnvTracesHeaders      = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	EnvProtocol           = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol     = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvServiceName        = "OTEL_SERVICE_NAME"
	EnvResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
	EnvSDKDisabled        = "OTEL_SDK_DISABLED"
	EnvTracesExporter     = "OTEL_TRACES_EXPORTER"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME names none.
const DefaultServiceName = "clawfarm-loop"

// ShutdownTimeout bounds the flush at the end of an attempt, so a
// collector that does not answer never holds a run; ExportTimeout bounds
// one export.
const (
	ShutdownTimeout = 5 * time.Second
	ExportTimeout   = 5 * time.Second
)

// Identity is who is exporting: the resource every span carries.
type Identity struct {
	Run     string // namespace/name
	Attempt int
	Pod     string
}

// Exporter is the loop's tracer provider and its OTLP exporter.
type Exporter struct {
	tp       *sdktrace.TracerProvider
	endpoint string
}

// FromEnv builds the exporter the environment asks for: nil, and no
// error, when it names no endpoint or turns tracing off. An error means
// the environment asks for something this exporter cannot do; the caller
// logs it and goes on without spans.
func FromEnv(getenv func(string) string, id Identity) (*Exporter, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return nil, nil
	}
	if e := strings.TrimSpace(getenv(EnvTracesExporter)); e != "" && e != "otlp" {
		return nil, nil // "none", or an exporter the loop does not have
	}
	endpoint, err := tracesEndpoint(getenv)
	if endpoint == "" || err != nil {
		return nil, err
	}
	proto := first(getenv(EnvTracesProtocol), getenv(EnvProtocol))
	if proto != "" && proto != "http/protobuf" {
		return nil, fmt.Errorf("%s=%s: the loop exports over http/protobuf only", EnvProtocol, proto)
	}
	headers, err := parseHeaders(getenv(EnvHeaders))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvHeaders, err)
	}
	th, err := parseHeaders(getenv(EnvTracesHeaders))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvTracesHeaders, err)
	}
	for k, v := range th {
		headers[k] = v
	}
	res, err := buildResource(getenv, id)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithHeaders(headers),
		otlptracehttp.WithTimeout(ExportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond,
			MaxInterval: 2 * time.Second, MaxElapsedTime: ShutdownTimeout}))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(2*time.Second)))
	return &Exporter{tp: tp, endpoint: endpoint}, nil
}

// Tracer is the loop's tracer.
func (e *Exporter) Tracer() trace.Tracer {
	return e.tp.Tracer("github.com/clawfarm/clawfarm/internal/engine")
}

// Endpoint is the URL spans are sent to.
func (e *Exporter) Endpoint() string { return e.endpoint }

// Shutdown sends what is left and stops, in at most ShutdownTimeout.
func (e *Exporter) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	return e.tp.Shutdown(ctx)
}

// tracesEndpoint is the URL to post spans to: the traces endpoint as it
// is, else the base endpoint with /v1/traces (the specification's rule).
func tracesEndpoint(getenv func(string) string) (string, error) {
	raw, name := strings.TrimSpace(getenv(EnvTracesEndpoint)), EnvTracesEndpoint
	base := false
	if raw == "" {
		raw, name, base = strings.TrimSpace(getenv(EnvEndpoint)), EnvEndpoint, true
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s=%q: want an http(s) URL", name, raw)
	}
	if base {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// parseHeaders reads the specification's key=value,key=value list, the
// values URL-encoded.
func parseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for p := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, errors.New("want key=value pairs separated by commas")
		}
		dv, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}

// buildResource is what every span says of where it comes from:
// OTEL_RESOURCE_ATTRIBUTES (the manager adds the rig and the node there),
// then the loop's own identity, which wins, then OTEL_SERVICE_NAME.
func buildResource(getenv func(string) string, id Identity) (*resource.Resource, error) {
	attrs := map[string]string{}
	env, err := parseHeaders(getenv(EnvResourceAttributes))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvResourceAttributes, err)
	}
	for k, v := range env {
		attrs[k] = v
	}
	if ns, name, err := contract.ParseRunRef(id.Run); err == nil {
		attrs["k8s.namespace.name"], attrs["clawfarm.run.name"] = ns, name
	}
	if id.Attempt > 0 {
		attrs["clawfarm.attempt"] = strconv.Itoa(id.Attempt)
	}
	if id.Pod != "" {
		attrs["k8s.pod.name"] = id.Pod
	}
	if attrs["service.name"] == "" {
		attrs["service.name"] = DefaultServiceName
	}
	if n := strings.TrimSpace(getenv(EnvServiceName)); n != "" {
		attrs["service.name"] = n
	}
	kvs := make([]attribute.KeyValue, 0, len(attrs))
	for k, v := range attrs {
		kvs = append(kvs, attribute.String(k, v))
	}
	return resource.NewSchemaless(kvs...), nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// ErrorLog is an error handler for the SDK (otel.SetErrorHandler) that
// writes through logf: the first error at once, then at most one line a
// minute with how many came meanwhile, so a collector that is down does
// not flood the pod's log.
func ErrorLog(logf func(string, ...any), now func() time.Time) func(error) {
	var (
		mu      sync.Mutex
		last    time.Time
		dropped int
	)
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		t := now()
		if !last.IsZero() && t.Sub(last) < time.Minute {
			dropped++
			return
		}
		if dropped > 0 {
			logf("OpenTelemetry: %v (and %d more errors in the last minute)", err, dropped)
		} else {
			logf("OpenTelemetry: %v", err)
		}
		last, dropped = t, 0
	}
}
