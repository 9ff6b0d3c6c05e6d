// Package ledgerbus is the Go SDK of ledger-bus, a durable, append-only event log for
// multi-agent systems on Redis Streams: one shared record of a task's messages, tool and model
// calls and changes of state, with atomic, idempotent, optimistic-concurrency appends, a commit
// order across the whole session, and reads of the last N events that cost O(N) however long
// the session grows.
//
// It writes and reads the record the Python package and the TypeScript SDK do (the contract is
// spec/ledger-v1.md): the same Redis keys, the same Lua scripts, the same payloads, digests,
// event ids and cursors, so processes in any of the three languages work on one session, each
// reading what the others wrote as its own.
//
// Connect opens a store from a URL (a Redis server, cluster or Sentinel primary, or memory://
// for tests); the names most programs need are here, so one import does for the common case:
//
//	s, err := ledgerbus.Connect(ctx, "redis://127.0.0.1:6379/0")
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	stream, err := ledgerbus.NewStreamID("task-42", "planner")
//	if err != nil {
//		return err
//	}
//	result, err := s.Append(ctx, stream, 0, "plan-1", []ledgerbus.Event{
//		ledgerbus.Message("planner", "splitting the task in three"),
//	})
//	switch {
//	case errors.Is(err, ledgerbus.ErrVersionConflict):
//		// another writer got there first: read, decide, append again
//	case err != nil:
//		return err
//	}
//
// An append is idempotent by its append_id: a retry with the same events returns the original
// result, marked Deduplicated, so a writer that lost a reply retries without fear. Every error
// is of one of the kinds of spec section 4 (ErrInvalidInput, ErrVersionConflict, ...): test
// with errors.Is, and reach what an error carries with errors.As and the typed errors of
// package model.
//
// The packages below it: model (events, validation, the canonical content, cursors, errors),
// store (the capabilities a store has: Log, Attempts, Groups), store/redisstore and store/memory
// (the stores), storetest (the contract suite every store is held to), and agent (a recorder
// and a tailer for agent loops).
package ledgerbus
