package agent_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

const ttl = 300 * time.Millisecond

func newRecorder(t *testing.T, s store.Log, session, agentName string, opts agent.RecorderOptions) *agent.Recorder {
	t.Helper()
	rec, err := agent.NewRecorder(s, session, agentName, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func start(t *testing.T, rec *agent.Recorder, opts agent.RunOptions) *agent.Run {
	t.Helper()
	run, err := rec.Start(testContext(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func TestRequestIsCommittedBeforeTheCall(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
		var seen []string
		var open []string
		var hits int
		err := rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(ctx context.Context, run *agent.Run) error {
			if _, err := run.Message(ctx, "looking"); err != nil {
				return err
			}
			var err error
			hits, err = agent.Call(ctx, run, "search", map[string]any{"q": "x"}, func(ctx context.Context) (int, error) {
				// Observed from inside the tool: its request is in the ledger, its attempt open.
				seen = kinds(t, s, "s", "run-r1")
				open = openAttemptIDs(t, s, "s")
				return 3, nil
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if hits != 3 {
			t.Errorf("the call returned %d, want 3", hits)
		}
		if want := []string{"run.started", "message", "tool_call"}; !slices.Equal(seen, want) {
			t.Errorf("while the tool ran the stream held %v, want %v", seen, want)
		}
		if want := []string{"r1/c1#1"}; !slices.Equal(open, want) {
			t.Errorf("while the tool ran the open attempts were %v, want %v", open, want)
		}
		want := []string{"run.started", "message", "tool_call", "tool_result", "run.finished"}
		if got := kinds(t, s, "s", "run-r1"); !slices.Equal(got, want) {
			t.Errorf("the run wrote %v, want %v", got, want)
		}
		events := readStream(t, s, "s", "run-r1")
		result := events[3].Fields
		if result["status"] != "ok" || result["result"] != int64(3) || result["attempt_id"] != "r1/c1#1" ||
			!reflect.DeepEqual(result["parents"], []any{events[2].EventID()}) {
			t.Errorf("the tool_result is %v", result)
		}
		capabilities := events[0].Fields["capabilities"].(map[string]any)
		if capabilities["request_before_call"] != "strict" || capabilities["profile"] != agent.Profile {
			t.Errorf("the run.started's capabilities are %v", capabilities)
		}
		if open := openAttemptIDs(t, s, "s"); len(open) != 0 {
			t.Errorf("attempts left open: %v", open)
		}
		// The lease is released: the run id is free at once.
		start(t, rec, agent.RunOptions{RunID: "r1", Resume: true}).Finish(ctx, nil)
	})
}

type Refusal struct{ reason string }

func (e *Refusal) Error() string { return e.reason }

func TestAFailingToolRecordsItsErrorAndTheRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
		err := rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(ctx context.Context, run *agent.Run) error {
			_, err := run.Call(ctx, "boom", nil, func(context.Context) (any, error) {
				return nil, &Refusal{"bad"}
			})
			return err
		})
		var got *Refusal
		if !errors.As(err, &got) {
			t.Fatalf("the run returned %v, want the tool's error", err)
		}
		events := readStream(t, s, "s", "run-r1")
		if r := events[2].Fields; r["status"] != "error" ||
			!reflect.DeepEqual(r["result"], map[string]any{"error": "Refusal", "message": "bad"}) {
			t.Errorf("the tool_result is %v", r)
		}
		if f := events[3].Fields; f["kind"] != "run.finished" || f["status"] != "error" || f["error"] != "Refusal: bad" {
			t.Errorf("the run.finished is %v", f)
		}
	})
}

func TestARunIDUsedAgainIsAnotherIncarnation(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
		first := start(t, rec, agent.RunOptions{RunID: "r1"})
		if _, err := first.Message(ctx, "hello"); err != nil {
			t.Fatal(err)
		}
		if err := first.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if first.Incarnation() != 1 || first.LeaseLost() {
			t.Fatalf("the first run: incarnation %d, lease lost %v", first.Incarnation(), first.LeaseLost())
		}
		second := start(t, rec, agent.RunOptions{RunID: "r1"})
		second.Drop()
		// Its run.started is the stream's fourth event: started, message, finished, started.
		if second.Incarnation() != 4 || !second.LeaseLost() {
			t.Fatalf("the second run: incarnation %d, lease lost %v", second.Incarnation(), second.LeaseLost())
		}
	})
}

