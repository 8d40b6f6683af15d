package contract

// The steer inbox (docs/engine.md, "The inbox (steer runs)"): the manager
// appends a steer run to the session's run as a status.joined entry of mode
// JoinedModeSteer; the loop reads its own run at every turn boundary and
// delivers the steer entries after those the session already has, in order
// (Progress.Steered and TerminationMessage.Steered count them).

// JoinedModeSteer is the mode of a steer run's status.joined entry (the
// queue mode steer of the AgentRun API).
const JoinedModeSteer = "steer"

// Joined is one entry of an AgentRun's status.joined as the loop reads it.
// The JSON names match the CRD's status.joined fields, so the loop reads its
// run without importing the API types.
type Joined struct {
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Trigger string `json:"trigger"`
}
