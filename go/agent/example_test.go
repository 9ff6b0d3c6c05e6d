package agent_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

func ExampleCall() {
	ctx := context.Background()
	s := memory.New()
	rec, err := agent.NewRecorder(s, "task-42", "coder", agent.RecorderOptions{})
	if err != nil {
		panic(err)
	}
	err = rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(ctx context.Context, run *agent.Run) error {
		// The tool_call is committed before the function runs, the tool_result after.
		hits, err := agent.Call(ctx, run, "search", map[string]any{"q": "jwt"},
			func(ctx context.Context) (int, error) { return 3, nil })
		if err != nil {
			return err
		}
		_, err = run.Message(ctx, fmt.Sprintf("found %d", hits))
		return err
	})
	if err != nil {
		panic(err)
	}
	stream, _ := model.NewStreamID("task-42", "run-r1")
	events, _ := s.ReadStream(ctx, stream, store.ReadStreamOptions{})
	for _, e := range events {
		fmt.Println(e.Version, e.Type(), e.Fields["kind"], e.Fields["attempt_id"])
	}
	// Output:
	// 1 mutation run.started <nil>
	// 2 tool_call <nil> r1/c1#1
	// 3 tool_result <nil> r1/c1#1
	// 4 message <nil> <nil>
	// 5 mutation run.finished <nil>
}

func ExampleTailer() {
	ctx := context.Background()
	s := memory.New()
	stream, _ := model.NewStreamID("task-42", "chat")
	_, _ = s.Append(ctx, stream, 0, "a1", []model.Event{model.Message("planner", "hello")})

	tailer, err := agent.NewTailer(s, "task-42", "reviewers", "reviewer-1",
		agent.TailerOptions{Block: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	last, _ := tailer.Join(ctx, 20) // the context first: the group delivers what comes after
	fmt.Println("context:", last[0].Fields["body"])

	_, _ = s.Append(ctx, stream, 1, "a2", []model.Event{model.Message("planner", "review this")})
	_, _ = tailer.HandleBatch(ctx, func(ctx context.Context, event model.RecordedEvent) error {
		fmt.Println("new:", event.Fields["body"])
		return nil // acked: the group hands it out no more
	})
	// Output:
	// context: hello
	// new: review this
}
