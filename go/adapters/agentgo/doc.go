// Package agentgo records AgentGo agents (github.com/compforge/agentgo) on the ledger, and
// resumes them from it after a crash, through AgentGo's own hooks and types:
//
//	lg, err := agentledger.New(st, "task-42", agentledger.Options{Model: "gpt-5"})
//	run, err := lg.Start(ctx, agentledger.RunOptions{RunID: "r1"})
//	a := agentgo.NewAgent(agentgo.WithModel(model), agentgo.WithTools(tools...),
//		agentgo.WithModelMiddlewares(lg.ModelMiddleware()),
//		agentgo.WithToolMiddlewares(lg.ToolMiddleware()),
//		agentgo.WithMessageCommitter(run.CommitMessage),
//		agentgo.WithBeforeRun(run.Restore),
//		agentgo.WithAfterRun(run.Ended))
//	err = a.Prompt(run.Context(ctx), "deploy the api") // resumed (RunOptions.Resume): a.Continue(run.Context(ctx))
//	a.WaitForIdle()
//	err = run.Finish(ctx, err) // the run's outcome, recorded
//
// What AgentGo does, and what the ledger keeps of it:
//
//   - a model call (ModelMiddleware): each physical provider attempt is a call of the tool
//     "model" under AgentGo's execution id (model-<turn>), its request committed before the
//     provider is called, its reply, tokens, stop reason and cost after;
//   - a tool call (ToolMiddleware): an attempt keyed on the turn and AgentGo's execution id,
//     the call's id: its tool_call committed before the tool runs, its tool_result after;
//   - a committed message (Run.CommitMessage, AgentGo's message committer): AgentGo's message
//     whole in the run's framework stream agentgo.<run id>, and the normalized `message` a
//     timeline reads in the run's stream run-<run id>;
//   - a run: one AgentGo run (a Prompt, or a resumed run's Continue, to its end) is a ledger
//     run, holding a lease while it lives; its restore hook (Run.Restore, AgentGo's BeforeRun)
//     records the conversation it starts from, its outcome hook (Run.Ended, AgentGo's
//     AfterRun) how it ended; a subagent's run, started inside the tool call that asked for
//     it, is that run's child (delegation: its run.started follows from the call and names
//     the parent run).
//
// Every write the adapter makes for a run (its calls' requests and outcomes, its messages in
// both streams, its start and end) is made under the run's lease, fenced by the holding's
// token: a process stopped past its lease (a long GC pause, SIGSTOP, a migrated VM) while
// another process resumed the run is refused whatever it had on its way, atomically and with
// nothing written (agent.ErrLeaseLost), and its run halts.
//
// Recovery goes through AgentGo's own restore path. A process killed anywhere in a run leaves
// the ledger its record; the reconciler flags a call left open once the run's lease is gone.
// Start the run again with RunOptions.Resume, build the agent as before, and Continue: the
// restore hook hands AgentGo the snapshot rebuilt from the ledger (the conversation and the
// progress AgentGo saves at a turn's boundary), so that AgentGo numbers the turns as it did.
// A model reply or tool outcome recorded before is returned instead of calling again, an
// operator's `ledger-bus resolve` included; a call still unresolved halts the run, unless its
// tool is safe to replay (Options.SafeToReplay).
package agentgo