func TestAReplayedCallNamesTheAttemptItsValueIsFrom(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
		crashed := start(t, rec, agent.RunOptions{RunID: "r1"})
		if _, err := crashed.Call(ctx, "read", nil, func(context.Context) (any, error) { return "contents", nil }); err != nil {
			t.Fatal(err)
		}
		crashed.Drop()
		resumed := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true, LeaseWait: 10 * time.Second})
		begun, err := resumed.BeginCall(ctx, "read", nil)
		if err != nil {
			t.Fatal(err)
		}
		call := readStream(t, s, "s", "run-r1")[1]
		want := agent.Attempt{Tool: "read", AttemptID: "r1/c1#1", StepID: "r1/c1", CallID: call.EventID()}
		if !begun.Replayed || begun.Value != "contents" || !reflect.DeepEqual(begun.Attempt, want) {
			t.Errorf("begun %+v, want the recorded value of %+v", begun, want)
		}
	})
}

func TestAResumedRunReturnsRecordedResultsAndStopsAtAnUnresolvedCall(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
		crashed := start(t, rec, agent.RunOptions{RunID: "r1"})
		if _, err := crashed.Call(ctx, "read", map[string]any{"path": "a"}, func(context.Context) (any, error) {
			return "contents", nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := crashed.BeginCall(ctx, "deploy", map[string]any{"env": "prod"}); err != nil {
			t.Fatal(err)
		}
		crashed.Drop() // the process dies inside the tool
		if open := openAttemptIDs(t, s, "s"); !slices.Equal(open, []string{"r1/c2#1"}) {
			t.Fatalf("open attempts %v, want [r1/c2#1]", open)
		}

		calls := 0
		resumed := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true, LeaseWait: 10 * time.Second})
		value, err := agent.Call(ctx, resumed, "read", map[string]any{"path": "a"}, func(context.Context) (string, error) {
			calls++
			return "again", nil
		})
		if err != nil || value != "contents" {
			t.Errorf("the replayed read returned %q, %v; want the recorded \"contents\"", value, err)
		}
		_, err = resumed.Call(ctx, "deploy", map[string]any{"env": "prod"}, func(context.Context) (any, error) {
			calls++
			return nil, nil
		})
		var unresolved *agent.UnresolvedAttemptError
		if !errors.As(err, &unresolved) || unresolved.AttemptID != "r1/c2#1" || unresolved.Tool != "deploy" {
			t.Errorf("the deploy returned %v, want an UnresolvedAttemptError of r1/c2#1", err)
		}
		if !errors.Is(err, agent.ErrUnresolvedAttempt) || !errors.Is(err, model.ErrLedger) || agent.Name(err) != "UnresolvedAttempt" {
			t.Errorf("%v is not of kind UnresolvedAttempt", err)
		}
		if calls != 0 {
			t.Errorf("a resumed run called %d tools again", calls)
		}
		if err := resumed.Finish(ctx, err); err != nil {
			t.Fatal(err)
		}
		// Nothing was called, so nothing was requested: the attempt is still the one open.
		if open := openAttemptIDs(t, s, "s"); !slices.Equal(open, []string{"r1/c2#1"}) {
			t.Errorf("open attempts %v, want [r1/c2#1]", open)
		}
	})
}

