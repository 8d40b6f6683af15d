package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/clawfarm/clawfarm/internal/provider"
)

// The wires of the adapter (docs/engine.md, "The Responses wire"): Chat
// Completions with the whole context; the Responses API stateless, with the
// whole context too (store: false, the default of the openai preset); and
// the Responses API chained on stored responses, each request sending only
// what is new while the service keeps superseded screens.
const (
	APIChat             = "chat"
	APIResponses        = "responses"
	APIResponsesChained = "responses-chained"
)

// The Responses API's input items, as much of them as the adapter sends.
// Reasoning items go back as the service sent them (json.RawMessage).
type (
	inputMessage struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []any  `json:"content"`
	}
	inputText struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	inputImage struct {
		Type     string `json:"type"`
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	functionCall struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	functionCallOutput struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	// reasoningInput is a reasoning item sent back without a stored
	// response: its summary and its encrypted content, never its id (an id
	// names an item the service would have to have stored).
	reasoningInput struct {
		Type             string          `json:"type"`
		Summary          json.RawMessage `json:"summary"`
		EncryptedContent string          `json:"encrypted_content"`
	}
)

// outputItem is an output item as the stream's response.output_item.done carries it.
type outputItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// ChainState is the Responses wire's incremental state, for the snapshot.
func (a *Adapter) ChainState() []byte { return a.chain.state() }

// RestoreChain continues the stored responses of a snapshot.
func (a *Adapter) RestoreChain(state []byte) error { return a.chain.restore(state) }

// responses sends one request on the Responses wire. Stateless, it sends
// the whole request as the chat wire would and keeps nothing. Chained, it
// continues from the newest stored response that the transcript still
// starts with (chain.go); when the service no longer has that response it
// starts over with the whole transcript, once.
func (a *Adapter) responses(ctx context.Context, req *provider.Request, sink provider.Sink) (*provider.Reply, error) {
	if a.cfg.API != APIResponsesChained {
		sp := provider.NewSplicer()
		rreq := a.encodeStateless(req, sp)
		cctx, x := provider.WithExchange(provider.WithSplicer(ctx, sp))
		reply, _, err := a.streamResponses(cctx, rreq, sink)
		if err != nil {
			return nil, a.classify(cctx, err, x)
		}
		reply.RequestBytes = x.RequestBytes
		return reply, nil
	}
	n := len(req.Messages) - req.Pinned
	transcript, pinned := req.Messages[:n], req.Messages[n:]
	prints := fingerprints(transcript)
	cont, continued := a.chain.from(transcript, prints)
	for {
		sp := provider.NewSplicer()
		sent := transcript[cont.start:]
		rreq := a.encodeChained(req, sent, pinned, cont.cp.ID, sp)
		cctx, x := provider.WithExchange(provider.WithSplicer(ctx, sp))
		reply, id, err := a.streamResponses(cctx, rreq, sink)
		if err != nil {
			if continued && previousNotFound(err) {
				// Expired, deleted, or a resumed attempt's chain the service
				// no longer has: start a new chain with the whole transcript.
				a.chain.drop()
				cont, continued = continuation{}, false
				continue
			}
			return nil, a.classify(cctx, err, x)
		}
		reply.RequestBytes = x.RequestBytes
		if id != "" && !hasImages(pinned) {
			covers := append(append(cont.cp.Covers[:len(cont.cp.Covers):len(cont.cp.Covers)], marks(sent, prints[cont.start:])...),
				mark{F: fingerprint(&reply.Message)})
			a.chain.add(checkpoint{ID: id, Covers: covers})
		}
		return reply, nil
	}
}

func hasImages(msgs []provider.Message) bool {
	for _, m := range msgs {
		if len(m.Images) > 0 {
			return true
		}
	}
	return false
}

// encodeStateless builds a request that depends on nothing the service
// keeps: store false, the system prompt alone as instructions, and the
// whole request — the compacted transcript, its superseded screens stubbed,
// then the pinned tail — as input items, exactly the messages the chat wire
// sends. What changes from turn to turn is at the end, so the instructions,
// the tools and the input up to the previous screen's result repeat byte
// for byte and the provider's prompt cache serves them. Reasoning comes
// back encrypted and goes back as encrypted reasoning items.
func (a *Adapter) encodeStateless(req *provider.Request, sp *provider.Splicer) goopenai.CreateResponseRequest {
	store := false
	rreq := a.responsesRequest(req, strings.TrimSpace(req.System), encodeItems(req.Messages, sp, true), &store)
	rreq.Include = []goopenai.ResponseInclude{goopenai.ResponseIncludeReasoningEncryptedContent}
	return rreq
}

