package rigsim

import (
	"context"
	_ "embed"
	"encoding/json"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Identity is what the rig says it is at the MCP handshake: a PhysiClaw server.
var Identity = mcp.Implementation{Name: "physiclaw", Version: "0.4.3"}

//go:embed doctrine.md
var doctrine string

type schema = map[string]any

var bboxSchema = schema{
	"type": "array", "minItems": 4, "maxItems": 4,
	"items":       schema{"type": "number", "minimum": 0, "maximum": 1},
	"description": "Screen bbox [left, top, right, bottom] as 0-1 decimals, with left < right and top < bottom.",
}

var swipeProperties = schema{
	"bbox":      bboxSchema,
	"direction": schema{"type": "string", "enum": swipeDirections, "description": "which way the stylus moves (not the page)"},
	"size":      schema{"type": "string", "enum": swipeSizeOrder, "default": "m", "description": "stroke length: s/m/l/xl/xxl = 0.10/0.30/0.50/0.75/0.90 of the screen"},
	"speed":     schema{"type": "string", "enum": swipeSpeeds, "default": "medium", "description": "stylus speed; faster strokes coast further"},
}

var clipboardTextSchema = schema{"type": "string", "minLength": 1, "maxLength": maxClipboardChars,
	"description": "Plain text to copy to the phone's clipboard. Pass the text directly, not a JSON object."}

func object(props schema, required ...string) schema {
	s := schema{"type": "object", "properties": props}
	if props == nil {
		s["properties"] = schema{}
	}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// toolSpec is one tool: its description, input schema and handler.
type toolSpec struct {
	name        string
	description string
	input       schema
	handle      func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult
}

func bboxTool(name, description string, g func(r *Rig, b bbox) (string, error)) toolSpec {
	return toolSpec{name, description, object(schema{"bbox": bboxSchema}, "bbox"), func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult {
		a, err := parseArgs(raw)
		if err != nil {
			return errResult(name, err)
		}
		b, err := parseBBox(a["bbox"], true)
		if err != nil {
			return errResult(name, err)
		}
		return r.runGesture(ctx, name, 0, func(r *Rig) (string, error) { return g(r, b) })
	}}
}

func bareTool(name, description string, g func(r *Rig) (string, error)) toolSpec {
	return toolSpec{name, description, object(nil), func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult {
		if _, err := parseArgs(raw); err != nil {
			return errResult(name, err)
		}
		return r.runGesture(ctx, name, 0, g)
	}}
}

func lookTool(name, description string) toolSpec {
	return toolSpec{name, description, object(nil), func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult {
		if _, err := parseArgs(raw); err != nil {
			return errResult(name, err)
		}
		return r.runLook(ctx, name)
	}}
}

// tools are the twelve, in wire order.
var tools = []toolSpec{
	lookTool(contract.ToolPeek, "Look at the phone through the overhead camera (~4 s, changes nothing). Returns a JPEG with icon boxes drawn and the element listing, one row per element: id [kind] \"label\" [left,top,right,bottom] conf."),
	lookTool(contract.ToolScreenshot, "Take the phone's own screenshot (~12 s, sharper than peek, and it does touch the phone). Use when peek misses a target or glare makes it unreadable. Same return shape as peek."),
	bboxTool(contract.ToolTap, "Tap once at the centre of bbox: buttons, links, list items.", (*Rig).tap),
	bboxTool(contract.ToolDoubleTap, "Two quick taps (~150 ms apart) at the centre of bbox: zoom, word select.", (*Rig).doubleTap),
	bboxTool(contract.ToolLongPress, "Press and hold ~1.2 s at the centre of bbox: context menus, the Paste menu on a text field.", (*Rig).longPress),
	{contract.ToolSwipe, "Slide the stylus from the centre of bbox in direction (the stylus's motion: swipe up scrolls the page down).",
		object(swipeProperties, "bbox", "direction"), func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult {
			a, err := parseArgs(raw)
			if err != nil {
				return errResult(contract.ToolSwipe, err)
			}
			s, err := parseSwipe(a, true)
			if err != nil {
				return errResult(contract.ToolSwipe, err)
			}
			return r.runGesture(ctx, contract.ToolSwipe, 0, func(r *Rig) (string, error) { return r.swipe(s) })
		}},
	bareTool(contract.ToolHomeScreen, "Go to the home screen (from the home screen it opens the app switcher).", (*Rig).homeScreen),
	bareTool(contract.ToolGoBack, "Go back one screen with the edge swipe; does nothing at an app's root.", (*Rig).goBack),
	bareTool(contract.ToolForceQuit, "Quit the app in the foreground (~8 s) and return to the home screen.", (*Rig).forceQuit),
	bareTool(contract.ToolUnlockPhone, "Wake the phone and enter the passcode (12-40 s). If it fails, nothing else can work: end the session STUCK.", (*Rig).unlockPhone),
	{contract.ToolSendToClipboard, "Put text on the phone's clipboard (~6 s); then long_press the field and tap Paste. Answers text only, no view.",
		object(schema{"text": clipboardTextSchema}, "text"), func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult {
			a, err := parseArgs(raw)
			if err != nil {
				return errResult(contract.ToolSendToClipboard, err)
			}
			text, err := parseClipboardText(a["text"])
			if err != nil {
				return errResult(contract.ToolSendToClipboard, err)
			}
			return r.runGesture(ctx, contract.ToolSendToClipboard, 0, func(r *Rig) (string, error) { return r.sendToClipboard(text) })
		}},
	{contract.ToolSequence, "Run 2 to 5 steps under one lock; stops at the first step that fails, nothing is rolled back. Each step is {tool_name, arg}: tool_name one of tap, double_tap, long_press, swipe, send_to_clipboard; arg a bare bbox for tap/double_tap/long_press, {bbox, direction, size?, speed?} for swipe, the text for send_to_clipboard.",
		object(schema{"actions": schema{
			"type": "array", "minItems": minSequenceSteps, "maxItems": maxSequenceSteps,
			"items":       schema{"type": "object"},
			"description": "2-5 steps, run in order, each {\"tool_name\": ..., \"arg\": that tool's argument}",
		}}, "actions"), func(ctx context.Context, r *Rig, raw json.RawMessage) *mcp.CallToolResult {
			a, err := parseArgs(raw)
			if err != nil {
				return errResult(contract.ToolSequence, err)
			}
			items, err := parseActions(a)
			if err != nil {
				return errResult(contract.ToolSequence, err)
			}
			steps := make([]step, len(items))
			for i, it := range items {
				steps[i] = parseStep(it)
			}
			return r.runGesture(ctx, contract.ToolSequence, sequenceTime(steps), func(r *Rig) (string, error) { return r.sequence(steps) })
		}},
}

// newMCPServer builds the rig's MCP server: the twelve tools, listed in wire order, with the doctrine as instructions.
func newMCPServer(r *Rig) *mcp.Server {
	s := mcp.NewServer(&Identity, &mcp.ServerOptions{Instructions: doctrine, Capabilities: &mcp.ServerCapabilities{}})
	for _, t := range tools {
		t := t
		s.AddTool(&mcp.Tool{Name: t.name, Description: t.description, InputSchema: t.input},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return t.handle(ctx, r, req.Params.Arguments), nil
			})
	}
	s.AddReceivingMiddleware(wireOrder, r.recordCalls, unknownTool)
	return s
}

// unknownTool answers a call of a tool the rig does not have as PhysiClaw's
// server does, with an error result; the SDK would answer a JSON-RPC error.
func unknownTool(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && call.Params != nil &&
			!slices.Contains(contract.RigTools, call.Params.Name) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "Unknown tool: " + call.Params.Name}}}, nil
		}
		return next(ctx, method, req)
	}
}

// wireOrder lists tools in the rig's wire order; the SDK would sort them by name.
func wireOrder(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if lt, ok := res.(*mcp.ListToolsResult); ok && err == nil {
			slices.SortStableFunc(lt.Tools, func(a, b *mcp.Tool) int {
				return slices.Index(contract.RigTools, a.Name) - slices.Index(contract.RigTools, b.Name)
			})
		}
		return res, err
	}
}
