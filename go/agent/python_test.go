package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

// ValueError is the error the scenario's failing tool returns: named as the Python
// scenario's exception, so that both record {"error": "ValueError", ...}.
type ValueError struct{ msg string }

func (e *ValueError) Error() string { return e.msg }

// TestSameEventsAsPython makes, in Go, the calls testdata/python_recorder.py makes with the
// Python recorder (calls ok and failing, a tool safe to replay, a mutation, a snapshot, a
// delegation, a model call, crashes and resumes, an operator's resolution, a run id used
// again) and compares what each wrote, event by event: types, fields, values and their JSON
// types, streams, versions, event ids and parents; only the commit times differ.
func TestSameEventsAsPython(t *testing.T) {
	py := python(t)
	cmd := exec.CommandContext(testContext(t), py, "testdata/python_recorder.py")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the Python scenario failed: %v\n%s", err, stderr.String())
	}
	want := strings.Split(strings.TrimSpace(string(out)), "\n")

	s := memory.New(store.WithLimits(model.DefaultLimits()))
	goScenario(t, s)
	events, err := s.ScanSession(testContext(t), "shapes", store.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, event := range events {
		got = append(got, pythonLine(t, event))
	}
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = masked(got[i])
		}
		if i < len(want) {
			w = masked(want[i])
		}
		if g != w {
			t.Errorf("event %d differs:\n go:     %s\n python: %s", i, g, w)
		}
	}
}

// masked leaves out the event id of an operator's resolution: its append_id names the
// cursor of the call, which only the clock decides.
func masked(line string) string {
	if !strings.Contains(line, `"agent":"operator"`) {
		return line
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		return line
	}
	fields["event_id"] = json.RawMessage(`"(derived from the call's cursor)"`)
	text, _ := json.Marshal(fields)
	return string(text)
}

// pythonLine is an event as the Python scenario prints it: its line (section 3.8) without
// cursor and commit time, keys sorted, numbers as written (2.0 a float, 2 an integer).
func pythonLine(t *testing.T, event model.RecordedEvent) string {
	t.Helper()
	line, err := event.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	decoder := json.NewDecoder(bytes.NewReader(line))
	decoder.UseNumber()
	var fields map[string]any
	if err := decoder.Decode(&fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "cursor")
	delete(fields, "recorded_at")
	var buf bytes.Buffer
	encoder := json.NewEncoder(&buf)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(fields); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(buf.String())
}

