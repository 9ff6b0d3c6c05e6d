package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// RunAttempts runs the attempts' part of the contract on the stores open gives: a lease is
// held by one owner at a time, each holding with a token of its own that fences the appends
// made under it (checked before anything else), and a call requested without a result is open until its result closes it,
// what a resumed run and the reconciler work from.
func RunAttempts(t *testing.T, open func(t *testing.T) AttemptsStore) {
	runAll(t, open, attemptTests)
}

var attemptTests = []test[AttemptsStore]{
	{"a lease is held by one owner until released", leaseOwner},
	{"a lease expires unless renewed", leaseExpires},
	{"lease arguments are checked", leaseArguments},
	{"an append under a lease lands only while its holding lasts", fencedAppends},
	{"an append under an expired lease is refused", fencedAfterExpiry},
	{"a fence that is no fence is invalid input", fenceArguments},
	{"a requested call is open until its result closes it", openUntilResult},
	{"a flag marks the attempt whose call it names, once", flags},
	{"a call and its result in one append open nothing", callAndResult},
	{"a session never written has no open attempts", noOpenAttempts},
}

// lease runs one step on the lease run-1 of session: the token (Release: 1), or 0.
func lease(t testing.TB, s AttemptsStore, step store.LeaseStep, session, owner string, ttl time.Duration) int64 {
	t.Helper()
	token, err := s.Lease(ctx(t), step, session, "run-1", owner, ttl)
	must(t, err, "Lease "+string(step))
	return token
}

func leaseOwner(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	const ttl = time.Minute
	mine := lease(t, s, store.Acquire, session, "me", ttl)
	if mine < 1 {
		t.Fatalf("the first owner acquired it with token %d: a holding draws a token >= 1", mine)
	}
	steps := []struct {
		step  store.LeaseStep
		owner string
		want  int64
		what  string
	}{
		{store.Acquire, "me", mine, "its owner keeps it, and its token"},
		{store.Acquire, "you", 0, "another owner is refused it"},
		{store.Renew, "you", 0, "another owner cannot renew it"},
		{store.Release, "you", 0, "another owner cannot release it"},
		{store.Renew, "me", mine, "its owner renews it, its token unchanged"},
		{store.Release, "me", 1, "its owner releases it"},
		{store.Release, "me", 0, "a lease released is gone"},
		{store.Renew, "me", 0, "a lease released cannot be renewed"},
	}
	for _, step := range steps {
		equal(t, lease(t, s, step.step, session, step.owner, ttl), step.want, step.what)
	}
	yours := lease(t, s, store.Acquire, session, "you", ttl)
	if yours <= mine {
		t.Errorf("another owner acquired it once released with token %d, after %d: every new holding draws a greater one", yours, mine)
	}
	// Leases are of one session, by name.
	if lease(t, s, store.Acquire, newSession(t, "att"), "me", ttl) < 1 {
		t.Errorf("the same name in another session was refused")
	}
	other, err := s.Lease(ctx(t), store.Acquire, session, "run-2", "me", ttl)
	must(t, err, "Lease")
	if other < 1 {
		t.Errorf("another name in the same session was refused")
	}
}

