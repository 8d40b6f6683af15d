package contract

import (
	"encoding/json"
	"slices"
)

// RigStatusPath is a PhysiClaw rig's health route, on the MCP URL's host.
const RigStatusPath = "/api/status"

// RigStatus is the body of a rig's health route as PhysiClaw writes it
// (docs/rig-contract.md, "Health route"). A field that is missing reads as
// false; Steps holds the set-up steps that are done, each key present once
// its step has produced a value (most values are strings, "validated" is a
// boolean), and absent while the step is not done.
type RigStatus struct {
	Arm           bool                       `json:"arm"`
	Camera        bool                       `json:"camera"`
	Bridge        bool                       `json:"bridge"`
	Calibrated    bool                       `json:"calibrated"`
	OriginPinned  bool                       `json:"origin_pinned"`
	Ready         bool                       `json:"ready"`
	LayoutLearned bool                       `json:"layout_learned"`
	Steps         map[string]json.RawMessage `json:"steps"`
}

// The set-up steps a PhysiClaw rig goes through, in the order its set-up
// page runs them; each is a key of RigStatus.Steps once done.
const (
	StepViewportShift  = "viewport_shift"
	StepRotation       = "rotation"
	StepMappingA       = "mapping_a"
	StepMappingB       = "mapping_b"
	StepFocus          = "focus"
	StepValidated      = "validated"
	StepAlignment      = "alignment"
	StepAssistiveTouch = "assistive_touch"
)

// SetUpSteps are the steps a rig must have done to serve, in set-up order,
// each with what a person does to finish it. rotation, focus and alignment
// are recorded when present but not required: a rig that needs no rotation,
// has no lens lock or no direction map never reports them.
var SetUpSteps = []struct{ Key, Todo string }{
	{StepViewportShift, "measure the viewport shift (the set-up page's first calibration step, with the bridge page open on the phone)"},
	{StepMappingA, "map the screen to the arm (arm calibration)"},
	{StepMappingB, "map the screen to the camera (camera calibration)"},
	{StepValidated, "validate the calibration"},
	{StepAssistiveTouch, "place and verify the AssistiveTouch button"},
}

// StepOrder is every step key PhysiClaw reports, in set-up order.
var StepOrder = []string{StepViewportShift, StepRotation, StepMappingA, StepMappingB, StepFocus, StepValidated, StepAlignment, StepAssistiveTouch}

// Done says whether a step is done: its key present, and not false or null
// ("validated" is a boolean).
func (s RigStatus) Done(step string) bool {
	v, ok := s.Steps[step]
	return ok && string(v) != "false" && string(v) != "null"
}

// StepsDone lists the steps done, known ones in set-up order, then any other
// key PhysiClaw may add, sorted.
func (s RigStatus) StepsDone() []string {
	var out, other []string
	for _, k := range StepOrder {
		if s.Done(k) {
			out = append(out, k)
		}
	}
	for k := range s.Steps {
		if !slices.Contains(StepOrder, k) && s.Done(k) {
			other = append(other, k)
		}
	}
	slices.Sort(other)
	return append(out, other...)
}

// AssistiveTouchAt is where the rig calibrated the AssistiveTouch button
// ("(0.900, 0.880)", screen fractions), or "" while that step is not done.
func (s RigStatus) AssistiveTouchAt() string {
	var at string
	if json.Unmarshal(s.Steps[StepAssistiveTouch], &at) != nil {
		return ""
	}
	return at
}