// goScenario is testdata/python_recorder.py's main, in Go.
func goScenario(t *testing.T, s *memory.Store) {
	ctx := testContext(t)
	opts := agent.RecorderOptions{LeaseTTL: ttl, Profile: "plain-python-loop"}
	rec := newRecorder(t, s, "shapes", "coder", opts)
	wait := 5 * time.Second
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	check(rec.Run(ctx, agent.RunOptions{RunID: "r1", Parents: []string{"p-1"}, Fields: map[string]any{"task": "demo"}},
		func(ctx context.Context, run *agent.Run) error {
			said(t)(run.Message(ctx, "looking"))
			_, err := run.Call(ctx, "search", map[string]any{"q": "x", "n": 2}, func(context.Context) (any, error) {
				return map[string]any{"hits": []any{1, 2.5}, "q": "x"}, nil
			})
			check(err)
			_, err = agent.Call(ctx, run, "fetch", nil, func(context.Context) (string, error) { return "page", nil },
				agent.SafeToReplay())
			check(err)
			said(t)(run.Mutate(ctx, "plan.set", map[string]any{"steps": 3, "note": nil}))
			_, err = run.Call(ctx, "boom", map[string]any{"why": "test"}, func(context.Context) (any, error) {
				return nil, &ValueError{"bad"}
			})
			var failed *ValueError
			if !errors.As(err, &failed) {
				t.Fatalf("the failing call returned %v", err)
			}
			check(run.Snapshot(ctx, map[string]any{"step": 4, "ratio": 0.5}))
			d, err := run.Delegate(ctx, "tester", "check it", "child1")
			check(err)
			tester := newRecorder(t, s, "shapes", "tester", opts)
			check(tester.Run(ctx, agent.RunOptions{RunID: d.ChildRunID, Parents: []string{d.CallEventID}},
				func(ctx context.Context, child *agent.Run) error {
					_, err := child.Message(ctx, "checked")
					return err
				}))
			check(run.FinishDelegation(ctx, d, agent.StatusOK, map[string]any{"checked": true}))
			_, err = run.CallModel(ctx, "m1", nil, func(context.Context) (agent.ModelReply, error) {
				return agent.ModelReply{Output: "hi", FinishReason: "stop", CostUSD: 0.25,
					Usage: agent.Usage{InputTokens: 12, OutputTokens: 5}}, nil
			})
			check(err)
			_, err = agent.Call(ctx, run, "lookup", map[string]any{"k": "a"}, func(context.Context) (float64, error) {
				return 1.0, nil
			}, agent.Step("lookup-a"))
			return err
		}))

	// r2 dies inside deploy; resumed, it stops there until an operator resolves the call.
	crashed := start(t, rec, agent.RunOptions{RunID: "r2"})
	_, err := crashed.Call(ctx, "read", map[string]any{"path": "a"}, func(context.Context) (any, error) { return "contents", nil })
	check(err)
	_, err = crashed.BeginCall(ctx, "deploy", map[string]any{"env": "prod"})
	check(err)
	crashed.Drop()
	resumed := func(ctx context.Context, run *agent.Run) error {
		if _, err := run.Call(ctx, "read", map[string]any{"path": "a"}, func(context.Context) (any, error) {
			return "again", nil
		}); err != nil {
			return err
		}
		_, err := run.Call(ctx, "deploy", map[string]any{"env": "prod"}, func(context.Context) (any, error) {
			return "deployed twice", nil
		})
		return err
	}
	err = rec.Run(ctx, agent.RunOptions{RunID: "r2", Resume: true, LeaseWait: wait}, resumed)
	if !errors.Is(err, agent.ErrUnresolvedAttempt) {
		t.Fatalf("the resumed run returned %v, want UnresolvedAttempt", err)
	}
	resolve(t, s, "shapes", "r2/c2#1", "ok", map[string]any{"deployed": true})
	check(rec.Run(ctx, agent.RunOptions{RunID: "r2", Resume: true, LeaseWait: wait}, resumed))

	// r3 dies inside a tool safe to replay: resumed, it closes the attempt and runs it again.
	crashed = start(t, rec, agent.RunOptions{RunID: "r3"})
	_, err = crashed.BeginCall(ctx, "warm", nil, agent.SafeToReplay())
	check(err)
	crashed.Drop()
	check(rec.Run(ctx, agent.RunOptions{RunID: "r3", Resume: true, LeaseWait: wait}, func(ctx context.Context, run *agent.Run) error {
		_, err := run.Call(ctx, "warm", nil, func(context.Context) (any, error) { return "warmed", nil }, agent.SafeToReplay())
		return err
	}))

	// r4 fails in its tool; resumed, the recorded error is returned again, the tool not run.
	var failed *ValueError
	if err := rec.Run(ctx, agent.RunOptions{RunID: "r4"}, func(ctx context.Context, run *agent.Run) error {
		_, err := run.Call(ctx, "t", nil, func(context.Context) (any, error) { return nil, &ValueError{"bad"} })
		return err
	}); !errors.As(err, &failed) {
		t.Fatalf("the failing run returned %v", err)
	}
	if err := rec.Run(ctx, agent.RunOptions{RunID: "r4", Resume: true}, func(ctx context.Context, run *agent.Run) error {
		_, err := run.Call(ctx, "t", nil, func(context.Context) (any, error) { return "yes", nil })
		return err
	}); !errors.Is(err, agent.ErrToolFailed) {
		t.Fatalf("the resumed run returned %v, want ToolFailed", err)
	}

	// r1 used again: another incarnation, whose attempt ids carry its run.started's version.
	check(rec.Run(ctx, agent.RunOptions{RunID: "r1"}, func(ctx context.Context, run *agent.Run) error {
		_, err := run.Call(ctx, "search", map[string]any{"q": "y"}, func(context.Context) (any, error) {
			return map[string]any{"hits": []any{}}, nil
		})
		return err
	}))
}

// ledgerBus runs the Python command line against the Redis server at url, as an operator does.
func ledgerBus(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), python(t), append([]string{"-m", "ledger_bus"}, args...)...)
	cmd.Env = append(cmd.Environ(), "LEDGER_BUS_URL="+url, "LEDGER_BUS_PREFIX=lb")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ledger-bus %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// TestPythonReconcilesAndResolvesAGoRun kills Go runs inside their tools on Redis, and has the
