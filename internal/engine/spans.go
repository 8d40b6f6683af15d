package engine

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/provider"
	"github.com/clawfarm/clawfarm/internal/rig"
)

// The session as OpenTelemetry spans, after the GenAI semantic conventions
// (docs/otel.md): one invoke_agent span for the attempt; under it a chat
// span per model call and an execute_tool span per tool call; the rig
// client adds the MCP call as the tool span's child (internal/rig). The
// spans carry names, numbers and outcomes, never a prompt, an argument or
// a result: those stay in the clawfarm trace.

// AgentName is the gen_ai.agent.name of every session.
const AgentName = "clawfarm"

// The attribute keys the spans use, GenAI's and the project's own.
const (
	attrOperation      = attribute.Key("gen_ai.operation.name")
	attrProviderName   = attribute.Key("gen_ai.provider.name")
	attrAgentName      = attribute.Key("gen_ai.agent.name")
	attrConversationID = attribute.Key("gen_ai.conversation.id")
	attrRequestModel   = attribute.Key("gen_ai.request.model")
	attrMaxTokens      = attribute.Key("gen_ai.request.max_tokens")
	attrResponseModel  = attribute.Key("gen_ai.response.model")
	attrResponseID     = attribute.Key("gen_ai.response.id")
	attrFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	attrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	attrCacheRead      = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrCacheCreation  = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	attrToolName       = attribute.Key("gen_ai.tool.name")
	attrToolCallID     = attribute.Key("gen_ai.tool.call.id")
	attrToolType       = attribute.Key("gen_ai.tool.type")
	attrErrorType      = attribute.Key("error.type")

	attrRun       = attribute.Key("clawfarm.run")
	attrAttempt   = attribute.Key("clawfarm.attempt")
	attrTurn      = attribute.Key("clawfarm.turn")
	attrSentinel  = attribute.Key("clawfarm.sentinel")
	attrReason    = attribute.Key("clawfarm.exit_reason")
	attrRetryable = attribute.Key("clawfarm.retryable")
	attrTurns     = attribute.Key("clawfarm.turns")
	attrBlocked   = attribute.Key("clawfarm.tool.blocked")
)

// providerName is gen_ai.provider.name for a preset: the convention's
// well-known value where it has one, the preset's name otherwise.
func providerName(preset string) string {
	switch preset {
	case "google":
		return "gcp.gemini"
	case "qwen":
		return "alibaba.qwen"
	case "moonshot":
		return "moonshot_ai"
	}
	return preset
}

