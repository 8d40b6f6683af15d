package modelsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/clawfarm/clawfarm/internal/sim/modelsim"
)

// driver is a small stand-in for the loop: it asks modelsim for turns, checks their
// [note, one-other] shape, answers note and the other engine-side tools itself and
// forwards rig tools to a rig over MCP.
type driver struct {
	t      *testing.T
	llm    *openai.Client
	model  string
	rig    *mcp.ClientSession
	stream bool
	tools  []openai.Tool

	rejected    int               // turns refused for their shape, their tool or their arguments
	engineCalls []openai.ToolCall // engine-side calls other than note
	failures    []error           // provider errors that were retried
}

// maxAttempts is how often the driver asks again after a provider error.
const maxAttempts = 3

// engineTools are answered by the driver, as the engine answers them.
var engineTools = map[string]bool{"note": true, "update_progress": true, "append_log": true, "save_memory": true,
	"read_memory": true, "read_logs": true, "update_memory": true, "create_job": true, "get_job": true,
	"list_jobs": true, "finish_job": true, "wait": true}

func startModel(t *testing.T, lib modelsim.Library) *openai.Client {
	t.Helper()
	srv := httptest.NewServer(modelsim.NewServer(lib).Handler())
	t.Cleanup(srv.Close)
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = srv.URL + "/v1"
	return openai.NewClientWithConfig(cfg)
}

func builtin(t *testing.T) modelsim.Library {
	t.Helper()
	lib, err := modelsim.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

func newDriver(t *testing.T, llm *openai.Client, model string, rig *mcp.ClientSession, stream bool) *driver {
	d := &driver{t: t, llm: llm, model: model, rig: rig, stream: stream}
	res, err := rig.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("list rig tools: %v", err)
	}
	for _, tool := range res.Tools {
		d.tools = append(d.tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: tool.Name, Description: tool.Description, Parameters: tool.InputSchema}})
	}
	for _, name := range append(slices.Sorted(maps.Keys(engineTools)), "end_session") {
		d.tools = append(d.tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)}})
	}
	return d
}

// ending is how a session closed.
type ending struct {
	status, recap string
	turns         int
}

// play runs one session from trigger until end_session, or fails the test after maxTurns.
func (d *driver) play(trigger string) ending {
	d.t.Helper()
	const maxTurns = 40
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You drive a phone through a PhysiClaw rig. Every turn: note, then one other tool."},
		{Role: openai.ChatMessageRoleUser, Content: trigger},
	}
	for turn := 1; turn <= maxTurns; turn++ {
		reply := d.complete(msgs)
		msgs = append(msgs, reply)
		if len(reply.ToolCalls) == 0 {
			d.rejected++
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "Every turn must call note and exactly one other tool."})
			continue
		}
		if problem := shapeProblem(reply.ToolCalls); problem != "" {
			d.rejected++
			for _, c := range reply.ToolCalls {
				msgs = append(msgs, toolResult(c.ID, "rejected: "+problem))
			}
			continue
		}
		if name := unknownTool(reply.ToolCalls, d.tools); name != "" {
			d.rejected++
			for _, c := range reply.ToolCalls {
				msgs = append(msgs, toolResult(c.ID, "rejected: there is no tool "+name))
			}
			continue
		}
		var images []openai.ChatMessagePart
		for _, c := range reply.ToolCalls {
			var args map[string]any
			if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
				d.rejected++
				msgs = append(msgs, toolResult(c.ID, "error: arguments are not valid JSON: "+err.Error()))
				continue
			}
			switch name := c.Function.Name; {
			case name == "end_session":
				status, _ := args["status"].(string)
				recap, _ := args["recap"].(string)
				return ending{status, recap, turn}
			case engineTools[name]:
				if name != "note" {
					d.engineCalls = append(d.engineCalls, c)
				}
				msgs = append(msgs, toolResult(c.ID, "ok"))
			default:
				text, hasImage := d.callRig(name, args)
				msgs = append(msgs, toolResult(c.ID, text))
				if hasImage {
					images = append(images, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: "(the screen image after " + name + ")"})
				}
			}
		}
		if len(images) > 0 {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, MultiContent: images})
		}
	}
	d.t.Fatalf("no end_session after %d turns", maxTurns)
	return ending{}
}

