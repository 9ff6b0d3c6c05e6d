package agentgo_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

// A tool gets its call's idempotency key from its context; a call a kill left open that a
// reconciler's probe found not done (the tool_result it writes, spec/ledger-v1.md 7.2) runs
// again on resume, though not declared safe to replay, under the same key.
func TestACallAProbeFoundNotDoneRunsAgainUnderTheSameKey(t *testing.T) {
	st := memory.New()
	opts := agentgo.Options{LeaseTTL: 300 * time.Millisecond}
	f := newFixture(t, st, opts)
	inside, wait := stuck(t)
	var keys []string
	keyOf := func(ctx context.Context) {
		call, ok := agent.CallFrom(ctx)
		if !ok {
			t.Error("the tool's context carries no call")
		}
		keys = append(keys, call.IdempotencyKey)
	}
	f.deploy = func(ctx context.Context) (json.RawMessage, error) {
		keyOf(ctx)
		wait()
		return nil, errors.New("never answered")
	}
	killedAt(t, f, inside)

	settle(t, st, "r1", "deploy", "r1/tool/t1/call-2#1")
	g := newFixture(t, st, opts)
	g.deploy = func(ctx context.Context) (json.RawMessage, error) {
		keyOf(ctx)
		return json.RawMessage(`"deployed"`), nil
	}
	if _, _, err := g.resume(t); err != nil {
		t.Fatal(err)
	}
	if g.deploys.Load() != 1 || len(keys) != 2 || keys[0] != keys[1] || keys[0] == "" {
		t.Fatalf("on resume deploy ran %d times, under keys %q", g.deploys.Load(), keys)
	}
	if want := model.IdempotencyKey("s", "r1", "r1/tool/t1/call-2", 1); keys[0] != want {
		t.Fatalf("the key %s, want %s", keys[0], want)
	}
}

// settle writes what a reconciler's probe writes for a call whose effect did not take place.
func settle(t *testing.T, st *memory.Store, run, tool, attemptID string) {
	t.Helper()
	stream, err := model.NewStreamID("s", "run-"+run)
	if err != nil {
		t.Fatal(err)
	}
	event := model.Event{"type": model.TypeToolResult, "agent": "reconciler", "tool": tool, "attempt_id": attemptID,
		"status": "error", "result": map[string]any{"outcome": agent.NotDone}, "run_id": run,
		"settled_by": map[string]any{"probe": "deploys:probe", "state": "not_done", "evidence": nil,
			"at": "2026-12-06T20:00:00.000Z", "by": "reconciler"}}
	if _, err := st.Append(context.Background(), stream, model.AnyVersion, "settle:"+attemptID, []model.Event{event}); err != nil {
		t.Fatal(err)
	}
}
