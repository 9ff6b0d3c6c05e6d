package agent_test

import (
	"context"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// A tool gets its call from the context Call gives it: the same idempotency key the Python and
// TypeScript recorders derive for that step (conformance/idempotency_keys.json), recorded on
// its tool_call; a context outside a call carries none.
func TestAToolGetsItsCallAndItsKeyFromItsContext(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		if _, ok := agent.CallFrom(ctx); ok {
			t.Fatal("a context outside a call carries one")
		}
		rec := newRecorder(t, s, "pay", "payer", agent.RecorderOptions{LeaseTTL: ttl})
		run := start(t, rec, agent.RunOptions{RunID: "r1"})
		var got agent.CurrentCall
		_, err := run.Call(ctx, "charge", map[string]any{"amount": 5}, func(ctx context.Context) (any, error) {
			call, ok := agent.CallFrom(ctx)
			if !ok {
				t.Error("the tool's context carries no call")
			}
			got = call
			return "ok", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := model.IdempotencyKey("pay", "r1", "r1/c1", 1)
		if got.IdempotencyKey != want || got.Tool != "charge" || got.StepID != "r1/c1" || got.AttemptID != "r1/c1#1" || got.SessionID != "pay" || got.RunID != "r1" {
			t.Errorf("the call %+v, want key %s", got, want)
		}
		request := readStream(t, s, "pay", "run-r1")[1]
		if request.Fields["idempotency_key"] != want {
			t.Errorf("the tool_call records key %v, want %s", request.Fields["idempotency_key"], want)
		}
	})
}