func TestAResolvedCallGivesTheResumedRunItsOutcome(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
		for i, runID := range []string{"ok", "unknown"} {
			crashed := start(t, rec, agent.RunOptions{RunID: runID})
			if _, err := crashed.BeginCall(ctx, "deploy", map[string]any{"env": "prod"}); err != nil {
				t.Fatal(err)
			}
			crashed.Drop()
			attempt := runID + "/c1#1"
			if i == 0 {
				resolve(t, s, "s", attempt, "ok", map[string]any{"deployed": true})
			} else {
				resolve(t, s, "s", attempt, "error", map[string]any{"outcome": "unknown", "resolved_by": "operator"})
			}
			resumed := start(t, rec, agent.RunOptions{RunID: runID, Resume: true, LeaseWait: 10 * time.Second})
			type deployed struct {
				Deployed bool `json:"deployed"`
			}
			got, err := agent.Call(ctx, resumed, "deploy", map[string]any{"env": "prod"}, func(context.Context) (deployed, error) {
				t.Error("the resolved call ran again")
				return deployed{}, nil
			})
			if i == 0 && (err != nil || !got.Deployed) {
				t.Errorf("the resolved call returned %+v, %v; want the resolution's {deployed: true}", got, err)
			}
			var failed *agent.ToolFailedError
			if i == 1 && (!errors.As(err, &failed) || failed.AttemptID != attempt ||
				!reflect.DeepEqual(failed.Result, map[string]any{"outcome": "unknown", "resolved_by": "operator"})) {
				t.Errorf("the call resolved as unknown returned %v, want a ToolFailedError with the resolution", err)
			}
			if err := resumed.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		if open := openAttemptIDs(t, s, "s"); len(open) != 0 {
			t.Errorf("attempts left open: %v", open)
		}
	})
}

func TestAToolSafeToReplayRunsAgainAfterItsAttemptIsClosed(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
		crashed := start(t, rec, agent.RunOptions{RunID: "r1"})
		if _, err := crashed.BeginCall(ctx, "fetch", nil, agent.SafeToReplay()); err != nil {
			t.Fatal(err)
		}
		crashed.Drop()
		resumed := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true, LeaseWait: 10 * time.Second})
		value, err := agent.Call(ctx, resumed, "fetch", nil, func(context.Context) (string, error) {
			return "fresh", nil
		}, agent.SafeToReplay())
		if err != nil || value != "fresh" {
			t.Fatalf("the replayed tool returned %q, %v", value, err)
		}
		if err := resumed.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		var results [][2]any
		for _, e := range readStream(t, s, "s", "run-r1") {
			if e.Type() == model.TypeToolResult {
				results = append(results, [2]any{e.Fields["attempt_id"], e.Fields["status"]})
			}
		}
		if want := [][2]any{{"r1/c1#1", "error"}, {"r1/c1#2", "ok"}}; !reflect.DeepEqual(results, want) {
			t.Errorf("results %v, want %v", results, want)
		}
		if !agent.IsAbandoned(readStream(t, s, "s", "run-r1")[4]) {
			t.Error("the first attempt was not closed as abandoned")
		}
		if open := openAttemptIDs(t, s, "s"); len(open) != 0 {
			t.Errorf("attempts left open: %v", open)
		}
	})
}

func TestARecordedErrorIsReturnedAgainOnResume(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
		_ = rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(ctx context.Context, run *agent.Run) error {
			_, err := run.Call(ctx, "t", nil, func(context.Context) (any, error) { return nil, errors.New("no") })
			return err
		})
		resumed := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true})
		_, err := resumed.Call(ctx, "t", nil, func(context.Context) (any, error) { return "yes", nil })
		if !errors.Is(err, agent.ErrToolFailed) {
			t.Errorf("the resumed call returned %v, want ToolFailed", err)
		}
		var failed *agent.ToolFailedError
		if !errors.As(err, &failed) || !reflect.DeepEqual(failed.Result, map[string]any{"error": "Error", "message": "no"}) {
			t.Errorf("the ToolFailed carries %+v", failed)
		}
		_ = resumed.Finish(ctx, nil)
	})
}

func TestALiveRunsLeaseKeepsASecondProcessOut(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		lease := time.Second
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: lease})
		live := start(t, rec, agent.RunOptions{RunID: "r1"})
		time.Sleep(lease + lease/2) // renewed meanwhile
		_, err := rec.Start(ctx, agent.RunOptions{RunID: "r1", Resume: true})
		if !errors.Is(err, agent.ErrRunHeld) {
			t.Errorf("a second start of a live run returned %v, want RunHeld", err)
		}
		if _, err := live.Message(ctx, "still mine"); err != nil {
			t.Errorf("the live run could not write: %v", err)
		}
		if err := live.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		start(t, rec, agent.RunOptions{RunID: "r1", Resume: true}).Finish(ctx, nil)
	})
}

