package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/engine/events"
	"github.com/clawfarm/clawfarm/internal/sim/rigsim"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
	"github.com/clawfarm/clawfarm/internal/testing/testenv"
)

// The real loop, against rigsim and a scripted model, exports its session
// to a real Jaeger v2 (hack/build-jaeger.sh) over OTLP/HTTP; Jaeger's query
// API gives back the trace the session_start event names: the invoke_agent
// root, a chat span per turn with its usage, an execute_tool span per call
// and the rig's tools/call under its tool, on the loop's resource.
func TestLoopExportsSpansToJaeger(t *testing.T) {
	j := startJaeger(t)
	model := pt.OpenAI(uniq(step(note, peek), closing("DONE")))
	defer model.Close()
	r := rigsim.New("rig-0", rigsim.Config{})
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()

	env := loopEnv(t, model.URL, srv.URL+"/mcp", "HOSTNAME=run-1-a1",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+j.otlp, "OTEL_RESOURCE_ATTRIBUTES=clawfarm.rig.name=rig-0,k8s.node.name=node-a")
	vars := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, func(k string) string { return vars[k] }, &out, &errb); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb.String())
	}
	var id string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var ev events.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == events.TypeSessionStart {
			id = ev.OTelTraceID
		}
	}
	if len(id) != 32 {
		t.Fatalf("session_start names trace %q; stderr:\n%s", id, errb.String())
	}

	tr := j.trace(t, id)
	byName := map[string][]jaegerSpan{}
	byID := map[string]jaegerSpan{}
	for _, s := range tr.Spans {
		byName[s.OperationName] = append(byName[s.OperationName], s)
		byID[s.SpanID] = s
	}
	one := func(name string) jaegerSpan {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d %q spans in Jaeger, want 1; spans: %v", len(byName[name]), name, keys(byName))
		}
		return byName[name][0]
	}
	root := one("invoke_agent clawfarm")
	if p := root.parent(); p != "" {
		t.Errorf("the invoke_agent span has a parent %s", p)
	}
	root.want(t, map[string]any{"gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "test-model",
		"clawfarm.sentinel": "DONE", "gen_ai.usage.input_tokens": float64(200), "gen_ai.usage.output_tokens": float64(20)})

	chats := byName["chat test-model"]
	if len(chats) != 2 {
		t.Fatalf("%d chat spans, want one per turn (2): %v", len(chats), keys(byName))
	}
	for _, c := range chats {
		if c.parent() != root.SpanID {
			t.Errorf("chat span %s: parent %s, want the invoke_agent span", c.SpanID, c.parent())
		}
		c.want(t, map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai-compatible",
			"gen_ai.response.model": "m", "gen_ai.usage.input_tokens": float64(100), "gen_ai.usage.output_tokens": float64(10),
			"span.kind": "client"})
	}
	peekTool := one("execute_tool peek")
	if peekTool.parent() != root.SpanID {
		t.Errorf("execute_tool peek: parent %s, want the invoke_agent span", peekTool.parent())
	}
	peekTool.want(t, map[string]any{"gen_ai.tool.name": "peek", "gen_ai.tool.call.id": "r0_c1_peek", "gen_ai.tool.type": "extension"})
	one("execute_tool end_session").want(t, map[string]any{"gen_ai.tool.type": "function"})
	mcp := one("tools/call peek")
	if mcp.parent() != peekTool.SpanID {
		t.Errorf("tools/call peek: parent %s (%s), want execute_tool peek", mcp.parent(), byID[mcp.parent()].OperationName)
	}
	mcp.want(t, map[string]any{"mcp.method.name": "tools/call", "server.address": "127.0.0.1", "span.kind": "client"})
	if n := len(byName["execute_tool note"]); n != 2 {
		t.Errorf("%d execute_tool note spans, want 2", n)
	}

	p := tr.Processes[root.ProcessID]
	if p.ServiceName != "clawfarm-loop" {
		t.Errorf("service %q", p.ServiceName)
	}
	tags := p.tagMap()
	for k, v := range map[string]any{"k8s.namespace.name": "ns", "clawfarm.run.name": "run-1", "clawfarm.attempt": "1",
		"k8s.pod.name": "run-1-a1", "clawfarm.rig.name": "rig-0", "k8s.node.name": "node-a"} {
		if tags[k] != v {
			t.Errorf("resource %s = %v, want %v (all: %v)", k, tags[k], v, tags)
		}
	}
}

// jaeger is a Jaeger v2 on loopback ports with in-memory storage.
type jaeger struct {
	otlp, query string
}

// startJaeger runs the binary hack/build-jaeger.sh built ($CLAWFARM_JAEGER,
// else the script's --print path) with a configuration of our own: the
// OTLP/HTTP receiver, memory storage and the query API, each on a free
// port of 127.0.0.1, and none of its own telemetry (no metrics server, no
// traces of the query service sent anywhere).
func startJaeger(t *testing.T) jaeger {
	t.Helper()
	bin := testenv.BuiltTool(t, "CLAWFARM_JAEGER", "build-jaeger.sh", "Jaeger")
	otlp, query, grpc := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {level: none}
    logs: {level: warn}
extensions:
  jaeger_storage:
    backends:
      mem: {memory: {max_traces: 1000}}
  jaeger_query:
    enable_tracing: false
    storage: {traces: mem}
    http: {endpoint: %q}
    grpc: {endpoint: %q}
receivers:
  otlp:
    protocols:
      http: {endpoint: %q}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`, query, grpc, otlp)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config=file:"+path)
	// Its own SDK, should anything in it start one, exports nothing.
	cmd.Env = append(os.Environ(), "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jaeger:\n%s", logs.String())
		}
	})
	j := jaeger{otlp: "http://" + otlp, query: "http://" + query}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(j.query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger's query API did not answer in 30s: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return j
}

// Jaeger's query API (/api/traces/{id}), as much of it as the test reads.
type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags      []jaegerTag `json:"tags"`
	ProcessID string      `json:"processID"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

type jaegerProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []jaegerTag `json:"tags"`
}

func (p jaegerProcess) tagMap() map[string]any {
	m := map[string]any{}
	for _, tg := range p.Tags {
		m[tg.Key] = tg.Value
	}
	return m
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jaegerSpan) want(t *testing.T, want map[string]any) {
	t.Helper()
	got := map[string]any{}
	for _, tg := range s.Tags {
		got[tg.Key] = tg.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v (%T), want %v (%T)", s.OperationName, k, got[k], got[k], v, v)
		}
	}
}

// trace reads the trace from the query API, waiting for the spans to be
// stored (the loop flushed them before it exited; storing is Jaeger's).
func (j jaeger) trace(t *testing.T, id string) jaegerTrace {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var body struct {
			Data []jaegerTrace `json:"data"`
		}
		resp, err := http.Get(j.query + "/api/traces/" + id)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
		}
		if err == nil && len(body.Data) == 1 && len(body.Data[0].Spans) > 0 {
			return body.Data[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger has no trace %s after 15s (%v, %+v)", id, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func keys(m map[string][]jaegerSpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
