package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// RunAttempts runs the attempts' part of the contract on the stores open gives: a lease is
// held by one owner at a time, and a call requested without a result is open until its result
// closes it, what a resumed run and the reconciler work from.
func RunAttempts(t *testing.T, open func(t *testing.T) AttemptsStore) {
	runAll(t, open, attemptTests)
}

var attemptTests = []test[AttemptsStore]{
	{"a lease is held by one owner until released", leaseOwner},
	{"a lease expires unless renewed", leaseExpires},
	{"lease arguments are checked", leaseArguments},
	{"a requested call is open until its result closes it", openUntilResult},
	{"a flag marks the attempt whose call it names, once", flags},
	{"a call and its result in one append open nothing", callAndResult},
	{"a session never written has no open attempts", noOpenAttempts},
}

func lease(t testing.TB, s AttemptsStore, step store.LeaseStep, session, owner string, ttl time.Duration) bool {
	t.Helper()
	held, err := s.Lease(ctx(t), step, session, "run-1", owner, ttl)
	must(t, err, "Lease "+string(step))
	return held
}

func leaseOwner(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	const ttl = time.Minute
	steps := []struct {
		step  store.LeaseStep
		owner string
		want  bool
		what  string
	}{
		{store.Acquire, "me", true, "the first owner acquires it"},
		{store.Acquire, "me", true, "its owner keeps it"},
		{store.Acquire, "you", false, "another owner is refused it"},
		{store.Renew, "you", false, "another owner cannot renew it"},
		{store.Release, "you", false, "another owner cannot release it"},
		{store.Renew, "me", true, "its owner renews it"},
		{store.Release, "me", true, "its owner releases it"},
		{store.Release, "me", false, "a lease released is gone"},
		{store.Renew, "me", false, "a lease released cannot be renewed"},
		{store.Acquire, "you", true, "another owner acquires it once released"},
	}
	for _, step := range steps {
		equal(t, lease(t, s, step.step, session, step.owner, ttl), step.want, step.what)
	}
	// Leases are of one session, by name.
	equal(t, lease(t, s, store.Acquire, newSession(t, "att"), "me", ttl), true, "the same name in another session")
	held, err := s.Lease(ctx(t), store.Acquire, session, "run-2", "me", ttl)
	must(t, err, "Lease")
	equal(t, held, true, "another name in the same session")
}