func TestARunThatLostItsLeaseWritesNoMore(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
	run := start(t, rec, agent.RunOptions{RunID: "r1"})
	run.Drop()
	_, err := run.Message(ctx, "too late")
	if !errors.Is(err, agent.ErrLeaseLost) {
		t.Errorf("a write after the lease was lost returned %v, want LeaseLost", err)
	}
	_, err = run.Call(ctx, "t", nil, func(context.Context) (any, error) {
		t.Error("the tool ran without its request")
		return nil, nil
	})
	if !errors.Is(err, agent.ErrRequestNotRecorded) || !errors.Is(err, agent.ErrLeaseLost) {
		t.Errorf("a call after the lease was lost returned %v, want RequestNotRecorded of LeaseLost", err)
	}
}

func TestARequestThatCannotBeRecordedStopsTheCall(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
		run := start(t, rec, agent.RunOptions{RunID: "r1"})
		defer run.Finish(ctx, nil)
		appendOne(t, s, streamID(t, "s", "run-r1"), "someone-else", msg("x", "in between"))
		_, err := run.Call(ctx, "t", nil, func(context.Context) (any, error) {
			t.Error("the tool ran without its request")
			return nil, nil
		})
		if !errors.Is(err, agent.ErrRequestNotRecorded) || !errors.Is(err, model.ErrVersionConflict) {
			t.Errorf("the call returned %v, want RequestNotRecorded of a VersionConflict", err)
		}
	})
}

func TestAResumeThatFindsLessThanAcknowledgedIsRefused(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
	run := start(t, rec, agent.RunOptions{RunID: "r1"})
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err := rec.Start(ctx, agent.RunOptions{RunID: "r1", Resume: true, Acknowledged: run.Version() + 5})
	var rewound *model.VersionConflictError
	if !errors.Is(err, model.ErrHistoryRewound) || !errors.As(err, &rewound) || rewound.Actual != 2 || rewound.Expected != 7 {
		t.Errorf("the resume returned %v, want HistoryRewound 7 -> 2", err)
	}
	// Refused before it wrote, and its lease let go.
	start(t, rec, agent.RunOptions{RunID: "r1", Resume: true}).Finish(ctx, nil)
}

func TestSnapshotsAndTheEventsAfterTheNewestRebuildALoop(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "loop", agent.RecorderOptions{})
		run := start(t, rec, agent.RunOptions{RunID: "r1"})
		defer run.Finish(ctx, nil)
		said(t)(run.Message(ctx, "one"))
		if err := run.Snapshot(ctx, map[string]any{"step": 1, "notes": []any{"one"}}); err != nil {
			t.Fatal(err)
		}
		said(t)(run.Message(ctx, "two"))
		if _, err := run.Call(ctx, "t", map[string]any{"n": 2}, func(context.Context) (any, error) { return 4, nil }); err != nil {
			t.Fatal(err)
		}
		recovery, err := rec.Recover(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]any{"step": int64(1), "notes": []any{"one"}}; !reflect.DeepEqual(recovery.State, want) {
			t.Errorf("recovered state %v, want %v", recovery.State, want)
		}
		var types []string
		for _, e := range recovery.Events {
			types = append(types, e.Type())
		}
		if want := []string{"message", "tool_call", "tool_result"}; !slices.Equal(types, want) {
			t.Errorf("recovered events %v, want %v", types, want)
		}
	})
}

// said returns a check of what Message, Mutate and Say return: the test fails at an error.
func said(t *testing.T) func(string, error) string {
	return func(id string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
}

func TestAResumedRunSaysAgainOnlyWhatItDidNotSay(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
	crashed := start(t, rec, agent.RunOptions{RunID: "r1"})
	first := said(t)(crashed.Mutate(ctx, "plan.set", map[string]any{"steps": 3}))
	crashed.Drop()
	resumed := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true, LeaseWait: 10 * time.Second})
	again := said(t)(resumed.Mutate(ctx, "plan.set", map[string]any{"steps": int8(3)}))
	if again != first {
		t.Errorf("the replayed mutation has event id %s, want the recorded %s", again, first)
	}
	said(t)(resumed.Message(ctx, "new"))
	if err := resumed.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"run.started", "plan.set", "run.resumed", "message", "run.finished"}
	if got := kinds(t, s, "s", "run-r1"); !slices.Equal(got, want) {
		t.Errorf("the run wrote %v, want %v", got, want)
	}
}

