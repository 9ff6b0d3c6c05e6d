// Package agentgo stands in, at AgentGo's own import path (github.com/compforge/agentgo), for
// AgentGo at the version the adapter pins, v0.0.2-0.20260826112438-691b2c90c5bb (commit
// 691b2c90c5bb), while the Go module proxy refuses to serve AgentGo (and litellm, which its
// go.mod requires). The repository's go.work brings it in for the adapter's tests and
// development; no released go.mod names it, and a user's build gets AgentGo itself.
//
// It is small and written from AgentGo's source, not copied: the exported names, fields, JSON
// tags, method sets and signatures that the adapter and a user's program of the adapter's
// documentation touch, and the rules of AgentGo's loop that recovery depends on. Of AgentGo's
// source, the files it follows are (the commit each was read at in brackets; the pinned one
// where a copy at it was found, else the nearest whose declarations the pinned commit's own
// tests use):
//
//   - model_execution.go [691b2c90]: a model call's execution id is model-<turn>, its attempt
//     counted from 1, the request its messages and tools, the options its thinking level and
//     prompt cache key.
//   - state_test.go [691b2c90], agent_snapshot_test.go and snapshot.go [d83ef1c0]: BeforeRun
//     returns the AgentSnapshot a run starts from (WithBeforeRun is the restore hook at this
//     commit; WithSnapshotLoader came later), SetSnapshot refuses a running agent, a restored
//     Progress{CompletedTurns: n, NextTurn: true} makes the next turn n+1, a new prompt starts
//     from turn 1, AfterRun sees the final snapshot, the summary and the error.
//   - loop.go [08885226]: turns count from Progress.CompletedTurns; the assistant's reply is
//     committed (the message committer first) before any of its tools runs; a turn's tool
//     results are committed after the whole batch; a reply that stops with error or aborted
//     ends the run; a turn with tool calls leaves NextTurn set; a run whose progress says the
//     last turn completed and none is due ends at once.
//   - agent.go [62a56ab9] and errors.go [4b909c1a]: Prompt, Continue, HoldRuns, WaitForIdle,
//     State, SetMessages and the errors they return. That agent.go predates run progress (it
//     has no BeforeRun, and its Continue runs the unanswered calls of a committed batch); the
//     stand-in's Continue follows the pinned commit's tests and progress instead: the restore
//     hook runs first, then a conversation that ends in an assistant message goes on only when
//     the progress says a turn is due (NextTurn) or a message is queued, and is refused
//     (ErrBadContinuation) otherwise, so a reply whose tool calls have no results is not run
//     again by Continue. The adapter never leans on that rule: its restore hook takes such a
//     turn back to its start.
//   - message.go [01eb1bd2], tool.go [106928a3], execution.go, model_middleware.go,
//     options.go [08885226], model.go [13611d9f], state.go [67ff72e0]: the types, with the
//     AgentMessage interface of nine methods that state_test.go [691b2c90] implements.
//
// Left out, as the adapter does not meet them: streaming (the loop calls Generate where AgentGo
// calls GenerateStream; the middlewares see the same ModelExecution and ModelResult), events
// and Subscribe, context management and compaction, steering and follow-up messages after a
// turn, stop guards, tool gates, previews and validators, concurrent tool scheduling (tools run
// one at a time, in the reply's order), retry delays (a retryable error is retried at once),
// length recovery, the codec package, subagent and team packages, and the llm package.
// Message's Priority and Compact have the interface's shape and no behaviour of AgentGo's.
package agentgo
