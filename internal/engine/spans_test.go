package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rig"
	pt "github.com/clawfarm/clawfarm/internal/testing/providertest"
)

// A scripted session recorded as GenAI spans: one invoke_agent root, a chat
// span per model call (the rate-limited one too), an execute_tool span per
// tool call, and the rig's MCP call under each rig tool's span.
func TestSessionSpans(t *testing.T) {
	limited := pt.Step{Status: 429, ErrType: "rate_limit_exceeded", ErrMessage: "Rate limit reached", RetryAfter: "1"}
	h := newHarness(t, turn("peek", `{}`), limited, turn("tap", `{"bbox":[0.1,0.2,0.3,0.4]}`), end("DONE"))
	h.rig.Fail.Store("tap", true)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h.cfg.Tracer = tp.Tracer("test")
	rc, err := rig.Dial(context.Background(), rig.Config{Endpoint: h.rig.Endpoint(), BusyDelay: time.Millisecond,
		CallTimeout: 5 * time.Second, Tracer: tp.Tracer("test")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	h.cfg.Rig = rc

	m := h.run(context.Background())
	want(t, m, contract.Done, contract.ReasonEndTurn, 0)
	spans := exp.GetSpans()

	roots := named(spans, "invoke_agent clawfarm")
	if len(roots) != 1 {
		t.Fatalf("%d invoke_agent spans, want 1; spans: %v", len(roots), spanNames(spans))
	}
	root := roots[0]
	if root.Parent.IsValid() {
		t.Errorf("the invoke_agent span has a parent %v", root.Parent)
	}
	wantAttrs(t, root, map[string]any{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "clawfarm", "gen_ai.provider.name": "openai-compatible",
		"gen_ai.request.model": "test-model", "gen_ai.conversation.id": "ns/run", "clawfarm.run": "ns/run", "clawfarm.attempt": int64(1),
		"clawfarm.sentinel": "DONE", "clawfarm.exit_reason": "end_turn", "clawfarm.turns": int64(3),
		"gen_ai.usage.input_tokens": int64(3000), "gen_ai.usage.output_tokens": int64(150), "gen_ai.usage.cache_read.input_tokens": int64(1000),
	})
	if root.Status.Code == codes.Error {
		t.Errorf("a DONE session's span is an error: %v", root.Status)
	}
	for _, s := range spans {
		if s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("span %s is in trace %s, not the session's", s.Name, s.SpanContext.TraceID())
		}
	}
	if id := h.events("session_start")[0].OTelTraceID; id != root.SpanContext.TraceID().String() {
		t.Errorf("session_start names trace %q, the spans are in %s", id, root.SpanContext.TraceID())
	}

	chats := named(spans, "chat test-model")
	if len(chats) != 4 {
		t.Fatalf("%d chat spans, want 4 (3 replies and the rate-limited call): %v", len(chats), spanNames(spans))
	}
	var failed int
	for _, c := range chats {
		if c.Parent.SpanID() != root.SpanContext.SpanID() || c.SpanKind != trace.SpanKindClient {
			t.Errorf("chat span %v: parent %v kind %v, want the invoke_agent span and client", c.Attributes, c.Parent.SpanID(), c.SpanKind)
		}
		if c.Status.Code == codes.Error {
			failed++
			wantAttrs(t, c, map[string]any{"error.type": "rate_limit", "clawfarm.turn": int64(2)})
			continue
		}
		wantAttrs(t, c, map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai-compatible",
			"gen_ai.request.model": "test-model", "gen_ai.response.model": "m", "gen_ai.response.id": "x",
			"gen_ai.usage.input_tokens": int64(1000), "gen_ai.usage.output_tokens": int64(50),
			"gen_ai.response.finish_reasons": []string{"tool_calls"}})
	}
	if failed != 1 {
		t.Errorf("%d chat spans are errors, want the one rate-limited call", failed)
	}
	wantAttrs(t, chats[0], map[string]any{"gen_ai.usage.cache_read.input_tokens": int64(500), "clawfarm.turn": int64(1)})

	tools := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if kv, ok := attr(s, "gen_ai.operation.name"); ok && kv.AsString() == "execute_tool" && s.SpanKind == trace.SpanKindInternal {
			id, _ := attr(s, "gen_ai.tool.call.id")
			tools[id.AsString()] = s
			if s.Parent.SpanID() != root.SpanContext.SpanID() {
				t.Errorf("%s's parent is %v, not the invoke_agent span", s.Name, s.Parent.SpanID())
			}
		}
	}
	if len(tools) != 6 {
		t.Fatalf("%d execute_tool spans, want 6 (three notes, peek, tap, end_session): %v", len(tools), spanNames(spans))
	}
	peek, tap := tools["call_0_1"], tools["call_2_1"]
	if peek.Name != "execute_tool peek" || tap.Name != "execute_tool tap" {
		t.Fatalf("tool spans by call id: %v", tools)
	}
	wantAttrs(t, peek, map[string]any{"gen_ai.tool.name": "peek", "gen_ai.tool.type": "extension", "clawfarm.turn": int64(1)})
	wantAttrs(t, tools["call_0_0"], map[string]any{"gen_ai.tool.name": "note", "gen_ai.tool.type": "function"})
	if peek.Status.Code == codes.Error || tap.Status.Code != codes.Error {
		t.Errorf("peek status %v, tap status %v; want tap (an error result) an error", peek.Status, tap.Status)
	}
	wantAttrs(t, tap, map[string]any{"error.type": "tool_error"})

	for tool, parent := range map[string]tracetest.SpanStub{"peek": peek, "tap": tap} {
		mcp := named(spans, "tools/call "+tool)
		if len(mcp) != 1 {
			t.Fatalf("%d tools/call %s spans, want 1", len(mcp), tool)
		}
		if mcp[0].Parent.SpanID() != parent.SpanContext.SpanID() || mcp[0].SpanKind != trace.SpanKindClient {
			t.Errorf("tools/call %s: parent %v kind %v, want its execute_tool span and client", tool, mcp[0].Parent.SpanID(), mcp[0].SpanKind)
		}
		wantAttrs(t, mcp[0], map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": tool, "server.address": "127.0.0.1"})
		if _, ok := attr(mcp[0], "mcp.session.id"); !ok {
			t.Errorf("tools/call %s has no mcp.session.id", tool)
		}
	}
	if n := len(named(spans, "tools/call note")); n != 0 {
		t.Errorf("%d rig spans for note, an engine tool", n)
	}
}