func leaseExpires(t *testing.T, s AttemptsStore) {
	session := newSession(t, "att")
	mine := lease(t, s, store.Acquire, session, "me", 50*time.Millisecond)
	if mine < 1 {
		t.Fatalf("not acquired: %d", mine)
	}
	// However slow the machine, the lease goes by itself, and then another owner takes it.
	deadline := time.Now().Add(30 * time.Second)
	yours := lease(t, s, store.Acquire, session, "you", time.Minute)
	for ; yours == 0; yours = lease(t, s, store.Acquire, session, "you", time.Minute) {
		if time.Now().After(deadline) {
			t.Fatalf("a lease of 50ms is still held after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if yours <= mine {
		t.Errorf("the new owner's token %d is not above the lapsed holding's %d", yours, mine)
	}
	equal(t, lease(t, s, store.Renew, session, "me", time.Minute), int64(0), "the first owner renews a lease it lost")
	equal(t, lease(t, s, store.Release, session, "me", 0), int64(0), "the first owner releases a lease it lost")
	equal(t, lease(t, s, store.Renew, session, "you", time.Minute), yours, "the new owner renews it")
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

// fenceOf is the fence of owner's holding of the lease run-1 of session, acquired for a
// minute: the test stops when owner cannot take it.
func fenceOf(t testing.TB, s AttemptsStore, session, owner string) model.Fence {
	t.Helper()
	token := lease(t, s, store.Acquire, session, owner, time.Minute)
	if token < 1 {
		t.Fatalf("%s could not acquire run-1 (token %d)", owner, token)
	}
	return model.Fence{Lease: "run-1", Owner: owner, Token: token}
}

// lostLease fails the test unless err is the refusal of an append made under a holding that
// is over, naming token as the lease's current one.
func lostLease(t testing.TB, err error, token int64, what string) {
	t.Helper()
	refused(t, err, model.ErrLeaseLost, what)
	var lost *model.LeaseLostError
	if !errors.As(err, &lost) {
		t.Fatalf("%s: %T is not a *model.LeaseLostError", what, err)
	}
	equal(t, lost.Token, token, what+": the lease's current token")
	if !errors.Is(err, model.ErrRefused) {
		t.Errorf("%s: a LeaseLost is not a Refused", what)
	}
}

func fencedAppends(t *testing.T, s AttemptsStore) {
	// Given a writer holding the lease, and an append made under it
	session := newSession(t, "fence")
	main := streamOf(t, session, "main")
	mine := fenceOf(t, s, session, "me")
	_, err := s.Append(ctx(t), main, 0, "a1", []model.Event{msg("one")}, store.WithFence(mine))
	must(t, err, "the holder's append")
	// When another process takes the lease over (the first stopped past its TTL: released here)
	equal(t, lease(t, s, store.Release, session, "me", 0), int64(1), "released")
	yours := fenceOf(t, s, session, "you")
	// Then the first writer's next append is refused, whatever version it names, writing nothing
	for _, expected := range []int64{1, 0, model.AnyVersion} {
		_, err := s.Append(ctx(t), main, expected, "a2", []model.Event{msg("zombie")}, store.WithFence(mine))
		lostLease(t, err, yours.Token, fmt.Sprintf("the first holder's append at expected version %d", expected))
	}
	equal(t, bodies(readStream(t, s, main, store.ReadStreamOptions{})), strs("one"), "the stream after the refusals")
	// And the rightful holder writes on, at the version it read
	done, err := s.Append(ctx(t), main, 1, "a2", []model.Event{msg("two")}, store.WithFence(yours))
	must(t, err, "the new holder's append")
	equal(t, done.LastVersion, int64(2), "the new holder's version")
	// And even a retry of an append recorded under the first holding is told the holding is
	// over, as is one the new holder made with the same append_id at the same version: a
	// zombie takes neither for its own
	_, err = s.Append(ctx(t), main, 0, "a1", []model.Event{msg("one")}, store.WithFence(mine))
	lostLease(t, err, yours.Token, "the first holder's retry of its recorded append")
	_, err = s.Append(ctx(t), main, 1, "a2", []model.Event{msg("two")}, store.WithFence(mine))
	lostLease(t, err, yours.Token, "the first holder's append of what the new holder recorded")
	again, err := s.Append(ctx(t), main, 1, "a2", []model.Event{msg("two")}, store.WithFence(yours))
	must(t, err, "the new holder's retry")
	equal(t, again.Deduplicated, true, "the new holder's retry is deduplicated")
}

func fencedAfterExpiry(t *testing.T, s AttemptsStore) {
	// Given a holding of 50ms that lapsed, nobody taking the lease since
	session := newSession(t, "fence")
	main := streamOf(t, session, "main")
	token := lease(t, s, store.Acquire, session, "me", 50*time.Millisecond)
	if token < 1 {
		t.Fatalf("not acquired: %d", token)
	}
	lapsed := model.Fence{Lease: "run-1", Owner: "me", Token: token}
	time.Sleep(250 * time.Millisecond)
	// When its holder appends under it, Then it is refused, and nothing is written
	_, err := s.Append(ctx(t), main, 0, "a1", []model.Event{msg("late")}, store.WithFence(lapsed))
	lostLease(t, err, token, "an append under a lapsed holding")
	version, err := s.StreamVersion(ctx(t), main)
	must(t, err, "StreamVersion")
	equal(t, version, int64(0), "the version after the refusal")
	// And taken again by the same owner, the lease is a new holding: the old token stays refused
	again := fenceOf(t, s, session, "me")
	if again.Token <= token {
		t.Fatalf("the same owner's new holding drew %d, after %d", again.Token, token)
	}
	_, err = s.Append(ctx(t), main, 0, "a1", []model.Event{msg("late")}, store.WithFence(lapsed))
	lostLease(t, err, again.Token, "an append under the lapsed holding, the lease held again")
	_, err = s.Append(ctx(t), main, 0, "a1", []model.Event{msg("now")}, store.WithFence(again))
	must(t, err, "an append under the new holding")
	equal(t, bodies(readStream(t, s, main, store.ReadStreamOptions{})), strs("now"), "the stream")
}

func fenceArguments(t *testing.T, s AttemptsStore) {
	session := newSession(t, "fence")
	main := streamOf(t, session, "main")
	token := fenceOf(t, s, session, "me").Token
	for _, bad := range []model.Fence{
		{Lease: "run-1", Owner: "me", Token: 0},
		{Lease: "run-1", Owner: "me", Token: -1},
		{Lease: "run 1", Owner: "me", Token: token},
		{Lease: "", Owner: "me", Token: token},
		{Lease: "run-1", Owner: "", Token: token},
		{Lease: "run-1", Owner: "me\x1f1", Token: token},
	} {
		_, err := s.Append(ctx(t), main, 0, "a1", []model.Event{msg("x")}, store.WithFence(bad))
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("an append under the fence %+v", bad))
	}
	version, err := s.StreamVersion(ctx(t), main)
	must(t, err, "StreamVersion")
	equal(t, version, int64(0), "the version after the refusals")
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
