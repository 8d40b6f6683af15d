package contract

// The names of the tools an agent calls. The rig serves the twelve rig tools
// over MCP; the engine runs the rest itself and never sends them to the rig
// (docs/rig-contract.md, "The twelve tools, in wire order" and "Engine-side
// tools"). The engine, the rig client and both simulators spell every tool
// name from here, so a rename is one edit.

// The rig's twelve tools (docs/rig-contract.md).
const (
	ToolPeek            = "peek"
	ToolScreenshot      = "screenshot"
	ToolTap             = "tap"
	ToolDoubleTap       = "double_tap"
	ToolLongPress       = "long_press"
	ToolSwipe           = "swipe"
	ToolHomeScreen      = "home_screen"
	ToolGoBack          = "go_back"
	ToolForceQuit       = "force_quit"
	ToolUnlockPhone     = "unlock_phone"
	ToolSendToClipboard = "send_to_clipboard"
	ToolSequence        = "sequence"
)

// RigTools are the rig's twelve tools in wire order: the order tools/list
// gives them in (docs/rig-contract.md).
var RigTools = []string{
	ToolPeek, ToolScreenshot, ToolTap, ToolDoubleTap, ToolLongPress, ToolSwipe,
	ToolHomeScreen, ToolGoBack, ToolForceQuit, ToolUnlockPhone, ToolSendToClipboard, ToolSequence,
}

// The engine's own tools (docs/rig-contract.md, "Engine-side tools"; how they
// work: docs/engine.md). note and end_session are in every session; the rest
// come with the plan and the rig's state directory, Skill only when the rig
// has skills.
const (
	// ToolNote narrates a turn: every turn is [note, one other tool].
	ToolNote = "note"
	// ToolEndSession closes the session with a sentinel and a recap.
	ToolEndSession     = "end_session"
	ToolUpdateProgress = "update_progress"
	ToolAppendLog      = "append_log"
	ToolSaveMemory     = "save_memory"
	ToolReadMemory     = "read_memory"
	ToolReadLogs       = "read_logs"
	ToolUpdateMemory   = "update_memory"
	ToolCreateJob      = "create_job"
	ToolGetJob         = "get_job"
	ToolListJobs       = "list_jobs"
	ToolFinishJob      = "finish_job"
	ToolWait           = "wait"
	ToolSkill          = "Skill"
)