// encodeChained builds a chained request: the system prompt and the pinned
// tail as instructions (not carried to the next response, so the chain
// holds only the transcript), the transcript from the checkpoint on as
// input items, and the tools.
func (a *Adapter) encodeChained(req *provider.Request, msgs, pinned []provider.Message, previous string, sp *provider.Splicer) goopenai.CreateResponseRequest {
	instructions := []string{req.System}
	var fresh []provider.Message
	for _, m := range pinned {
		if m.Text != "" {
			instructions = append(instructions, m.Text)
		}
		if len(m.Images) > 0 {
			fresh = append(fresh, provider.Message{Role: provider.RoleUser, Images: m.Images})
		}
	}
	store := true
	rreq := a.responsesRequest(req, strings.TrimSpace(strings.Join(instructions, "\n\n")),
		encodeItems(append(msgs[:len(msgs):len(msgs)], fresh...), sp, false), &store)
	rreq.PreviousResponseID = previous
	return rreq
}

// responsesRequest is what every Responses request has: the model, the
// reply bound, the tools, store explicit, streamed.
func (a *Adapter) responsesRequest(req *provider.Request, instructions string, input []any, store *bool) goopenai.CreateResponseRequest {
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = a.cfg.MaxTokens
	}
	rreq := goopenai.CreateResponseRequest{
		Model:           a.cfg.Model,
		Instructions:    instructions,
		Input:           input,
		MaxOutputTokens: maxTokens,
		Store:           store,
		Stream:          true,
	}
	for _, t := range req.Tools {
		rreq.Tools = append(rreq.Tools, goopenai.NewResponseFunctionTool(goopenai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: t.Schema}))
	}
	return rreq
}

// EncodeItems converts transcript messages to Responses input items as the
// chained wire sends them. The screens of a user message are input images
// after the tool outputs, as on the chat wire; reasoning items go back as
// the service sent them.
func EncodeItems(msgs []provider.Message) []any { return encodeItems(msgs, nil, false) }

// EncodeStatelessItems converts transcript messages to Responses input
// items as the stateless wire sends them: as EncodeItems, but each
// reasoning item as its summary and encrypted content only.
func EncodeStatelessItems(msgs []provider.Message) []any { return encodeItems(msgs, nil, true) }

