//go:build physiclaw

package rig_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/rig"
)

// The rig client against a real PhysiClaw control plane with no hardware
// (make check-physiclaw, docs/rig-contract.md, "Checked against the real
// server"): the handshake, the twelve tools in wire order, a rig that is not
// set up, an argument the server's own validation refuses, an unknown tool.
func TestPhysiClawClient(t *testing.T) {
	base := os.Getenv("PHYSICLAW_URL")
	if base == "" {
		t.Fatal("PHYSICLAW_URL is not set: the control plane's base URL, e.g. http://127.0.0.1:18848")
	}
	c, err := rig.Dial(context.Background(), rig.Config{Endpoint: base + "/mcp", ReconnectWindow: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Name)
	}
	if !slices.Equal(names, contract.RigTools) {
		t.Errorf("tools %v, want %v in wire order", names, contract.RigTools)
	}
	if !strings.Contains(c.Instructions(), "PhysiClaw") {
		t.Errorf("instructions do not carry the doctrine: %.80q", c.Instructions())
	}
	_, err = c.Call(context.Background(), contract.ToolPeek, []byte(`{}`))
	if !errors.Is(err, rig.ErrNotSetUp) {
		t.Errorf("peek on a rig with no hardware: %v, want ErrNotSetUp", err)
	}
	// A lenient argument reaches the hardware check too.
	if _, err := c.Call(context.Background(), contract.ToolTap, []byte(`{"bbox":"[0.4,0.4,0.6,0.5]","extra":1}`)); !errors.Is(err, rig.ErrNotSetUp) {
		t.Errorf("a bbox as a string, with an extra key: %v, want ErrNotSetUp (accepted, then not set up)", err)
	}
	res, err := c.Call(context.Background(), contract.ToolTap, []byte(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text, "bbox") {
		t.Errorf("tap {}: %+v %v, want the server's validation error naming bbox", res, err)
	}
	res, err = c.Call(context.Background(), "fly", []byte(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text, "Unknown tool: fly") {
		t.Errorf("an unknown tool: %+v %v, want the error result Unknown tool: fly", res, err)
	}
}
