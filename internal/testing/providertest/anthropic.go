package providertest

import (
	"encoding/json"
	"net/http"
)

// Anthropic starts a scripted Messages server; its base URL is URL.
func Anthropic(script Script) *Server {
	return newServer(script, true, func(s *Server, w http.ResponseWriter, r *http.Request, st Step, stream bool) {
		if st.Status != 0 {
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": st.ErrType, "message": st.ErrMessage}})
			return
		}
		stop := st.Finish
		if stop == "" {
			stop = "end_turn"
			if len(st.Calls) > 0 {
				stop = "tool_use"
			}
		}
		usage := map[string]any{"input_tokens": st.PromptTokens - st.CachedTokens - st.CacheWriteTokens, "output_tokens": st.CompletionTokens,
			"cache_read_input_tokens": st.CachedTokens, "cache_creation_input_tokens": st.CacheWriteTokens}
		if !stream {
			var content []any
			if st.Reasoning != "" {
				content = append(content, map[string]any{"type": "thinking", "thinking": st.Reasoning, "signature": "sig"})
			}
			if st.Text != "" {
				content = append(content, map[string]any{"type": "text", "text": st.Text})
			}
			for _, c := range st.Calls {
				content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": json.RawMessage(c.Args)})
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "message", "role": "assistant", "content": content, "stop_reason": stop, "usage": usage})
			return
		}
		send := sse(w)
		send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"type": "message", "role": "assistant", "content": []any{}, "usage": usage}})
		if st.Stall {
			stall(r)
			return
		}
		idx := 0
		block := func(start map[string]any, deltas []map[string]any) {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": start})
			for _, d := range deltas {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": d})
			}
			send("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
			idx++
		}
		if st.Reasoning != "" {
			var ds []map[string]any
			for _, p := range chunks(st.Reasoning, 16) {
				ds = append(ds, map[string]any{"type": "thinking_delta", "thinking": p})
			}
			ds = append(ds, map[string]any{"type": "signature_delta", "signature": "sig"})
			block(map[string]any{"type": "thinking", "thinking": ""}, ds)
		}
		if st.Text != "" {
			var ds []map[string]any
			for _, p := range chunks(st.Text, 7) {
				ds = append(ds, map[string]any{"type": "text_delta", "text": p})
			}
			block(map[string]any{"type": "text", "text": ""}, ds)
		}
		for _, c := range st.Calls {
			a, b := halves(c.Args)
			block(map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}},
				[]map[string]any{{"type": "input_json_delta", "partial_json": a}, {"type": "input_json_delta", "partial_json": b}})
		}
		send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": st.CompletionTokens}})
		send("message_stop", map[string]any{"type": "message_stop"})
	})
}
