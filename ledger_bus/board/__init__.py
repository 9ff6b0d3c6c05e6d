"""The dispatch board: an orchestrator's spawn-log as mutations in a session's `dispatch`
stream, and the board folded from them."""