func TestAModelCallIsRecordedWithItsTokensAndReplayed(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: ttl})
		crashed := start(t, rec, agent.RunOptions{RunID: "r1"})
		reply := agent.ModelReply{Output: "hello", FinishReason: "stop", CostUSD: 0.5,
			Usage: agent.Usage{InputTokens: 120, OutputTokens: 7, CachedTokens: 100}}
		got, err := crashed.CallModel(ctx, "m1", map[string]any{"temperature": 0.5}, func(context.Context) (agent.ModelReply, error) {
			return reply, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reply.Model = "m1"
		if !reflect.DeepEqual(got, reply) {
			t.Errorf("the call returned %+v, want %+v", got, reply)
		}
		crashed.Drop()
		events := readStream(t, s, "s", "run-r1")
		call, result := events[1].Fields, events[2].Fields
		if call["tool"] != "model" || !reflect.DeepEqual(call["args"], map[string]any{"model": "m1", "temperature": 0.5}) {
			t.Errorf("the model call's request is %v", call)
		}
		wantResult := map[string]any{"model": "m1", "finish_reason": "stop", "cost_usd": 0.5, "output": "hello",
			"usage": map[string]any{"input_tokens": int64(120), "output_tokens": int64(7), "total_tokens": int64(127),
				"input_token_details": map[string]any{"cache_read": int64(100)}}}
		if !reflect.DeepEqual(result["result"], wantResult) {
			t.Errorf("the model call's result is %v, want %v", result["result"], wantResult)
		}
		resumed := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true, LeaseWait: 10 * time.Second})
		again, err := resumed.CallModel(ctx, "m1", map[string]any{"temperature": 0.5}, func(context.Context) (agent.ModelReply, error) {
			t.Error("the model was called again")
			return agent.ModelReply{}, nil
		})
		if err != nil || !reflect.DeepEqual(again, reply) {
			t.Errorf("the resumed model call returned %+v, %v; want %+v", again, err, reply)
		}
		_ = resumed.Finish(ctx, nil)
	})
}

func TestADelegationLinksTheChildRunToItsCall(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		parent := start(t, newRecorder(t, s, "s", "lead", agent.RecorderOptions{}), agent.RunOptions{RunID: "p"})
		d, err := parent.Delegate(ctx, "coder", "write it", "")
		if err != nil {
			t.Fatal(err)
		}
		child := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
		err = child.Run(ctx, agent.RunOptions{RunID: d.ChildRunID, Parents: []string{d.CallEventID}}, func(ctx context.Context, run *agent.Run) error {
			_, err := run.Message(ctx, "done")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := parent.FinishDelegation(ctx, d, agent.StatusOK, map[string]any{"written": true}); err != nil {
			t.Fatal(err)
		}
		if err := parent.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		started := readStream(t, s, "s", "run-"+d.ChildRunID)[0]
		if !reflect.DeepEqual(started.Fields["parents"], []any{d.CallEventID}) {
			t.Errorf("the child's run.started has parents %v, want [%s]", started.Fields["parents"], d.CallEventID)
		}
		if open := openAttemptIDs(t, s, "s"); len(open) != 0 {
			t.Errorf("attempts left open: %v", open)
		}
	})
}

func TestATelemetryRecorderGoesOnWhenWritesFail(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{Telemetry: true})
	if c := rec.Capabilities(); c.Recovery != agent.Unsupported || c.RequestBeforeCall != agent.BestEffort {
		t.Errorf("a telemetry recorder claims %+v", c)
	}
	if _, err := rec.Start(ctx, agent.RunOptions{Resume: true}); !errors.Is(err, model.ErrInvalidInput) {
		t.Errorf("a telemetry recorder resumed: %v", err)
	}
	run := start(t, rec, agent.RunOptions{RunID: "r1"})
	appendOne(t, s, streamID(t, "s", "run-r1"), "someone-else", msg("x", "in between"))
	ran := false
	if _, err := run.Call(ctx, "t", nil, func(context.Context) (any, error) { ran = true; return 1, nil }); err != nil {
		t.Errorf("a telemetry call whose writes fail returned %v", err)
	}
	if !ran {
		t.Error("the tool did not run")
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Errorf("Finish returned %v", err)
	}
}

