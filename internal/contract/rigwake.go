package contract

import "time"

// RigWatchPath is a PhysiClaw rig's watch route: GET answers RigWake, a
// camera watchdog's word that the phone's screen changed while the rig was
// idle (a message arrived). A rig gateway serves the same path under each
// rig it fronts from its own record of the rig's wakes (docs/wake-ups.md).
const RigWatchPath = "/api/phone/watch"

// RigWake is the watch route's answer. PhysiClaw writes wake and reason; a
// rig gateway adds when it saw the wake, which names the wake until a
// session takes the rig.
type RigWake struct {
	Wake   bool       `json:"wake"`
	Reason string     `json:"reason"`
	At     *time.Time `json:"at,omitempty"`
}

// WakeReasonIdle is PhysiClaw's reason for a wake with nothing new on the
// phone: the idle check-in its watchdog makes after long quiet. A session
// it starts ends IDLE when it finds nothing to do.
const WakeReasonIdle = "idle check-in (no wake for 30+ min)"
