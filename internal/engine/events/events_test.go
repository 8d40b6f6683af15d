package events

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine/redact"
)

func TestEmitterWritesRedactedJSONLines(t *testing.T) {
	var buf bytes.Buffer
	e := NewEmitter(&buf, redact.New("hunter2-secret"), func() time.Time { return time.Unix(0, 0) })
	e.Emit(SessionStart("ns/r", 1, "openai", "m", []string{"note"}))
	e.Emit(Error(3, "auth", "bad key hunter2-secret", 0))
	e.Emit(ToolResult(3, "peek", "c1", strings.Repeat("x", MaxResultText+10), false, 1, false))
	e.Emit(Done(contract.TerminationMessage{Sentinel: contract.Done, ExitReason: contract.ReasonEndTurn, Turns: 3}))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines", len(lines))
	}
	for _, l := range lines {
		var ev Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.TS == "" || ev.Stream == "" {
			t.Errorf("bad line %q: %v", l, err)
		}
	}
	if strings.Contains(buf.String(), "hunter2-secret") {
		t.Error("secret in events")
	}
	if !strings.Contains(lines[3], `"retryable":false`) || !strings.Contains(lines[3], `"stream":"lifecycle"`) {
		t.Errorf("done line %s", lines[3])
	}
}
