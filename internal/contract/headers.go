package contract

// The headers the loop's rig client sends on every HTTP request to the rig's
// MCP endpoint (docs/rig-contract.md, "Who is calling"): which attempt of
// which run is driving the rig. A PhysiClaw rig ignores them; rigsim's session
// ledger reads them to tell one session reconnecting from two sessions on one
// phone (docs/rigsim.md, "The session ledger"). A header whose value would be
// empty is not sent.
const (
	// HeaderRun is the AgentRun as namespace/name (SettingRun); absent when
	// the loop runs without a cluster.
	HeaderRun = "X-Clawfarm-Run"
	// HeaderAttempt is the attempt number, from 1 (SettingAttempt).
	HeaderAttempt = "X-Clawfarm-Attempt"
	// HeaderPod is the loop pod's name (its HOSTNAME): an infrastructure
	// retry runs the same attempt in another pod.
	HeaderPod = "X-Clawfarm-Pod"
)
