package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// RunGroups runs the consumer groups' part of the contract on the stores open gives: a group
// delivers each event of a session to one of its consumers, at least once; an event stays
// pending until acked; an idle consumer's pending events can be claimed; what fails for good
// becomes a dead letter.
func RunGroups(t *testing.T, open func(t *testing.T) GroupsStore) {
	runAll(t, open, groupTests)
}

var groupTests = []test[GroupsStore]{
	{"a group starts where it is told and delivers each event once", groupDeliversOnce},
	{"a group created after a cursor delivers what follows it", groupAfterCursor},
	{"a blocking read returns what commits while it waits", groupBlocks},
	{"a blocking read ends when its context does", groupReadContext},
	{"own pending events come back counted until acked", groupPending},
	{"idle events are claimed and kept ones are not", groupClaim},
	{"a dead letter records why and leaves the pending list", groupDeadLetter},
	{"a group that does not exist is not found", groupNotFound},
	{"group and consumer names are checked", groupNames},
	{"idle consumers are removed but never one that holds events", groupPrune},
	{"deliveries carry whole events", groupArtifacts},
}

// put appends messages of bodies to the session's stream feed, in one append.
func put(t testing.TB, s store.Log, session string, bodies ...string) {
	t.Helper()
	events := make([]model.Event, len(bodies))
	for i, body := range bodies {
		events[i] = model.Event{"type": "message", "agent": "w", "body": body}
	}
	appendOK(t, s, streamOf(t, session, "feed"), model.AnyVersion, "put-"+bodies[0], events...)
}

func delivered(deliveries []store.Delivery) []any {
	out := make([]any, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.Event.Fields["body"]
	}
	return out
}

func counts(deliveries []store.Delivery) []int64 {
	out := make([]int64, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.Deliveries
	}
	return out
}

func entries(deliveries []store.Delivery) []string {
	out := make([]string, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.EntryID
	}
	return out
}

func create(t testing.TB, s GroupsStore, session, group, after string) bool {
	t.Helper()
	made, err := s.GroupCreate(ctx(t), session, group, after)
	must(t, err, "GroupCreate")
	return made
}

func read(t testing.TB, s GroupsStore, session, consumer string, count int) []store.Delivery {
	t.Helper()
	found, err := s.GroupRead(ctx(t), session, "g", consumer, count, 0)
	must(t, err, "GroupRead")
	return found
}

func pendingOf(t testing.TB, s GroupsStore, session, consumer string) []store.Delivery {
	t.Helper()
	found, err := s.GroupPending(ctx(t), session, "g", consumer, 10)
	must(t, err, "GroupPending")
	return found
}

func stats(t testing.TB, s GroupsStore, session string) store.GroupStats {
	t.Helper()
	found, err := s.GroupStats(ctx(t), session, "g")
	must(t, err, "GroupStats")
	return found
}

func ack(t testing.TB, s GroupsStore, session string, deliveries ...store.Delivery) int64 {
	t.Helper()
	n, err := s.GroupAck(ctx(t), session, "g", entries(deliveries))
	must(t, err, "GroupAck")
	return n
}

func groupDeliversOnce(t *testing.T, s GroupsStore) {
	session := newSession(t, "g1")
	put(t, s, session, "a", "b")
	exists, err := s.GroupExists(ctx(t), session, "g")
	must(t, err, "GroupExists")
	equal(t, exists, false, "GroupExists before")
	equal(t, create(t, s, session, "g", ""), true, "GroupCreate at the session's end")
	equal(t, create(t, s, session, "g", model.CursorZero), false, "GroupCreate again")
	exists, err = s.GroupExists(ctx(t), session, "g")
	must(t, err, "GroupExists")
	equal(t, exists, true, "GroupExists after")
	put(t, s, session, "c", "d", "e")

	first := read(t, s, session, "c1", 2)
	second := read(t, s, session, "c2", 10)

	has(t, len(first), 2, "deliveries of the first read")
	has(t, len(second), 1, "deliveries of the second read")
	equal(t, delivered(first), strs("c", "d"), "the first read")
	equal(t, delivered(second), strs("e"), "the second read")
	equal(t, counts(append(first, second...)), []int64{1, 1, 1}, "delivery counts")
	equal(t, len(read(t, s, session, "c1", 10)), 0, "events of a read with nothing new")
	equal(t, stats(t, s, session), store.GroupStats{Pending: 3, LastDelivered: second[0].Event.Cursor}, "the group's stats")
	// The events are the session's, as a scan reads them.
	all := snapshot(t, s, session)
	has(t, len(all), 5, "events")
	equal(t, first[0].Event, all[2], "the event delivered")
}