func toolResult(id, text string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: id, Content: text}
}

// unknownTool names a called tool that was not offered.
func unknownTool(calls []openai.ToolCall, offered []openai.Tool) string {
	for _, c := range calls {
		known := false
		for _, t := range offered {
			known = known || t.Function.Name == c.Function.Name
		}
		if !known {
			return c.Function.Name
		}
	}
	return ""
}

// shapeProblem checks the [note, one-other] turn shape.
func shapeProblem(calls []openai.ToolCall) string {
	notes := 0
	for _, c := range calls {
		if c.Function.Name == "note" {
			notes++
		}
	}
	switch {
	case len(calls) != 2:
		return "a turn is exactly [note, one-other]"
	case notes != 1:
		return "a turn needs exactly one note"
	case calls[0].Function.Name != "note":
		return "the note comes first"
	}
	return ""
}

// callRig forwards a tool call to the rig and flattens the result: text parts joined, images counted.
func (d *driver) callRig(name string, args map[string]any) (string, bool) {
	res, err := d.rig.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "error: " + err.Error(), false
	}
	var texts []string
	image := false
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, c.Text)
		case *mcp.ImageContent:
			image = true
		}
	}
	return strings.Join(texts, "\n"), image
}

// complete asks modelsim for the next turn, streaming or not, asking again after a provider error.
func (d *driver) complete(msgs []openai.ChatCompletionMessage) openai.ChatCompletionMessage {
	d.t.Helper()
	for range maxAttempts {
		msg, err := d.completeOnce(msgs)
		if err == nil {
			return msg
		}
		d.failures = append(d.failures, err)
	}
	d.t.Fatalf("chat completion failed %d times: %v", maxAttempts, d.failures)
	return openai.ChatCompletionMessage{}
}

func (d *driver) completeOnce(msgs []openai.ChatCompletionMessage) (openai.ChatCompletionMessage, error) {
	req := openai.ChatCompletionRequest{Model: d.model, Messages: msgs, Tools: d.tools}
	ctx := context.Background()
	if !d.stream {
		resp, err := d.llm.CreateChatCompletion(ctx, req)
		if err != nil {
			return openai.ChatCompletionMessage{}, err
		}
		return resp.Choices[0].Message, nil
	}
	req.Stream = true
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	s, err := d.llm.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return openai.ChatCompletionMessage{}, err
	}
	defer s.Close()
	msg, _, _, err := accumulate(s)
	return msg, err
}

// accumulate reads a stream into one message, its finish reason and its usage.
func accumulate(s *openai.ChatCompletionStream) (openai.ChatCompletionMessage, openai.FinishReason, *openai.Usage, error) {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant}
	var finish openai.FinishReason
	var u *openai.Usage
	for {
		chunk, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if finish == "" {
				return msg, finish, u, errors.New("stream ended without a finish reason")
			}
			return msg, finish, u, nil
		}
		if err != nil {
			return msg, finish, u, err
		}
		if chunk.Usage != nil {
			u = chunk.Usage
		}
		for _, c := range chunk.Choices {
			msg.Content += c.Delta.Content
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.Index == nil {
					return msg, finish, u, fmt.Errorf("tool call delta without index: %+v", tc)
				}
				for len(msg.ToolCalls) <= *tc.Index {
					msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{Type: openai.ToolTypeFunction})
				}
				acc := &msg.ToolCalls[*tc.Index]
				if tc.ID != "" {
					acc.ID = tc.ID
				}
				if tc.Function.Name != "" {
					acc.Function.Name = tc.Function.Name
				}
				acc.Function.Arguments += tc.Function.Arguments
			}
		}
	}
}
