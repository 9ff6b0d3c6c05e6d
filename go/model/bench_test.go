package model_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// The client's work for an append before it sends anything (validation, canonical bytes,
// digest, event ids, msgpack), with the ~300-byte tool_call every comparison uses
// (scripts/bench.py's):
//
//	go test -run '^$' -bench PrepareAppend -benchmem -cpuprofile cpu.out ./model/

func BenchmarkPrepareAppend100(b *testing.B) { benchmarkPrepareAppend(b, 100) }

func BenchmarkPrepareAppend1(b *testing.B) { benchmarkPrepareAppend(b, 1) }

func benchmarkPrepareAppend(b *testing.B, n int) {
	args := map[string]any{
		"query":   "jwt rotation policy for the auth service",
		"path":    "/srv/app/auth/tokens.py",
		"limit":   20,
		"flags":   []any{"recursive", "follow-symlinks"},
		"context": strings.Repeat("x", 120),
	}
	events := make([]model.Event, n)
	for k := range events {
		events[k] = model.Event{
			"type": "tool_call", "agent": "backend-dev", "tool": "code_search", "args": args,
			"attempt_id": fmt.Sprintf("att-%08d", k), "run_id": "run-0001",
			"step_id": fmt.Sprintf("step-%06d", k),
		}
	}
	stream := model.StreamID{Session: "bench", Name: "batch"}
	for b.Loop() {
		if _, err := model.PrepareAppend(stream, "a", events, model.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}