func leaseExpires(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	equal(t, lease(t, s, store.Acquire, session, "me", 50*time.Millisecond), true, "acquired")
	// However slow the machine, the lease goes by itself, and then another owner takes it.
	deadline := time.Now().Add(30 * time.Second)
	for !lease(t, s, store.Acquire, session, "you", time.Minute) {
		if time.Now().After(deadline) {
			t.Fatalf("a lease of 50ms is still held after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	equal(t, lease(t, s, store.Renew, session, "me", time.Minute), false, "the first owner renews a lease it lost")
	equal(t, lease(t, s, store.Release, session, "me", 0), false, "the first owner releases a lease it lost")
	equal(t, lease(t, s, store.Renew, session, "you", time.Minute), true, "the new owner renews it")
}

func leaseArguments(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	_, err := s.Lease(ctx(t), store.Acquire, "a b", "run-1", "me", time.Minute)
	refused(t, err, model.ErrInvalidInput, "a bad session id")
	_, err = s.Lease(ctx(t), store.Acquire, session, "{run}", "me", time.Minute)
	refused(t, err, model.ErrInvalidInput, "a bad lease name")
	_, err = s.Lease(ctx(t), store.LeaseStep("steal"), session, "run-1", "me", time.Minute)
	refused(t, err, model.ErrInvalidInput, "an unknown step")
	_, err = s.OpenAttempts(ctx(t), "")
	refused(t, err, model.ErrInvalidInput, "open attempts of an empty session id")
}

func openAttempts(t testing.TB, s AttemptsStore, session string) []model.OpenAttempt {
	t.Helper()
	found, err := s.OpenAttempts(ctx(t), session)
	must(t, err, "OpenAttempts")
	return found
}

func attemptIDs(found []model.OpenAttempt) []string {
	out := make([]string, len(found))
	for i, a := range found {
		out[i] = a.AttemptID
	}
	return out
}

func openUntilResult(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	main := streamOf(t, session, "main")
	appendOK(t, s, main, 0, "a1", msg("go"), call("c-1", "run-1", "search", nil), call("c-2", "", "", nil))
	events := snapshot(t, s, session)
	has(t, len(events), 3, "events")

	open := openAttempts(t, s, session)
	equal(t, open, []model.OpenAttempt{
		{Session: session, AttemptID: "c-1", RunID: "run-1", Tool: "search", Stream: "main", Cursor: events[1].Cursor},
		{Session: session, AttemptID: "c-2", RunID: "", Tool: "deploy", Stream: "main", Cursor: events[2].Cursor},
	}, "the open attempts, oldest first")

	appendOK(t, s, streamOf(t, session, "other"), 0, "a2", result("c-1", "search"))
	equal(t, attemptIDs(openAttempts(t, s, session)), []string{"c-2"}, "open after c-1's result, on another stream")
	appendOK(t, s, main, 3, "a3", result("c-2", ""))
	equal(t, len(openAttempts(t, s, session)), 0, "open attempts after both results")
}

func flags(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	main := streamOf(t, session, "main")
	reconciler := streamOf(t, session, "reconciler")
	first := appendOK(t, s, main, 0, "a1", call("c1", "", "", nil))
	appendOK(t, s, main, 1, "a2", result("c1", ""))
	again := appendOK(t, s, main, 2, "a3", call("c1", "", "", nil)) // the same id requested again

	flag := func(call string) model.Event {
		return model.Event{"type": "mutation", "agent": "r", "kind": "reconcile.unresolved", "attempt_id": "c1", "call_cursor": call}
	}
	// A late flag of the first attempt marks nothing: it names another call.
	appendOK(t, s, reconciler, 0, "f1", flag(first.Cursor))
	open := openAttempts(t, s, session)
	has(t, len(open), 1, "open attempts")
	equal(t, attemptIDs(open), []string{"c1"}, "open attempts")
	equal(t, open[0].FlaggedCursor, "", "the flagged cursor after a flag of another call")

	// The call's cursor in the Redis entry id's width names it as well.
	ms, seq, err := model.ParseCursor(again.Cursor)
	must(t, err, "ParseCursor")
	flagged := appendOK(t, s, reconciler, 1, "f2", flag(fmt.Sprintf("%d-%d", ms, seq)))
	appendOK(t, s, reconciler, 2, "f3", flag(again.Cursor))
	open = openAttempts(t, s, session)
	has(t, len(open), 1, "open attempts")
	equal(t, open[0].FlaggedCursor, flagged.Cursor, "the flagged cursor, of the first flag")
	equal(t, open[0].Cursor, again.Cursor, "the open call's cursor")

	// A flag naming no call marks the attempt open, if not flagged yet.
	appendOK(t, s, main, 3, "a4", call("c2", "", "", nil))
	unnamed := appendOK(t, s, reconciler, 3, "f4",
		model.Event{"type": "mutation", "agent": "r", "kind": "reconcile.unresolved", "attempt_id": "c2"})
	open = openAttempts(t, s, session)
	has(t, len(open), 2, "open attempts")
	equal(t, attemptIDs(open), []string{"c1", "c2"}, "open attempts")
	equal(t, open[1].FlaggedCursor, unnamed.Cursor, "the flagged cursor of a flag naming no call")
}

func callAndResult(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	ref := streamOf(t, session, "run-a")
	appendOK(t, s, ref, 0, "a1", call("c1", "", "", nil), result("c1", ""))
	equal(t, len(openAttempts(t, s, session)), 0, "open attempts after a call and its result")
	appendOK(t, s, ref, 2, "a2", call("c2", "", "", nil))
	appendOK(t, s, ref, 3, "a3", call("c2", "", "", nil), result("c2", ""), call("c3", "", "", nil))
	equal(t, attemptIDs(openAttempts(t, s, session)), []string{"c3"}, "open attempts")
}

func noOpenAttempts(t *testing.T, s AttemptsStore) {
	found := openAttempts(t, s, newSession(t, "never-written"))
	equal(t, len(found), 0, "open attempts")
}
