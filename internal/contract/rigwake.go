package contract

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

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

// maxWakeBody is the most of a watch answer that is read.
const maxWakeBody = 64 << 10

// ReadRigWake reads a watch route's answer to GET u: 200 and the RigWake
// JSON, at most 64 KiB of it. Nothing of a wrong answer is echoed.
func ReadRigWake(resp *http.Response, u string) (RigWake, error) {
	var wake RigWake
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWakeBody))
	if err != nil {
		return wake, err
	}
	if resp.StatusCode != http.StatusOK {
		return wake, fmt.Errorf("GET %s answered %s", u, resp.Status)
	}
	if err := json.Unmarshal(body, &wake); err != nil {
		return wake, fmt.Errorf("GET %s did not answer the watch JSON (%d bytes)", u, len(body))
	}
	return wake, nil
}
