// Package agent is what an agent loop uses to take part in a session: a Tailer, to follow it
// (its last-N context, then every new event at least once through a consumer group), and a
// Recorder, to record its own work (runs, tool and model calls, messages, state, delegation)
// with the guarantees the reconciler relies on: a call's request is committed before the call
// runs, and a run resumed after a crash returns what was recorded instead of calling again.
//
// Both write and read exactly what the Python package's tailer and recorder do, on the same
// streams and consumer groups: a Go run can be reconciled, resolved (`ledger-bus resolve`) and
// resumed like a Python one, and consumers in either language can share one group.
//
// A minimal recorded loop:
//
//	rec, err := agent.NewRecorder(s, "task-42", "coder", agent.RecorderOptions{})
//	if err != nil {
//		return err
//	}
//	err = rec.Run(ctx, agent.RunOptions{RunID: "r1", Resume: resuming}, func(ctx context.Context, run *agent.Run) error {
//		hits, err := agent.Call(ctx, run, "search", map[string]any{"q": "x"},
//			func(ctx context.Context) (int, error) { return search(ctx, "x") })
//		if err != nil {
//			return err
//		}
//		_, err = run.Message(ctx, fmt.Sprintf("%d hits", hits))
//		return err
//	})
package agent