// startSpan opens the session's invoke_agent span; ctx carries it to every
// step, so each model and tool call becomes its child.
func (s *Session) startSpan(ctx context.Context) context.Context {
	attrs := []attribute.KeyValue{
		attrOperation.String("invoke_agent"), attrAgentName.String(AgentName),
		attrProviderName.String(providerName(s.cfg.Provider.Name())), attrRequestModel.String(s.cfg.Provider.Model()),
		attrAttempt.Int(s.cfg.Attempt),
	}
	if s.cfg.Run != "" {
		// A run is one conversation across its attempts.
		attrs = append(attrs, attrRun.String(s.cfg.Run), attrConversationID.String(s.cfg.Run))
	}
	ctx, s.span = s.cfg.Tracer.Start(ctx, "invoke_agent "+AgentName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx
}

// TraceID is the hex id of the session's OpenTelemetry trace; empty when
// the session records no spans.
func (s *Session) TraceID() string {
	if s.span == nil || !s.span.SpanContext().HasTraceID() {
		return ""
	}
	return s.span.SpanContext().TraceID().String()
}

// endSpan closes the invoke_agent span with the session's ending and its
// usage. A STUCK ending is an error; DONE, WAIT, IDLE and the agent's own
// FAIL verdict are not.
func (s *Session) endSpan(m contract.TerminationMessage) {
	if s.span == nil {
		return
	}
	s.span.SetAttributes(attrSentinel.String(string(m.Sentinel)), attrReason.String(string(m.ExitReason)),
		attrRetryable.Bool(m.Retryable), attrTurns.Int(m.Turns),
		attrInputTokens.Int64(m.Usage.PromptTokens), attrOutputTokens.Int64(m.Usage.CompletionTokens),
		attrCacheRead.Int64(m.Usage.CachedTokens), attrCacheCreation.Int64(m.Usage.CacheWriteTokens))
	if m.Sentinel == contract.Stuck {
		s.span.SetAttributes(attrErrorType.String(string(m.ExitReason)))
		s.span.SetStatus(codes.Error, s.cfg.Redactor.String(m.Recap))
	}
	s.span.End()
	s.spanEnded = true
}

// crashed closes the session's span when the engine panics (the loop turns
// the panic into a STUCK), so the trace still shows the attempt. It does
// not recover: the panic goes on with its stack.
func (s *Session) crashed() {
	if s.span != nil && !s.spanEnded {
		s.span.SetStatus(codes.Error, "the engine crashed")
		s.span.End()
	}
}

// chatSpan opens the span of one model call (a retry is a call of its own).
func (s *Session) chatSpan(ctx context.Context, turn int, req *provider.Request) (context.Context, trace.Span) {
	model := s.cfg.Provider.Model()
	attrs := []attribute.KeyValue{
		attrOperation.String("chat"), attrProviderName.String(providerName(s.cfg.Provider.Name())),
		attrRequestModel.String(model), attrTurn.Int(turn),
	}
	if req.MaxTokens > 0 {
		attrs = append(attrs, attrMaxTokens.Int(req.MaxTokens))
	}
	return s.cfg.Tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endChat closes a model call's span with the reply's model, usage and
// finish reason, or with the failure's class.
func (s *Session) endChat(span trace.Span, reply *provider.Reply, err error) {
	defer span.End()
	if err != nil {
		pe := provider.AsError(err)
		span.SetAttributes(attrErrorType.String(string(pe.Class)))
		span.SetStatus(codes.Error, s.cfg.Redactor.String(pe.Error()))
		return
	}
	u := reply.Usage
	span.SetAttributes(attrInputTokens.Int64(u.PromptTokens), attrOutputTokens.Int64(u.CompletionTokens),
		attrCacheRead.Int64(u.CachedTokens), attrCacheCreation.Int64(u.CacheWriteTokens),
		attrFinishReasons.StringSlice([]string{string(reply.FinishReason)}))
	if reply.Model != "" {
		span.SetAttributes(attrResponseModel.String(reply.Model))
	}
	if reply.ID != "" {
		span.SetAttributes(attrResponseID.String(reply.ID))
	}
}

// toolSpan opens the span of one tool call. Rig tools are extensions (run
// by the agent against the phone); the engine's own are functions.
func (s *Session) toolSpan(ctx context.Context, c provider.ToolCall) (context.Context, trace.Span) {
	kind := "function"
	if s.rigTools[c.Name] {
		kind = "extension"
	}
	return s.cfg.Tracer.Start(ctx, "execute_tool "+c.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attrOperation.String("execute_tool"), attrToolName.String(c.Name), attrToolCallID.String(c.ID),
		attrToolType.String(kind), attrTurn.Int(s.state.Turn)))
}

// endTool closes a tool call's span: an error result, a call a policy
// blocked and a call that could not run are errors.
func (s *Session) endTool(span trace.Span, isError, blocked bool, err error) {
	defer span.End()
	switch {
	case err != nil:
		class := "canceled"
		switch {
		case errors.Is(err, rig.ErrUnavailable):
			class = string(contract.ReasonRigUnavailable)
		case errors.Is(err, rig.ErrNotSetUp):
			class = string(contract.ReasonRigNotReady)
		}
		span.SetAttributes(attrErrorType.String(class))
		span.SetStatus(codes.Error, s.cfg.Redactor.String(err.Error()))
	case blocked:
		span.SetAttributes(attrBlocked.Bool(true), attrErrorType.String("blocked"))
		span.SetStatus(codes.Error, "blocked by policy")
	case isError:
		span.SetAttributes(attrErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "the tool returned an error")
	}
}
