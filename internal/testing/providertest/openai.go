package providertest

import (
	"encoding/json"
	"net/http"
)

// OpenAI starts a scripted Chat Completions server; its base URL is URL+"/v1".
func OpenAI(script Script) *Server { return openAI(script, true) }

// OpenAILean is OpenAI without keeping request bodies (benchmarks).
func OpenAILean(script Script) *Server { return openAI(script, false) }

func openAI(script Script, keep bool) *Server {
	return newServer(script, keep, func(s *Server, w http.ResponseWriter, r *http.Request, st Step, stream bool) {
		if st.Status != 0 {
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": st.ErrType, "code": st.ErrType, "message": st.ErrMessage}})
			return
		}
		finish := st.Finish
		if finish == "" {
			finish = "stop"
			if len(st.Calls) > 0 {
				finish = "tool_calls"
			}
		}
		usage := map[string]any{"prompt_tokens": st.PromptTokens, "completion_tokens": st.CompletionTokens,
			"total_tokens": st.PromptTokens + st.CompletionTokens, "prompt_tokens_details": map[string]any{"cached_tokens": st.CachedTokens}}
		if !stream {
			var calls []map[string]any
			for _, c := range st.Calls {
				calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
			}
			msg := map[string]any{"role": "assistant", "content": st.Text}
			if st.Reasoning != "" {
				msg["reasoning_content"] = st.Reasoning
			}
			if len(calls) > 0 {
				msg["tool_calls"] = calls
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
				"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
			return
		}
		send := sse(w)
		chunk := func(delta map[string]any, finish any) {
			send("", map[string]any{"id": "x", "object": "chat.completion.chunk", "model": "m",
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		}
		chunk(map[string]any{"role": "assistant"}, nil)
		if st.Stall {
			stall(r)
			return
		}
		for _, p := range chunks(st.Reasoning, 16) {
			chunk(map[string]any{"reasoning_content": p}, nil)
		}
		for _, p := range chunks(st.Text, 7) {
			chunk(map[string]any{"content": p}, nil)
		}
		for i, c := range st.Calls {
			a, b := halves(c.Args)
			head := map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": a}}
			tail := map[string]any{"function": map[string]any{"arguments": b}}
			if !c.NoIndex {
				head["index"], tail["index"] = i, i
			}
			chunk(map[string]any{"tool_calls": []any{head}}, nil)
			if b != "" {
				chunk(map[string]any{"tool_calls": []any{tail}}, nil)
			}
		}
		chunk(map[string]any{}, finish)
		send("", map[string]any{"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": []any{}, "usage": usage})
		send("", "[DONE]")
	})
}
