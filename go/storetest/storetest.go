// Package storetest is the store contract as tests: every rule of spec/ledger-v1.md that a
// store must keep, over the interfaces of package store alone, a part per capability, so that
// any store, this module's or another, is held to the same rules as the Python package's
// stores (its ledger_bus.testing.contract).
//
// Run it from a test of the store's own package:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.EventStore {
//			s := mystore.New(...)
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// A store that has some capabilities only runs their parts: RunLog, then RunAttempts and
// RunGroups. Each test names its own sessions, new ones each run, so open may return one store
// shared by every test, as long as it is not closed before they end. The suite expects the
// store's limits to be model.DefaultLimits(), unless the store says otherwise with a method
// Limits() model.Limits.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// AttemptsStore is what RunAttempts tests: a log with leases and open attempts.
type AttemptsStore interface {
	store.Log
	store.Attempts
}

// GroupsStore is what RunGroups tests: a log with consumer groups.
type GroupsStore interface {
	store.Log
	store.Groups
}

// Run runs every part of the contract on the stores open gives: RunLog, RunAttempts and
// RunGroups, each as a subtest of its name.
func Run(t *testing.T, open func(t *testing.T) store.EventStore) {
	t.Run("Log", func(t *testing.T) {
		RunLog(t, func(t *testing.T) store.Log { return open(t) })
	})
	t.Run("Attempts", func(t *testing.T) {
		RunAttempts(t, func(t *testing.T) AttemptsStore { return open(t) })
	})
	t.Run("Groups", func(t *testing.T) {
		RunGroups(t, func(t *testing.T) GroupsStore { return open(t) })
	})
}

// test is one test of a part: its name, and what it does with the store it is given.
type test[S any] struct {
	name string
	run  func(t *testing.T, s S)
}

// runAll runs each test as a subtest, on a store of its own from open.
func runAll[S any](t *testing.T, open func(t *testing.T) S, tests []test[S]) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, open(t))
		})
	}
}

// newSession is a session id no earlier run has used: base, then a random suffix.
func newSession(t testing.TB, base string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random session id: %v", err)
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// streamOf is the stream name of session, failing the test if the names are refused.
func streamOf(t testing.TB, session, name string) model.StreamID {
	t.Helper()
	id, err := model.NewStreamID(session, name)
	if err != nil {
		t.Fatalf("NewStreamID(%q, %q): %v", session, name, err)
	}
	return id
}

// ctx is the context of a test: canceled when it ends.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

// limitsOf is the limits a store declares, the defaults when it says nothing.
func limitsOf(s any) model.Limits {
	if l, ok := s.(interface{ Limits() model.Limits }); ok {
		return l.Limits()
	}
	return model.DefaultLimits()
}

// Events as the tests write them, as the Python suite's helpers (ledger_bus/testing/events.py).

func msg(body any) model.Event {
	return model.Event{"type": "message", "agent": "a", "body": body}
}

func msgWith(body any, extra map[string]any) model.Event {
	event := msg(body)
	for k, v := range extra {
		event[k] = v
	}
	return event
}

func call(attempt, runID, tool string, args map[string]any) model.Event {
	if tool == "" {
		tool = "deploy"
	}
	if args == nil {
		args = map[string]any{}
	}
	event := model.Event{"type": "tool_call", "agent": "a", "tool": tool, "args": args, "attempt_id": attempt}
	if runID != "" {
		event["run_id"] = runID
	}
	return event
}

func result(attempt, tool string) model.Event {
	if tool == "" {
		tool = "deploy"
	}
	return model.Event{"type": "tool_result", "agent": "a", "tool": tool, "attempt_id": attempt, "status": "ok", "result": int64(1)}
}

func messages(prefix string, n int) []model.Event {
	events := make([]model.Event, n)
	for i := range events {
		events[i] = msg(fmt.Sprintf("%s%d", prefix, i))
	}
	return events
}

// Assertions.

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func equal(t testing.TB, got, want any, what string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

// has stops the test unless n, how many of something there are, is want: what follows
// indexes them.
func has(t testing.TB, n, want int, what string) {
	t.Helper()
	if n != want {
		t.Fatalf("%s: %d, want %d", what, n, want)
	}
}

// refused fails the test unless err is of kind.
func refused(t testing.TB, err, kind error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one of kind %v", what, kind)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("%s: error %q (%T) is not of kind %v", what, err, err, kind)
	}
	if !errors.Is(err, model.ErrLedger) {
		t.Errorf("%s: error %q is not a ledger error", what, err)
	}
}

func bodies(events []model.RecordedEvent) []any {
	out := make([]any, len(events))
	for i, e := range events {
		out[i] = e.Fields["body"]
	}
	return out
}

func versions(events []model.RecordedEvent) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Version
	}
	return out
}

func cursors(events []model.RecordedEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Cursor
	}
	return out
}

func span(from, to int64) []int64 {
	out := make([]int64, 0, max(0, to-from+1))
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

func strs(values ...string) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = v
	}
	return out
}