// Without a tracer the session records nothing and names no trace.
func TestNoTracerNoTraceID(t *testing.T) {
	h := newHarness(t, end("DONE"))
	h.run(context.Background())
	if id := h.events("session_start")[0].OTelTraceID; id != "" || h.sess.TraceID() != "" {
		t.Errorf("trace id %q / %q without a tracer", id, h.sess.TraceID())
	}
}

// A STUCK session's span is an error, with the exit reason as its type.
func TestStuckSessionSpanIsAnError(t *testing.T) {
	h := newHarness(t, end("STUCK"))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h.cfg.Tracer = tp.Tracer("test")
	h.run(context.Background())
	roots := named(exp.GetSpans(), "invoke_agent clawfarm")
	if len(roots) != 1 || roots[0].Status.Code != codes.Error {
		t.Fatalf("roots %v, want one with an error status", roots)
	}
	wantAttrs(t, roots[0], map[string]any{"clawfarm.sentinel": "STUCK", "error.type": "end_turn"})
}

func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	for k, w := range want {
		v, ok := attr(s, k)
		if !ok {
			t.Errorf("%s: no attribute %s", s.Name, k)
			continue
		}
		var match bool
		switch w := w.(type) {
		case string:
			match = v.Type() == attribute.STRING && v.AsString() == w
		case int64:
			match = v.Type() == attribute.INT64 && v.AsInt64() == w
		case bool:
			match = v.Type() == attribute.BOOL && v.AsBool() == w
		case []string:
			match = v.Type() == attribute.STRINGSLICE && slices.Equal(v.AsStringSlice(), w)
		}
		if !match {
			t.Errorf("%s: %s = %v, want %v", s.Name, k, v.String(), w)
		}
	}
}