func groupAfterCursor(t *testing.T, s GroupsStore) {
	session := newSession(t, "g2")
	put(t, s, session, "a", "b", "c")
	all := snapshot(t, s, session)
	has(t, len(all), 3, "events")
	create(t, s, session, "g", all[0].Cursor)
	equal(t, delivered(read(t, s, session, "c", 10)), strs("b", "c"), "what follows the cursor")

	other := newSession(t, "g2")
	put(t, s, other, "a", "b")
	create(t, s, other, "g", model.CursorZero)
	equal(t, delivered(read(t, s, other, "c", 10)), strs("a", "b"), "what follows the start")
	empty := newSession(t, "g2")
	create(t, s, empty, "g", "")
	equal(t, stats(t, s, empty), store.GroupStats{LastDelivered: model.CursorZero}, "a group of a session with no events")
	_, err := s.GroupCreate(ctx(t), empty, "bad", "not a cursor")
	refused(t, err, model.ErrInvalidInput, "a group created after a bad cursor")
}

func groupBlocks(t *testing.T, s GroupsStore) {
	session := newSession(t, "g3")
	create(t, s, session, "g", "")
	feed := streamOf(t, session, "feed")
	written := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, err := s.Append(context.Background(), feed, model.AnyVersion, "late", []model.Event{msg("late")})
		written <- err
	}()
	found, err := s.GroupRead(woken(t), session, "g", "c", 10, time.Minute)
	must(t, <-written, "the append waited for")
	must(t, err, "GroupRead")
	equal(t, delivered(found), strs("late"), "what the read returned")

	none, err := s.GroupRead(ctx(t), session, "g", "c", 10, 50*time.Millisecond)
	must(t, err, "GroupRead")
	equal(t, len(none), 0, "events of a read that timed out")
}

func groupReadContext(t *testing.T, s GroupsStore) {
	session := newSession(t, "g3")
	create(t, s, session, "g", "")
	c, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	defer cancel()
	found, err := s.GroupRead(c, session, "g", "c", 10, time.Minute)
	if err == nil {
		t.Fatalf("a read whose context ended returned %d deliveries and no error", len(found))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q (%T) is not context.DeadlineExceeded", err, err)
	}
}

func groupPending(t *testing.T, s GroupsStore) {
	session := newSession(t, "g4")
	create(t, s, session, "g", "")
	put(t, s, session, "a", "b")
	first := read(t, s, session, "c", 10)
	has(t, len(first), 2, "deliveries")

	again := pendingOf(t, s, session, "c") // a restart of consumer c
	equal(t, delivered(again), strs("a", "b"), "own pending events")
	equal(t, counts(again), []int64{2, 2}, "their delivery counts")
	equal(t, entries(again), entries(first), "their entry ids")
	equal(t, len(pendingOf(t, s, session, "other")), 0, "another consumer's pending events")

	equal(t, ack(t, s, session, first[0]), int64(1), "acked")
	equal(t, ack(t, s, session, first[0]), int64(0), "acked again")
	equal(t, delivered(pendingOf(t, s, session, "c")), strs("b"), "own pending events after an ack")
	equal(t, stats(t, s, session).Pending, int64(1), "pending")
	n, err := s.GroupAck(ctx(t), session, "g", nil)
	must(t, err, "GroupAck of nothing")
	equal(t, n, int64(0), "acked of nothing")
}

func groupClaim(t *testing.T, s GroupsStore) {
	session := newSession(t, "g5")
	create(t, s, session, "g", "")
	put(t, s, session, "a", "b")
	held := read(t, s, session, "dead", 10)
	has(t, len(held), 2, "deliveries")

	none, err := s.GroupClaim(ctx(t), session, "g", "alive", time.Hour, 10)
	must(t, err, "GroupClaim")
	equal(t, len(none), 0, "events idle an hour")

	// Wide margins: only a stall of 0.8 s between two calls could make "b" or a just-claimed
	// "a" look idle, so a loaded machine does not fail this.
	time.Sleep(time.Second)
	must(t, s.GroupKeep(ctx(t), session, "g", "dead", []string{held[1].EntryID}), "GroupKeep") // still working on "b"
	must(t, s.GroupKeep(ctx(t), session, "g", "dead", nil), "GroupKeep of nothing")

	taken, err := s.GroupClaim(ctx(t), session, "g", "alive", 800*time.Millisecond, 10)
	must(t, err, "GroupClaim")

	equal(t, delivered(taken), strs("a"), "what was claimed")
	equal(t, counts(taken), []int64{2}, "its delivery count")
	again, err := s.GroupClaim(ctx(t), session, "g", "alive", 800*time.Millisecond, 10)
	must(t, err, "GroupClaim")
	equal(t, len(again), 0, "a claim resets the idle time")
	equal(t, delivered(pendingOf(t, s, session, "alive")), strs("a"), "the claimer's pending events")
	equal(t, delivered(pendingOf(t, s, session, "dead")), strs("b"), "the kept event stays its consumer's")

	all, err := s.GroupClaim(ctx(t), session, "g", "third", 0, 10)
	must(t, err, "GroupClaim")
	equal(t, delivered(all), strs("a", "b"), "what a claim of no idle time takes")
	equal(t, counts(all), []int64{4, 3}, "their delivery counts")
}

