package rigsim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// Faults are the failures a rig produces on demand (docs/rig-contract.md, "How real rigs fail").
// Each one looks on the wire the way the real failure does.
type Faults struct {
	// Latency overrides a tool's typical duration (then scaled by the rig's time scale).
	Latency map[string]Duration `json:"latency,omitempty"`
	// Glare is the fraction of text labels the OCR drops or misreads (glare, poor light).
	Glare float64 `json:"glare,omitempty"`
	// MissedTaps is the fraction of touches that do nothing (a worn solenoid cable).
	MissedTaps float64 `json:"missedTaps,omitempty"`
	// TapOffset is added to every touch point, in screen fractions (a bumped rig).
	TapOffset [2]float64 `json:"tapOffset,omitempty"`
	// CrashApp crashes the next time a gesture leaves it in the foreground (one shot).
	CrashApp string `json:"crashApp,omitempty"`
	// CameraHiccups is the fraction of gestures that come back text-only, without a view.
	CameraHiccups float64 `json:"cameraHiccups,omitempty"`
	// NoVerdict is the fraction of gestures whose before and after frames
	// could not be compared (blur, an exposure re-tune): the result carries
	// the view but no verdict.
	NoVerdict float64 `json:"noVerdict,omitempty"`
	// Busy is the fraction of calls refused as if another gesture held the lock.
	Busy float64 `json:"busy,omitempty"`
	// Disconnected drops every MCP, health and watch request on the floor (host asleep, Wi-Fi split).
	Disconnected bool `json:"disconnected,omitempty"`
	// Health overrides /api/status: a status field (healthFields) set false
	// reads false, a set-up step (simSteps) set false is missing from steps.
	// arm, camera or calibrated false, or a missing mapping_a, mapping_b or
	// validated step, make every tool fail as on a rig that is not set up;
	// origin_pinned false makes every tool fail as on an unpinned arm; bridge
	// false makes screenshot and the clipboard fail (the bridge page in the
	// background).
	Health map[string]bool `json:"health,omitempty"`
}

// healthFields are the JSON names of contract.RigStatus's boolean fields,
// the body of GET /api/status (docs/rig-contract.md).
var healthFields = []string{"arm", "camera", "bridge", "calibrated", "origin_pinned", "ready", "layout_learned"}

// simSteps are the set-up steps a rigsim rig reports done, in set-up order.
// It reports no focus step: a rig without a lens lock never does.
var simSteps = []string{contract.StepViewportShift, contract.StepRotation, contract.StepMappingA, contract.StepMappingB,
	contract.StepValidated, contract.StepAlignment, contract.StepAssistiveTouch}

// Validate checks fractions, tool names and health field and step names.
func (f Faults) Validate() error {
	for name, v := range map[string]float64{"glare": f.Glare, "missedTaps": f.MissedTaps, "cameraHiccups": f.CameraHiccups,
		"noVerdict": f.NoVerdict, "busy": f.Busy} {
		if v < 0 || v > 1 {
			return fmt.Errorf("fault %s=%v: want a fraction between 0 and 1", name, v)
		}
	}
	for tool, d := range f.Latency {
		if _, ok := typicalDuration[tool]; !ok {
			return fmt.Errorf("fault latency.%s: no such tool; want one of %s", tool, strings.Join(contract.RigTools, ", "))
		}
		if d < 0 {
			return fmt.Errorf("fault latency.%s=%s: want a duration of zero or more", tool, time.Duration(d))
		}
	}
	for k := range f.Health {
		if !slices.Contains(healthFields, k) && !slices.Contains(simSteps, k) {
			return fmt.Errorf("fault health.%s: no such status field or set-up step; want a field (%s) or a step (%s)",
				k, strings.Join(healthFields, ", "), strings.Join(simSteps, ", "))
		}
	}
	return nil
}

// healthy reports a health field or step, true unless a fault says otherwise.
func (f Faults) healthy(key string) bool {
	v, ok := f.Health[key]
	return !ok || v
}

// calibrated is PhysiClaw's calibrated: an arm, a camera and both mappings,
// validated.
func (f Faults) calibrated() bool {
	return f.healthy("arm") && f.healthy("camera") && f.healthy("calibrated") &&
		f.healthy(contract.StepMappingA) && f.healthy(contract.StepMappingB) && f.healthy(contract.StepValidated)
}

// ready is PhysiClaw's ready, which needs the rig calibrated; rigsim also
// needs the two set-up steps before and after the mappings done.
func (f Faults) ready() bool {
	return f.healthy("ready") && f.calibrated() &&
		f.healthy(contract.StepViewportShift) && f.healthy(contract.StepAssistiveTouch)
}

// typicalDuration is how long each tool takes on a real rig (docs/rig-contract.md, "The twelve tools, in wire order").
// The simulated clock advances by it; the wall clock sleeps it times the time scale.
var typicalDuration = map[string]time.Duration{
	contract.ToolPeek:            4 * time.Second,
	contract.ToolScreenshot:      12 * time.Second,
	contract.ToolTap:             2 * time.Second,
	contract.ToolDoubleTap:       2 * time.Second,
	contract.ToolLongPress:       3 * time.Second,
	contract.ToolSwipe:           3 * time.Second,
	contract.ToolHomeScreen:      3 * time.Second,
	contract.ToolGoBack:          3 * time.Second,
	contract.ToolForceQuit:       8 * time.Second,
	contract.ToolUnlockPhone:     15 * time.Second,
	contract.ToolSendToClipboard: 6 * time.Second,
	contract.ToolSequence:        2 * time.Second, // plus each step's own
}