func TestAStoreWithoutLeasesIsRefused(t *testing.T) {
	_, err := agent.NewRecorder(logOnly{memory.New()}, "s", "coder", agent.RecorderOptions{})
	if !errors.Is(err, model.ErrUnsupported) {
		t.Fatalf("NewRecorder returned %v, want Unsupported", err)
	}
	if want := "this store (memory) has no leases and open attempts: it has log"; err.Error() != want {
		t.Errorf("the refusal says %q, want %q", err, want)
	}
}

func TestAPanicInARunIsRecordedAndRaisedAgain(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("the panic came out as %v, want boom", p)
			}
		}()
		_ = rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(context.Context, *agent.Run) error { panic("boom") })
	}()
	events := readStream(t, s, "s", "run-r1")
	if f := events[len(events)-1].Fields; f["kind"] != "run.finished" || f["status"] != "error" || f["error"] != "Error: panic: boom" {
		t.Errorf("the run.finished is %v", f)
	}
	// Its lease was let go.
	start(t, rec, agent.RunOptions{RunID: "r1", Resume: true}).Finish(ctx, nil)
}

func TestARunEndedByItsContextStillRecordsTheCallsOutcomeAndItsEnd(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx, cancel := context.WithCancel(testContext(t))
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{})
		err := rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(ctx context.Context, run *agent.Run) error {
			_, err := run.Call(ctx, "slow", nil, func(ctx context.Context) (any, error) {
				cancel() // the caller gives up while the tool runs, and the tool returns on it
				<-ctx.Done()
				return nil, ctx.Err()
			})
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the run returned %v, want context.Canceled", err)
		}
		got := kinds(t, s, "s", "run-r1")
		want := []string{"run.started", "tool_call", "tool_result", "run.finished"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the run's stream holds %v, want %v", got, want)
		}
		if open := openAttemptIDs(t, s, "s"); len(open) != 0 {
			t.Fatalf("the call's attempt is still open: %v", open)
		}
	})
}

