package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// args is the tool call's arguments every comparison uses (scripts/bench.py's).
var args = map[string]any{
	"query":   "jwt rotation policy for the auth service",
	"path":    "/srv/app/auth/tokens.py",
	"limit":   20,
	"flags":   []any{"recursive", "follow-symlinks"},
	"context": strings.Repeat("x", 120),
}

// toolCall is the ~300-byte tool_call of the i-th append.
func toolCall(i int) model.Event {
	return model.Event{
		"type":       "tool_call",
		"agent":      "backend-dev",
		"tool":       "code_search",
		"args":       args,
		"attempt_id": fmt.Sprintf("att-%08d", i),
		"run_id":     "run-0001",
		"step_id":    fmt.Sprintf("step-%06d", i),
	}
}

// payload is what a raw XADD writes: the same event, msgpack, as the ledger stores it.
func payload() []byte {
	b, err := msgpack.Marshal(map[string]any(toolCall(0)))
	if err != nil {
		panic(err) // a literal map of JSON values always encodes
	}
	return b
}

// workload is the four measures, each an operation of its own.
type workload struct {
	raw           *redis.Client
	ledger        store.Log
	single, batch model.StreamID
	version       int64
	batches       int
	payload       []byte
}

func newWorkload(raw *redis.Client, ledger store.Log, session string) *workload {
	return &workload{
		raw:     raw,
		ledger:  ledger,
		single:  model.StreamID{Session: session, Name: "single"},
		batch:   model.StreamID{Session: session, Name: "batch"},
		payload: payload(),
	}
}

// rawXAdd is one XADD round trip of the payload.
func (w *workload) rawXAdd(ctx context.Context) error {
	return w.raw.XAdd(ctx, &redis.XAddArgs{Stream: "raw:go", Values: []any{"p", w.payload}}).Err()
}

// append1 is a single-event append, each on the version the last one left.
func (w *workload) append1(ctx context.Context, i int) error {
	done, err := w.ledger.Append(ctx, w.single, w.version, fmt.Sprintf("s%d", i), []model.Event{toolCall(i)})
	w.version = done.LastVersion
	return err
}

// rawXAdd100 is 100 XADDs of the payload, pipelined in one round trip.
func (w *workload) rawXAdd100(ctx context.Context) error {
	pipe := w.raw.Pipeline()
	for range 100 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "raw:go-batch", Values: []any{"p", w.payload}})
	}
	_, err := pipe.Exec(ctx)
	return err
}

// append100 is one append of 100 events.
func (w *workload) append100(ctx context.Context) error {
	events := make([]model.Event, 100)
	for k := range events {
		events[k] = toolCall(w.batches*100 + k)
	}
	_, err := w.ledger.Append(ctx, w.batch, model.AnyVersion, fmt.Sprintf("b%d", w.batches), events)
	w.batches++
	return err
}

// rate is operations a second of op, back to back for budget, after a warm-up.
func rate(ctx context.Context, budget time.Duration, op func(i int) error) (float64, error) {
	for i := range 200 {
		if err := op(-i - 1); err != nil {
			return 0, err
		}
	}
	n, start := 0, time.Now()
	for time.Since(start) < budget {
		if err := op(n); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
