// Package model is what every ledger-bus store and client shares: events and their
// validation, the canonical content and digest of an append, generated event ids, cursors,
// the msgpack payloads stored for events (with large fields kept apart as artifacts), the
// notes of the open-attempts bookkeeping, durability levels, and the errors every call may
// return.
//
// Everything here agrees byte for byte with the Python package and the TypeScript SDK, as
// spec/ledger-v1.md sets it: the same events give the same digests and event ids in every
// language, and each language reads the payloads the others write.
//
// An append is prepared once, whatever the store:
//
//	stream, err := model.NewStreamID("session-1", "run-a")
//	...
//	prepared, err := model.PrepareAppend(stream, "append-1", []model.Event{
//		model.Message("planner", "on it"),
//		model.ToolCall("planner", "search", "step-1#1", map[string]any{"q": "redis"}),
//	}, model.DefaultLimits())
//
// An invalid event is an *InvalidEventError naming the event's index and the field at fault;
// errors.Is(err, model.ErrInvalidEvent) holds for it.
package model
