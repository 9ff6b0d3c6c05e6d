package main

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
)

// The same four measures as testing.B benchmarks, on a redis-server of their own:
//
//	go test -run '^$' -bench . ./internal/benchappend/
//
// Compare BenchmarkAppend1 with BenchmarkRawXAdd, and BenchmarkAppend100 with
// BenchmarkRawXAdd100, from the same run.

func setup(b *testing.B) (context.Context, *workload) {
	b.Helper()
	ctx := context.Background()
	server := testredis.Start(b)
	raw := redis.NewClient(&redis.Options{Addr: server.Addr})
	b.Cleanup(func() { _ = raw.Close() })
	ledger, err := ledgerbus.Connect(ctx, server.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ledger.Close() })
	return ctx, newWorkload(raw, ledger, "bench")
}

func BenchmarkRawXAdd(b *testing.B) {
	ctx, w := setup(b)
	for b.Loop() {
		if err := w.rawXAdd(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend1(b *testing.B) {
	ctx, w := setup(b)
	i := 0
	for b.Loop() {
		if err := w.append1(ctx, i); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkRawXAdd100(b *testing.B) {
	ctx, w := setup(b)
	for b.Loop() {
		if err := w.rawXAdd100(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend100(b *testing.B) {
	ctx, w := setup(b)
	for b.Loop() {
		if err := w.append100(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