// Python reconciler flag their calls and `ledger-bus resolve` close one: the resumed Go runs
// stop at the unresolved call, return the operator's outcome once it is resolved, and replay
// the tool declared safe.
func TestPythonReconcilesAndResolvesAGoRun(t *testing.T) {
	python(t)
	ctx := testContext(t)
	server := testredis.Start(t)
	s := openRedis(t, server.URL)
	rec := newRecorder(t, s, "k", "coder", agent.RecorderOptions{LeaseTTL: ttl})

	crashed := start(t, rec, agent.RunOptions{RunID: "r1"})
	if _, err := crashed.Call(ctx, "read", map[string]any{"path": "a"}, func(context.Context) (any, error) { return "contents", nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.BeginCall(ctx, "deploy", map[string]any{"env": "prod"}); err != nil {
		t.Fatal(err)
	}
	crashed.Drop()
	warming := start(t, rec, agent.RunOptions{RunID: "r2"})
	if _, err := warming.BeginCall(ctx, "warm", nil, agent.SafeToReplay()); err != nil {
		t.Fatal(err)
	}
	warming.Drop()

	// The reconciler finds the session through the index Go's appends keep, and flags each
	// call once its run's lease is gone.
	flagged := map[string]bool{}
	for tries := 0; len(flagged) < 2 && tries < 50; tries++ {
		out, err := ledgerBus(t, server.URL, "reconcile", "--once", "--grace", "0")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			var action map[string]any
			if json.Unmarshal([]byte(line), &action) == nil && action["action"] == "flag" {
				flagged[action["attempt_id"].(string)] = action["safe_to_replay"].(bool)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := map[string]bool{"r1/c2#1": false, "r2/c1#1": true}; !reflect.DeepEqual(flagged, want) {
		t.Fatalf("the reconciler flagged %v, want %v", flagged, want)
	}

	deploy := func(ctx context.Context, run *agent.Run) (map[string]any, error) {
		if _, err := run.Call(ctx, "read", map[string]any{"path": "a"}, func(context.Context) (any, error) { return "again", nil }); err != nil {
			return nil, err
		}
		return agent.Call(ctx, run, "deploy", map[string]any{"env": "prod"}, func(context.Context) (map[string]any, error) {
			t.Error("the deploy ran again")
			return nil, nil
		})
	}
	run := start(t, rec, agent.RunOptions{RunID: "r1", Resume: true})
	if _, err := deploy(ctx, run); !errors.Is(err, agent.ErrUnresolvedAttempt) {
		t.Errorf("the resumed run returned %v, want UnresolvedAttempt", err)
	}
	_ = run.Finish(ctx, nil)

	if out, err := ledgerBus(t, server.URL, "unresolved", "k"); err != nil || !strings.Contains(out, "r1/c2#1") {
		t.Errorf("ledger-bus unresolved does not list the Go run's call: %q, %v", out, err)
	}
	if _, err := ledgerBus(t, server.URL, "resolve", "k", "r1/c2#1", "--ok", `{"deployed": true}`); err != nil {
		t.Fatal(err)
	}
	run = start(t, rec, agent.RunOptions{RunID: "r1", Resume: true})
	got, err := deploy(ctx, run)
	if err != nil || !reflect.DeepEqual(got, map[string]any{"deployed": true}) {
		t.Errorf("the resumed run got %v, %v; want the resolution {deployed: true}", got, err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}

	run = start(t, rec, agent.RunOptions{RunID: "r2", Resume: true})
	warmed, err := agent.Call(ctx, run, "warm", nil, func(context.Context) (string, error) { return "warmed", nil }, agent.SafeToReplay())
	if err != nil || warmed != "warmed" {
		t.Errorf("the safe tool's replay returned %q, %v", warmed, err)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if open := openAttemptIDs(t, s, "k"); len(open) != 0 {
		t.Errorf("attempts left open: %v", open)
	}
	if out, err := ledgerBus(t, server.URL, "unresolved", "k"); err != nil || strings.Contains(out, "r1/c2#1") {
		t.Errorf("ledger-bus unresolved still lists a call: %q, %v", out, err)
	}
}