func TestAWriteOfARunWhoseLeaseIsOverIsRefused(t *testing.T) {
	cases := []struct {
		name string
		// over ends the run's holding as its TTL would while its process is stopped, and does
		// what another process may do meanwhile: the run's new holder, if it started.
		over func(t *testing.T, s store.EventStore, rec *agent.Recorder, run *agent.Run) *agent.Run
		// current is the lease's token once it is over, given the run's.
		current func(mine int64) int64
	}{
		{"expired", func(t *testing.T, s store.EventStore, _ *agent.Recorder, run *agent.Run) *agent.Run {
			release(t, s, run.LeaseName(), run.Fence().Owner)
			return nil
		}, func(mine int64) int64 { return mine }},
		{"taken over, nothing written yet", func(t *testing.T, s store.EventStore, _ *agent.Recorder, run *agent.Run) *agent.Run {
			release(t, s, run.LeaseName(), run.Fence().Owner)
			if token, err := s.Lease(testContext(t), store.Acquire, "s", run.LeaseName(), "another", time.Minute); err != nil || token <= run.Fence().Token {
				t.Fatalf("another process took the lease with token %d (%v)", token, err)
			}
			return nil
		}, func(mine int64) int64 { return mine + 1 }},
		{"taken over and written", func(t *testing.T, s store.EventStore, rec *agent.Recorder, run *agent.Run) *agent.Run {
			release(t, s, run.LeaseName(), run.Fence().Owner)
			// The new holder's run.resumed takes the append_id of the old one's next write.
			return start(t, rec, agent.RunOptions{RunID: run.ID(), Resume: true})
		}, func(mine int64) int64 { return mine + 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.EventStore) {
				// Given a run whose renewals cannot save it (a minute apart), its lease over
				ctx := testContext(t)
				rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: time.Minute})
				zombie := start(t, rec, agent.RunOptions{RunID: "r1"})
				said(t)(zombie.Message(ctx, "one"))
				heir := c.over(t, s, rec, zombie)
				before := kinds(t, s, "s", "run-r1")

				// When it writes, Then the store refuses it as a lost lease, not as a conflict to retry
				_, err := zombie.Message(ctx, "zombie")
				var lost *model.LeaseLostError
				if !errors.Is(err, agent.ErrLeaseLost) || !errors.Is(err, model.ErrRefused) || !errors.As(err, &lost) {
					t.Fatalf("the write after the lease was over returned %v, want the store's LeaseLost", err)
				}
				if mine := zombie.Fence(); lost.Fence != mine || lost.Token != c.current(mine.Token) {
					t.Errorf("the refusal names %+v and token %d; the run held %+v", lost.Fence, lost.Token, mine)
				}
				// And the run is lost: nothing more is written, its tools do not run, no run.finished
				if !zombie.LeaseLost() {
					t.Error("the run does not know it lost its lease")
				}
				_, err = zombie.Call(ctx, "deploy", nil, func(context.Context) (any, error) {
					t.Error("the tool ran without its request")
					return nil, nil
				})
				if !errors.Is(err, agent.ErrRequestNotRecorded) || !errors.Is(err, agent.ErrLeaseLost) {
					t.Errorf("a call after the refusal returned %v, want RequestNotRecorded of LeaseLost", err)
				}
				if err := zombie.Snapshot(ctx, map[string]any{"n": 1}); !errors.Is(err, agent.ErrLeaseLost) {
					t.Errorf("a snapshot after the refusal returned %v", err)
				}
				if err := zombie.Finish(ctx, nil); !errors.Is(err, agent.ErrLeaseLost) {
					t.Errorf("Finish of a lost run returned %v, want LeaseLost: its end was not recorded", err)
				}
				if got := kinds(t, s, "s", "run-r1"); !slices.Equal(got, before) {
					t.Fatalf("the stream holds %v, want %v: nothing of the lost run's", got, before)
				}
				if n := len(readStream(t, s, "s", "native-r1")); n != 0 {
					t.Fatalf("the lost run's snapshot landed: %d", n)
				}
				// And whoever holds the run next writes on
				if heir == nil {
					// (Another process that took the lease and wrote nothing lets it go first.)
					if _, err := s.Lease(ctx, store.Release, "s", zombie.LeaseName(), "another", 0); err != nil {
						t.Fatal(err)
					}
					heir = start(t, rec, agent.RunOptions{RunID: "r1", Resume: true})
				}
				said(t)(heir.Message(ctx, "two"))
				if err := heir.Finish(ctx, nil); err != nil {
					t.Fatal(err)
				}
				want := []string{"run.started", "message", "run.resumed", "message", "run.finished"}
				if got := kinds(t, s, "s", "run-r1"); !slices.Equal(got, want) {
					t.Errorf("the stream holds %v, want %v", got, want)
				}
			})
		})
	}
}

func TestAConflictWhileTheLeaseIsHeldIsAConflict(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		// Given a run holding its lease, and another writer's append at its next append_id
		ctx := testContext(t)
		rec := newRecorder(t, s, "s", "coder", agent.RecorderOptions{LeaseTTL: time.Minute})
		run := start(t, rec, agent.RunOptions{RunID: "r1"})
		defer run.Finish(ctx, nil)
		stream := streamID(t, "s", "run-r1")
		if _, err := s.Append(ctx, stream, 1, "r1:2", []model.Event{msg("x", "in between")}); err != nil {
			t.Fatal(err)
		}
		// When the run writes, Then that is the conflict it is, and the run still holds its lease
		_, err := run.Message(ctx, "mine")
		if !errors.Is(err, model.ErrIdempotencyConflict) || errors.Is(err, agent.ErrLeaseLost) || run.LeaseLost() {
			t.Fatalf("the write returned %v (lease lost: %v), want an IdempotencyConflict", err, run.LeaseLost())
		}
	})
}

// release lets owner's holding of the lease name of the session s go, as its TTL would.
func release(t *testing.T, s store.EventStore, name, owner string) {
	t.Helper()
	released, err := s.Lease(testContext(t), store.Release, "s", name, owner, 0)
	if err != nil || released != 1 {
		t.Fatalf("release of %s by %s: %d, %v", name, owner, released, err)
	}
}
