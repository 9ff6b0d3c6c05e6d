package ledgerbus_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// An append, its retry, and a read back: the same on every store; memory:// needs no server.
func Example() {
	ctx := context.Background()
	s, err := ledgerbus.Connect(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer s.Close()

	stream, err := ledgerbus.NewStreamID("task-42", "planner")
	if err != nil {
		panic(err)
	}
	events := []ledgerbus.Event{
		ledgerbus.Message("planner", "splitting the task in three"),
		ledgerbus.ToolCall("planner", "search", "plan#1", map[string]any{"q": "prior art"}),
	}
	result, err := s.Append(ctx, stream, 0, "plan-1", events)
	if err != nil {
		panic(err)
	}
	fmt.Println("versions", result.FirstVersion, "to", result.LastVersion)

	// A retry after a lost reply: the same append_id and events give the original result.
	again, err := s.Append(ctx, stream, 0, "plan-1", events)
	if err != nil {
		panic(err)
	}
	fmt.Println("deduplicated:", again.Deduplicated, "same cursor:", again.Cursor == result.Cursor)

	read, err := s.ReadStream(ctx, stream, store.ReadStreamOptions{})
	if err != nil {
		panic(err)
	}
	for _, e := range read {
		fmt.Println(e.Version, e.Type(), e.Agent())
	}
	// Output:
	// versions 1 to 2
	// deduplicated: true same cursor: true
	// 1 message planner
	// 2 tool_call planner
}

// Optimistic concurrency: an append names the version it expects the stream to have.
func ExampleConnect_versionConflict() {
	ctx := context.Background()
	s, err := ledgerbus.Connect(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer s.Close()
	stream, _ := ledgerbus.NewStreamID("task-42", "board")
	if _, err := s.Append(ctx, stream, 0, "a", []ledgerbus.Event{ledgerbus.Message("w1", "mine")}); err != nil {
		panic(err)
	}
	// A second writer that read the stream empty.
	_, err = s.Append(ctx, stream, 0, "b", []ledgerbus.Event{ledgerbus.Message("w2", "no, mine")})
	var conflict *model.VersionConflictError
	if errors.As(err, &conflict) {
		fmt.Println(errors.Is(err, ledgerbus.ErrVersionConflict), "the stream is at", conflict.Actual)
	}
	fmt.Println(err)
	// Output:
	// true the stream is at 1
	// stream task-42/board: expected version 0, actual 1
}

// The session in commit order, a page at a time, across every stream.
func ExampleConnect_session() {
	ctx := context.Background()
	s, err := ledgerbus.Connect(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer s.Close()
	for i, name := range []string{"planner", "coder", "planner"} {
		stream, _ := ledgerbus.NewStreamID("task-7", name)
		event := ledgerbus.Message(name, fmt.Sprintf("step %d", i))
		if _, err := s.Append(ctx, stream, ledgerbus.AnyVersion, fmt.Sprint("m", i), []ledgerbus.Event{event}); err != nil {
			panic(err)
		}
	}
	for e, err := range s.Session(ctx, "task-7", store.IterOptions{Page: 2}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(e.Stream.Name, e.Version, e.Fields["body"])
	}
	// Output:
	// planner 1 step 0
	// coder 1 step 1
	// planner 2 step 2
}

// Fencing: appends made under a lease name the holding that drew their token, and a holder
// whose holding is over (stopped past its lease while another process took over) writes
// nothing more, whatever it had on its way.
func ExampleWithFence() {
	ctx := context.Background()
	s, err := ledgerbus.Connect(ctx, "memory://")
	if err != nil {
		panic(err)
	}
	defer s.Close()
	stream, _ := ledgerbus.NewStreamID("task-42", "board")
	token, err := s.Lease(ctx, store.Acquire, "task-42", "board-writer", "host-a", time.Minute)
	if err != nil {
		panic(err)
	}
	mine := ledgerbus.Fence{Lease: "board-writer", Owner: "host-a", Token: token}
	if _, err := s.Append(ctx, stream, 0, "a1", []ledgerbus.Event{ledgerbus.Message("a", "mine")}, ledgerbus.WithFence(mine)); err != nil {
		panic(err)
	}
	// host-a pauses past its lease; host-b takes it, drawing the next token.
	_, _ = s.Lease(ctx, store.Release, "task-42", "board-writer", "host-a", 0) // (as its TTL would)
	theirs, _ := s.Lease(ctx, store.Acquire, "task-42", "board-writer", "host-b", time.Minute)
	fmt.Println("tokens", token, theirs)

	_, err = s.Append(ctx, stream, 1, "a2", []ledgerbus.Event{ledgerbus.Message("a", "late")}, ledgerbus.WithFence(mine))
	var lost *model.LeaseLostError
	if errors.As(err, &lost) {
		fmt.Println(errors.Is(err, ledgerbus.ErrLeaseLost), "the lease is at token", lost.Token)
	}
	fmt.Println(err)
	// Output:
	// tokens 1 2
	// true the lease is at token 2
	// lease board-writer: the holding of host-a (token 1) is over, another holding took it (token 2); nothing written
}