func encodeItems(msgs []provider.Message, sp *provider.Splicer, stateless bool) []any {
	out := make([]any, 0, len(msgs)+1)
	for _, m := range msgs {
		switch m.Role {
		case provider.RoleUser:
			var content []any
			if m.Text != "" || len(m.Images) == 0 {
				content = append(content, inputText{Type: "input_text", Text: nonEmpty(m.Text)})
			}
			for _, im := range m.Images {
				url := im.DataURL()
				if sp != nil && provider.SpliceSafe(im.MIMEType) {
					url = sp.Placeholder(url)
				}
				content = append(content, inputImage{Type: "input_image", ImageURL: url, Detail: "auto"})
			}
			out = append(out, inputMessage{Type: "message", Role: "user", Content: content})
		case provider.RoleAssistant:
			for _, r := range m.ReasoningItems {
				if !stateless {
					out = append(out, r)
				} else if ri, ok := encryptedReasoning(r); ok {
					out = append(out, ri)
				}
			}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				out = append(out, inputMessage{Type: "message", Role: "assistant",
					Content: []any{inputText{Type: "output_text", Text: nonEmptyReply(m.Text)}}})
			}
			for _, c := range m.ToolCalls {
				out = append(out, functionCall{Type: "function_call", CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
		case provider.RoleTool:
			out = append(out, functionCallOutput{Type: "function_call_output", CallID: m.ToolCallID, Output: nonEmpty(m.Text)})
		}
	}
	return out
}

// encryptedReasoning is a reasoning item as a stateless request carries
// it. One without encrypted content can only be read back from a stored
// response, so it is left out (ok false).
func encryptedReasoning(raw json.RawMessage) (reasoningInput, bool) {
	var it struct {
		Summary          json.RawMessage `json:"summary"`
		EncryptedContent string          `json:"encrypted_content"`
	}
	if json.Unmarshal(raw, &it) != nil || it.EncryptedContent == "" {
		return reasoningInput{}, false
	}
	if len(it.Summary) == 0 || string(it.Summary) == "null" {
		it.Summary = json.RawMessage(`[]`)
	}
	return reasoningInput{Type: "reasoning", Summary: it.Summary, EncryptedContent: it.EncryptedContent}, true
}

func nonEmptyReply(s string) string {
	if s == "" {
		return "(no reply)"
	}
	return s
}

// streamError is an error the service reports inside the stream (an error
// event, or response.failed).
type streamError struct {
	Code, Message string
}

func (e *streamError) Error() string { return e.Code + ": " + e.Message }

// streamResponses reads the event stream into a reply and the response's id.
func (a *Adapter) streamResponses(ctx context.Context, rreq goopenai.CreateResponseRequest, sink provider.Sink) (*provider.Reply, string, error) {
	st, err := a.client.CreateResponseStream(ctx, rreq)
	if err != nil {
		return nil, "", err
	}
	defer st.Close()
	var (
		id        string
		model     string
		text      strings.Builder
		reason    strings.Builder
		msg       = provider.Message{Role: provider.RoleAssistant}
		usage     provider.Usage
		finish    = provider.FinishStop
		completed bool
		streamed  bool // text came as deltas
	)
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, "", err
		}
		switch ev.Type {
		case goopenai.ResponseStreamEventCreated:
			if ev.Response != nil {
				id = ev.Response.ID
			}
		case goopenai.ResponseStreamEventOutputTextDelta, goopenai.ResponseStreamEventRefusalDelta:
			streamed = true
			text.WriteString(ev.Delta)
			sink.Text(ev.Delta)
		case goopenai.ResponseStreamEventReasoningSummaryTextDelta, goopenai.ResponseStreamEventReasoningTextDelta:
			reason.WriteString(ev.Delta)
			sink.Thinking(ev.Delta)
		case goopenai.ResponseStreamEventOutputItemDone:
			var raw struct {
				Item json.RawMessage `json:"item"`
			}
			var it outputItem
			if json.Unmarshal(ev.Raw, &raw) != nil || json.Unmarshal(raw.Item, &it) != nil {
				continue
			}
			switch it.Type {
			case "reasoning":
				msg.ReasoningItems = append(msg.ReasoningItems, raw.Item)
				if reason.Len() == 0 {
					for _, s := range it.Summary {
						reason.WriteString(s.Text)
					}
				}
			case "function_call":
				msg.ToolCalls = append(msg.ToolCalls, provider.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
			case "message":
				if !streamed {
					for _, c := range it.Content {
						text.WriteString(c.Text + c.Refusal)
					}
				}
			}
		case goopenai.ResponseStreamEventCompleted, goopenai.ResponseStreamEventIncomplete:
			completed = true
			if r := ev.Response; r != nil {
				if r.ID != "" {
					id = r.ID
				}
				model = r.Model
				if r.Usage != nil {
					usage = provider.Usage{PromptTokens: int64(r.Usage.InputTokens), CompletionTokens: int64(r.Usage.OutputTokens)}
					if r.Usage.InputTokensDetails != nil {
						usage.CachedTokens = int64(r.Usage.InputTokensDetails.CachedTokens)
					}
				}
				if ev.Type == goopenai.ResponseStreamEventIncomplete {
					finish = provider.FinishLength
					if r.IncompleteDetails != nil && r.IncompleteDetails.Reason == "content_filter" {
						finish = provider.FinishContentFilter
					}
				}
			}
		case goopenai.ResponseStreamEventFailed:
			se := &streamError{Code: "server_error", Message: "the response failed"}
			if ev.Response != nil && ev.Response.Error != nil {
				se = &streamError{Code: ev.Response.Error.Code, Message: ev.Response.Error.Message}
			}
			return nil, "", se
		case goopenai.ResponseStreamEventError:
			return nil, "", &streamError{Code: ev.Code, Message: ev.Message}
		}
	}
	if !completed {
		return nil, "", fmt.Errorf("the response stream ended before response.completed: %w", io.ErrUnexpectedEOF)
	}
	msg.Text = strings.TrimSpace(text.String())
	msg.Reasoning = strings.TrimSpace(reason.String())
	if len(msg.ToolCalls) > 0 && finish == provider.FinishStop {
		finish = provider.FinishToolCalls
	}
	return &provider.Reply{Message: msg, FinishReason: finish, Usage: usage, Model: model, ID: id}, id, nil
}

// previousNotFound reports whether the service no longer has the response
// a request continued from.
func previousNotFound(err error) bool {
	var apiErr *goopenai.APIError
	if errors.As(err, &apiErr) {
		code, _ := apiErr.Code.(string)
		m := strings.ToLower(apiErr.Message)
		return code == "previous_response_not_found" ||
			strings.Contains(m, "previous response") && strings.Contains(m, "not found")
	}
	var se *streamError
	return errors.As(err, &se) && se.Code == "previous_response_not_found"
}

// streamStatus gives an in-stream error code the HTTP status the service
// would have answered with, so provider.Classify puts it in the same class.
func streamStatus(code string) int {
	switch {
	case strings.Contains(code, "rate_limit"):
		return http.StatusTooManyRequests
	case code == "server_error", strings.Contains(code, "overloaded"), code == "":
		return http.StatusInternalServerError
	case strings.Contains(code, "auth"), code == "invalid_api_key":
		return http.StatusUnauthorized
	case code == "model_not_found":
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}
