// Package agentgo records AgentGo agents (github.com/compforge/agentgo) on the ledger, and
// resumes them from it after a crash.
//
// What AgentGo does, and what the ledger keeps of it:
//
//   - a model call (ModelMiddleware): each physical provider attempt is a call of the tool
//     "model", its request committed before the provider is called, its reply, tokens, stop
//     reason and cost after;
//   - a tool call (ToolMiddleware): an attempt keyed on AgentGo's execution id, the call's id:
//     its tool_call committed before the tool runs, its tool_result after;
//   - a committed message (Run.CommitMessage, AgentGo's message committer): AgentGo's message
//     whole in the run's framework stream agentgo.<run id>, and the normalized `message` a
//     timeline reads in the run's stream run-<run id>;
//   - a run: a ledger run, holding a lease while it lives; a subagent's run, started inside
//     the tool call that asked for it, is that run's child (delegation: its run.started
//     follows from the call and names the parent run).
//
// Every write the adapter makes for a run (its calls' requests and outcomes, its messages in
// both streams, its start and end) is made under the run's lease, fenced by the holding's
// token: a process stopped past its lease (a long GC pause, SIGSTOP, a migrated VM) while
// another process resumed the run is refused whatever it had on its way, atomically and with
// nothing written (agent.ErrLeaseLost), and its run halts.
//
// Recovery: a process killed inside a tool leaves the call's attempt open, and the
// reconciler flags it once the run's lease is gone. Resume the run (RunOptions.Resume), give
// AgentGo its conversation back (AgentGo's HoldRuns, then SetMessages with Run.Messages, then
// Continue): recorded model replies and tool outcomes are returned instead of calling again,
// an operator's `ledger-bus resolve` included; a call still unresolved halts the run, unless
// its tool is safe to replay (Options.SafeToReplay).
//
// The Go module proxy does not serve AgentGo (go list -m -versions github.com/compforge/agentgo
// is refused), so the adapter is written against AgentGo's hook types as declared in hooks.go,
// field for field AgentGo's own, and its tests drive them in AgentGo's loop order with a
// scripted model (internal/loop).
package agentgo
