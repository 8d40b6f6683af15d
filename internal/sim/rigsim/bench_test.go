package rigsim

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkPeek is one peek end to end: MCP over HTTP, rendering, JPEG encoding, the listing.
func BenchmarkPeek(b *testing.B) {
	tr := startRig(b, Config{})
	for b.Loop() {
		res, err := tr.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "peek"})
		if err != nil || res.IsError {
			b.Fatalf("peek: %v", err)
		}
	}
}

// BenchmarkTap is one gesture with its post-action view.
func BenchmarkTap(b *testing.B) {
	tr := startRig(b, Config{})
	args := map[string]any{"bbox": []float64{0.4, 0.5, 0.5, 0.55}}
	for b.Loop() {
		res, err := tr.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tap", Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("tap: %v", err)
		}
	}
}