func groupDeadLetter(t *testing.T, s GroupsStore) {
	session := newSession(t, "g6")
	create(t, s, session, "g", "")
	put(t, s, session, "poison")
	found := read(t, s, session, "c", 10)
	has(t, len(found), 1, "deliveries")
	delivery := found[0]
	must(t, s.GroupDeadLetter(ctx(t), session, "g", delivery, "kept failing"), "GroupDeadLetter")

	letters, err := s.GroupDeadLetters(ctx(t), session, "g")
	must(t, err, "GroupDeadLetters")
	equal(t, letters, []map[string]string{{
		"entry":      delivery.EntryID,
		"cursor":     delivery.Event.Cursor,
		"stream":     "feed",
		"version":    "1",
		"event_id":   delivery.Event.EventID(),
		"deliveries": "1",
		"reason":     "kept failing",
	}}, "the dead letters")
	equal(t, stats(t, s, session).Pending, int64(0), "pending")
	equal(t, len(pendingOf(t, s, session, "c")), 0, "own pending events")
}

func groupNotFound(t *testing.T, s GroupsStore) {
	session := newSession(t, "g7")
	put(t, s, session, "a")
	_, err := s.GroupRead(ctx(t), session, "nope", "c", 10, 0)
	refused(t, err, model.ErrNotFound, "GroupRead")
	if !strings.Contains(err.Error(), "no consumer group 'nope'") {
		t.Errorf("the refusal %q does not name the group", err)
	}
	equal(t, model.ExitCode(err), 6, "exit code")
	_, err = s.GroupRead(ctx(t), session, "nope", "c", 10, 50*time.Millisecond)
	refused(t, err, model.ErrNotFound, "a blocking GroupRead")
	_, err = s.GroupStats(ctx(t), session, "nope")
	refused(t, err, model.ErrNotFound, "GroupStats")
	_, err = s.GroupPending(ctx(t), session, "nope", "c", 10)
	refused(t, err, model.ErrNotFound, "GroupPending")
	_, err = s.GroupClaim(ctx(t), session, "nope", "c", 0, 10)
	refused(t, err, model.ErrNotFound, "GroupClaim")
	_, err = s.GroupPrune(ctx(t), session, "nope", 0)
	refused(t, err, model.ErrNotFound, "GroupPrune")
	_, err = s.GroupRead(ctx(t), newSession(t, "never-written"), "nope", "c", 10, 0)
	refused(t, err, model.ErrNotFound, "GroupRead of a session never written")
}

func groupNames(t *testing.T, s GroupsStore) {
	session := newSession(t, "g8")
	create(t, s, session, "g", "")
	for _, bad := range []string{"", "a b", "x\xed\xa0\x80", "{g}", "nl\n"} {
		_, err := s.GroupCreate(ctx(t), session, bad, "")
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("a group named %q", bad))
		_, err = s.GroupRead(ctx(t), session, "g", bad, 10, 0)
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("a consumer named %q", bad))
		_, err = s.GroupExists(ctx(t), bad, "g")
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("a session id %q", bad))
	}
}

func groupPrune(t *testing.T, s GroupsStore) {
	session := newSession(t, "g9")
	create(t, s, session, "g", "")
	put(t, s, session, "a")
	read(t, s, session, "holder", 10)
	var once []string
	for n := range 20 { // each reads one event, acks it and leaves
		put(t, s, session, fmt.Sprintf("e%d", n))
		name := fmt.Sprintf("once-%d", n)
		once = append(once, name)
		got := read(t, s, session, name, 10)
		if len(got) != 1 {
			t.Fatalf("%s read %d events, want 1", name, len(got))
		}
		equal(t, ack(t, s, session, got...), int64(1), "acked")
	}
	time.Sleep(50 * time.Millisecond)

	removed, err := s.GroupPrune(ctx(t), session, "g", 20*time.Millisecond)
	must(t, err, "GroupPrune")

	sort.Strings(removed)
	sort.Strings(once)
	equal(t, removed, once, "the consumers removed")
	again, err := s.GroupPrune(ctx(t), session, "g", 0)
	must(t, err, "GroupPrune")
	equal(t, len(again), 0, "consumers removed again (the holder has 'a')")
	equal(t, stats(t, s, session).Pending, int64(1), "pending")
	equal(t, delivered(pendingOf(t, s, session, "holder")), strs("a"), "nothing was lost")
}

func groupArtifacts(t *testing.T, s GroupsStore) {
	session := newSession(t, "ga")
	create(t, s, session, "g", "")
	big := strings.Repeat("y", 70_000)
	appendOK(t, s, streamOf(t, session, "feed"), 0, "a1", msg(big))
	found := read(t, s, session, "c", 10)
	equal(t, delivered(found), []any{big}, "the body delivered")
	again := pendingOf(t, s, session, "c")
	equal(t, delivered(again), []any{big}, "the body delivered again")
}
