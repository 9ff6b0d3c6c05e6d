package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// groupStore opens a store on a redis-server of its own.
func groupStore(t *testing.T) (*Store, *testredis.Server) {
	t.Helper()
	return groupStoreWith(t)
}

// groupStoreWith opens a store with opts on a redis-server of its own.
func groupStoreWith(t *testing.T, opts ...store.Option) (*Store, *testredis.Server) {
	t.Helper()
	server := testredis.Start(t)
	s, err := Open(context.Background(), server.URL, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, server
}

// groupPut appends one message per body to the session's stream "feed", in one append.
func groupPut(t *testing.T, s *Store, session string, bodies ...string) model.AppendResult {
	t.Helper()
	stream, err := model.NewStreamID(session, "feed")
	if err != nil {
		t.Fatal(err)
	}
	events := make([]model.Event, len(bodies))
	for i, body := range bodies {
		events[i] = model.Message("w", body)
	}
	result, err := s.Append(context.Background(), stream, model.AnyVersion, "put-"+bodies[0], events)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return result
}

// groupBodies are the bodies of the messages delivered.
func groupBodies(deliveries []store.Delivery) []string {
	out := make([]string, len(deliveries))
	for i, d := range deliveries {
		out[i], _ = d.Event.Fields["body"].(string)
	}
	return out
}

// groupCountsOf are the delivery counts of deliveries.
func groupCountsOf(deliveries []store.Delivery) []int64 {
	out := make([]int64, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.Deliveries
	}
	return out
}

// groupEntryIDs are the entry ids of deliveries, as GroupAck takes them.
func groupEntryIDs(deliveries []store.Delivery) []string {
	out := make([]string, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.EntryID
	}
	return out
}

// groupMust takes a call's two results and returns its value, failing the test on its error:
// groupMust(s.GroupRead(...))(t).
func groupMust[T any](value T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return value
	}
}

// wantGroupBodies fails the test unless got delivered messages of the bodies want, in order.
func wantGroupBodies(t *testing.T, what string, got []store.Delivery, want ...string) {
	t.Helper()
	if b := groupBodies(got); !slices.Equal(b, want) {
		t.Fatalf("%s: bodies %q, want %q", what, b, want)
	}
}

func TestGroupStartsWhereToldAndDeliversEachEventOnce(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupPut(t, s, "g1", "a", "b")

	if groupMust(s.GroupExists(ctx, "g1", "g"))(t) {
		t.Fatal("a group exists before it is made")
	}
	if !groupMust(s.GroupCreate(ctx, "g1", "g", ""))(t) {
		t.Fatal("the first GroupCreate says it made nothing")
	}
	if groupMust(s.GroupCreate(ctx, "g1", "g", ""))(t) {
		t.Fatal("a second GroupCreate says it made the group again")
	}
	if !groupMust(s.GroupExists(ctx, "g1", "g"))(t) {
		t.Fatal("GroupExists does not see the group made")
	}
	groupPut(t, s, "g1", "c", "d", "e")

	first := groupMust(s.GroupRead(ctx, "g1", "g", "c1", 2, 0))(t)
	second := groupMust(s.GroupRead(ctx, "g1", "g", "c2", 10, 0))(t)

	wantGroupBodies(t, "c1's read", first, "c", "d")
	wantGroupBodies(t, "c2's read", second, "e")
	for _, d := range append(first, second...) {
		if d.Deliveries != 1 {
			t.Fatalf("a first delivery counted %d", d.Deliveries)
		}
		if d.Event.Stream.Name != "feed" || d.Event.Version < 3 || model.LedgerCursor(d.EntryID) != d.Event.Cursor {
			t.Fatalf("delivery %+v: not the event recorded", d)
		}
	}
	if again := groupMust(s.GroupRead(ctx, "g1", "g", "c1", 10, 0))(t); len(again) != 0 {
		t.Fatalf("delivered twice: %q", groupBodies(again))
	}
	stats := groupMust(s.GroupStats(ctx, "g1", "g"))(t)
	if stats.Pending != 3 || stats.LastDelivered != second[0].Event.Cursor {
		t.Fatalf("stats %+v, want 3 pending, last delivered %s", stats, second[0].Event.Cursor)
	}
}

func TestGroupCreatedAfterACursorDeliversWhatFollows(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupPut(t, s, "g2", "a", "b", "c")
	events := groupMust(s.ScanSession(ctx, "g2", store.ScanOptions{}))(t)

	groupMust(s.GroupCreate(ctx, "g2", "after-a", events[0].Cursor))(t)
	groupMust(s.GroupCreate(ctx, "g2", "all", model.CursorZero))(t)

	wantGroupBodies(t, "after a", groupMust(s.GroupRead(ctx, "g2", "after-a", "c", 10, 0))(t), "b", "c")
	wantGroupBodies(t, "from zero", groupMust(s.GroupRead(ctx, "g2", "all", "c", 10, 0))(t), "a", "b", "c")
}

func TestGroupBlockingReadReturnsWhatCommitsWhileItWaits(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "g3", "g", ""))(t)

	done := make(chan []store.Delivery, 1)
	failed := make(chan error, 1)
	go func() {
		found, err := s.GroupRead(ctx, "g3", "g", "c", 10, time.Minute)
		if err != nil {
			failed <- err
			return
		}
		done <- found
	}()
	groupPut(t, s, "g3", "late")

	select {
	case found := <-done:
		wantGroupBodies(t, "the blocking read", found, "late")
	case err := <-failed:
		t.Fatal(err)
	}
}

func TestGroupOwnPendingComeBackCountedUntilAcked(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "g4", "g", ""))(t)
	groupPut(t, s, "g4", "a", "b")
	delivered := groupMust(s.GroupRead(ctx, "g4", "g", "c", 10, 0))(t)

	again := groupMust(s.GroupPending(ctx, "g4", "g", "c", 10))(t) // consumer c restarted
	wantGroupBodies(t, "own pending", again, "a", "b")
	if got := groupCountsOf(again); !slices.Equal(got, []int64{2, 2}) {
		t.Fatalf("own pending counted %v, want [2 2]", got)
	}
	if got := groupCountsOf(groupMust(s.GroupPending(ctx, "g4", "g", "c", 10))(t)); !slices.Equal(got, []int64{3, 3}) {
		t.Fatalf("own pending read again counted %v, want [3 3]", got)
	}
	if other := groupMust(s.GroupPending(ctx, "g4", "g", "other", 10))(t); len(other) != 0 {
		t.Fatalf("another consumer's pending: %q", groupBodies(other))
	}

	if n := groupMust(s.GroupAck(ctx, "g4", "g", []string{delivered[0].EntryID}))(t); n != 1 {
		t.Fatalf("first ack acked %d", n)
	}
	if n := groupMust(s.GroupAck(ctx, "g4", "g", []string{delivered[0].EntryID}))(t); n != 0 {
		t.Fatalf("second ack of the same entry acked %d", n)
	}
	if n := groupMust(s.GroupAck(ctx, "g4", "g", nil))(t); n != 0 {
		t.Fatalf("an ack of nothing acked %d", n)
	}
	wantGroupBodies(t, "pending after the ack", groupMust(s.GroupPending(ctx, "g4", "g", "c", 10))(t), "b")
	if stats := groupMust(s.GroupStats(ctx, "g4", "g"))(t); stats.Pending != 1 {
		t.Fatalf("stats %+v, want 1 pending", stats)
	}
}

func TestGroupPendingEntryDeletedFromTheLogIsAckedNotRedone(t *testing.T) {
	s, server := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "gx", "g", ""))(t)
	groupPut(t, s, "gx", "gone", "kept")
	delivered := groupMust(s.GroupRead(ctx, "gx", "g", "c", 10, 0))(t)
	if err := server.Client().XDel(ctx, s.key("gx", "log"), delivered[0].EntryID).Err(); err != nil {
		t.Fatal(err)
	}

	wantGroupBodies(t, "own pending", groupMust(s.GroupPending(ctx, "gx", "g", "c", 10))(t), "kept")
	if stats := groupMust(s.GroupStats(ctx, "gx", "g"))(t); stats.Pending != 1 {
		t.Fatalf("stats %+v: the deleted entry is still pending", stats)
	}
}

func TestGroupIdleEventsAreClaimedAndKeptOnesAreNot(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "g5", "g", ""))(t)
	groupPut(t, s, "g5", "a", "b")
	held := groupMust(s.GroupRead(ctx, "g5", "g", "dead", 10, 0))(t)
	if claimed := groupMust(s.GroupClaim(ctx, "g5", "g", "alive", time.Hour, 10))(t); len(claimed) != 0 {
		t.Fatalf("claimed events idle for less than their min idle time: %q", groupBodies(claimed))
	}
	// Wide margins: only a stall of 0.8 s between two calls could make "b" or a just-claimed
	// "a" look idle, so a loaded machine does not fail this.
	time.Sleep(time.Second)
	// The dead consumer is still working on "b".
	if err := s.GroupKeep(ctx, "g5", "g", "dead", []string{held[1].EntryID}); err != nil {
		t.Fatal(err)
	}

	taken := groupMust(s.GroupClaim(ctx, "g5", "g", "alive", 800*time.Millisecond, 10))(t)

	wantGroupBodies(t, "claimed", taken, "a")
	if taken[0].Deliveries != 2 {
		t.Fatalf("a claimed event counted %d, want 2", taken[0].Deliveries)
	}
	if again := groupMust(s.GroupClaim(ctx, "g5", "g", "alive", 800*time.Millisecond, 10))(t); len(again) != 0 {
		t.Fatalf("a claim did not reset the idle time: claimed %q again", groupBodies(again))
	}
	wantGroupBodies(t, "alive's pending", groupMust(s.GroupPending(ctx, "g5", "g", "alive", 10))(t), "a")
	// Keeping "b" did not count a delivery: read once, then handed out once more now.
	kept := groupMust(s.GroupPending(ctx, "g5", "g", "dead", 10))(t)
	wantGroupBodies(t, "dead's pending", kept, "b")
	if kept[0].Deliveries != 2 {
		t.Fatalf("a kept event counted %d after one read and one re-read, want 2", kept[0].Deliveries)
	}
}

func TestGroupKeepDoesNotCountADelivery(t *testing.T) {
	s, server := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "gk", "g", ""))(t)
	groupPut(t, s, "gk", "a")
	held := groupMust(s.GroupRead(ctx, "gk", "g", "c", 10, 0))(t)
	for range 3 {
		if err := s.GroupKeep(ctx, "gk", "g", "c", groupEntryIDs(held)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.GroupKeep(ctx, "gk", "g", "c", nil); err != nil {
		t.Fatalf("keeping nothing: %v", err)
	}
	pending, err := server.Client().XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: s.key("gk", "log"), Group: "g", Start: "-", End: "+", Count: 10,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].RetryCount != 1 || pending[0].Consumer != "c" {
		t.Fatalf("pending after three keeps: %+v, want one entry held by c, delivered once", pending)
	}
}

func TestGroupDeadLetterRecordsWhyAndLeavesThePendingList(t *testing.T) {
	s, server := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "g6", "g", ""))(t)
	groupPut(t, s, "g6", "poison")
	delivered := groupMust(s.GroupRead(ctx, "g6", "g", "c", 10, 0))(t)
	delivery := delivered[0]

	if err := s.GroupDeadLetter(ctx, "g6", "g", delivery, "kept failing"); err != nil {
		t.Fatal(err)
	}

	letters := groupMust(s.GroupDeadLetters(ctx, "g6", "g"))(t)
	want := map[string]string{
		"entry":      delivery.EntryID,
		"cursor":     delivery.Event.Cursor,
		"stream":     "feed",
		"version":    "1",
		"event_id":   delivery.Event.EventID(),
		"deliveries": "1",
		"reason":     "kept failing",
	}
	if len(letters) != 1 || fmt.Sprint(letters[0]) != fmt.Sprint(want) {
		t.Fatalf("dead letters %v, want [%v]", letters, want)
	}
	if stats := groupMust(s.GroupStats(ctx, "g6", "g"))(t); stats.Pending != 0 {
		t.Fatalf("stats %+v: the dead letter is still pending", stats)
	}
	// The dead-letter stream's entry holds the fields in the order the Python package writes
	// them, under the key it reads.
	raw, err := server.Client().Do(ctx, "XRANGE", "lb:{g6}:dead:g", "-", "+").Slice()
	if err != nil || len(raw) != 1 {
		t.Fatalf("XRANGE of the dead-letter stream: %v, %v", raw, err)
	}
	fields := raw[0].([]any)[1].([]any)
	var names []string
	for i := 0; i < len(fields); i += 2 {
		names = append(names, fields[i].(string))
	}
	if got := strings.Join(names, " "); got != "entry cursor stream version event_id deliveries reason" {
		t.Fatalf("dead letter fields in the order %s", got)
	}
}

func TestGroupPruneNeverRemovesAConsumerThatHoldsEvents(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "g9", "g", ""))(t)
	groupPut(t, s, "g9", "a")
	groupMust(s.GroupRead(ctx, "g9", "g", "holder", 10, 0))(t)
	var once []string
	for n := range 5 { // each reads one event, acks it and leaves
		groupPut(t, s, "g9", fmt.Sprintf("e%d", n))
		got := groupMust(s.GroupRead(ctx, "g9", "g", fmt.Sprintf("once-%d", n), 10, 0))(t)
		groupMust(s.GroupAck(ctx, "g9", "g", groupEntryIDs(got)))(t)
		once = append(once, fmt.Sprintf("once-%d", n))
	}
	if removed := groupMust(s.GroupPrune(ctx, "g9", "g", time.Hour))(t); len(removed) != 0 {
		t.Fatalf("pruned consumers idle for less than an hour: %q", removed)
	}
	time.Sleep(50 * time.Millisecond)

	removed := groupMust(s.GroupPrune(ctx, "g9", "g", 20*time.Millisecond))(t)

	slices.Sort(removed)
	if !slices.Equal(removed, once) {
		t.Fatalf("pruned %q, want %q", removed, once)
	}
	if again := groupMust(s.GroupPrune(ctx, "g9", "g", 0))(t); len(again) != 0 {
		t.Fatalf("pruned %q: a consumer holding an event, or one already gone", again)
	}
	wantGroupBodies(t, "the holder's pending", groupMust(s.GroupPending(ctx, "g9", "g", "holder", 10))(t), "a")
	if stats := groupMust(s.GroupStats(ctx, "g9", "g"))(t); stats.Pending != 1 {
		t.Fatalf("stats %+v, want the holder's 1 pending", stats)
	}
}

func TestGroupThatDoesNotExistIsNotFound(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupPut(t, s, "g7", "a")
	delivery := store.Delivery{EntryID: "1-0", Deliveries: 1}
	for _, session := range []string{"g7", "never-written"} {
		calls := map[string]error{}
		_, calls["read"] = s.GroupRead(ctx, session, "nope", "c", 10, 0)
		_, calls["blocking read"] = s.GroupRead(ctx, session, "nope", "c", 10, time.Second)
		_, calls["pending"] = s.GroupPending(ctx, session, "nope", "c", 10)
		_, calls["claim"] = s.GroupClaim(ctx, session, "nope", "c", 0, 10)
		calls["keep"] = s.GroupKeep(ctx, session, "nope", "c", []string{"1-0"})
		_, calls["ack"] = s.GroupAck(ctx, session, "nope", []string{"1-0"})
		calls["dead letter"] = s.GroupDeadLetter(ctx, session, "nope", delivery, "why")
		_, calls["prune"] = s.GroupPrune(ctx, session, "nope", 0)
		_, calls["stats"] = s.GroupStats(ctx, session, "nope")
		for call, err := range calls {
			if !errors.Is(err, model.ErrNotFound) {
				t.Errorf("%s on session %s: %v, want NotFound", call, session, err)
			} else if !strings.Contains(err.Error(), "no consumer group 'nope'") {
				t.Errorf("%s on session %s: %q does not name the group", call, session, err)
			}
		}
		if exists, err := s.GroupExists(ctx, session, "nope"); exists || err != nil {
			t.Errorf("GroupExists on session %s: %v, %v", session, exists, err)
		}
	}
	// Nothing was written for the dead letter of a group that is not there.
	if n, err := s.rdb.Exists(ctx, s.key("g7", "dead:nope")).Result(); err != nil || n != 0 {
		t.Fatalf("a dead-letter stream for a missing group: %d, %v", n, err)
	}
}

func TestGroupNamesAreChecked(t *testing.T) {
	s, _ := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "g8", "g", ""))(t)
	for _, bad := range []string{"", "a b", "x\xed\xa0\x80", "{g}", "c\n", strings.Repeat("n", 201)} {
		calls := map[string]error{}
		_, calls["create, group"] = s.GroupCreate(ctx, "g8", bad, "")
		_, calls["create, session"] = s.GroupCreate(ctx, bad, "g", "")
		_, calls["exists"] = s.GroupExists(ctx, "g8", bad)
		_, calls["read, consumer"] = s.GroupRead(ctx, "g8", "g", bad, 10, 0)
		_, calls["pending, consumer"] = s.GroupPending(ctx, "g8", "g", bad, 10)
		_, calls["claim, consumer"] = s.GroupClaim(ctx, "g8", "g", bad, 0, 10)
		calls["keep, consumer"] = s.GroupKeep(ctx, "g8", "g", bad, nil)
		_, calls["ack, group"] = s.GroupAck(ctx, "g8", bad, nil)
		calls["dead letter, group"] = s.GroupDeadLetter(ctx, "g8", bad, store.Delivery{EntryID: "1-0"}, "why")
		_, calls["dead letters, group"] = s.GroupDeadLetters(ctx, "g8", bad)
		_, calls["prune, group"] = s.GroupPrune(ctx, "g8", bad, 0)
		_, calls["stats, group"] = s.GroupStats(ctx, "g8", bad)
		for call, err := range calls {
			if !errors.Is(err, model.ErrInvalidInput) {
				t.Errorf("%s %q: %v, want InvalidInput", call, bad, err)
			}
		}
	}
	for _, bad := range []string{"", "1", "1-", "-1", "a-0", "1-0-0", "+1-0"} {
		if _, err := s.GroupAck(ctx, "g8", "g", []string{bad}); !errors.Is(err, model.ErrInvalidInput) {
			t.Errorf("ack of entry id %q: %v, want InvalidInput", bad, err)
		}
		if err := s.GroupKeep(ctx, "g8", "g", "c", []string{bad}); !errors.Is(err, model.ErrInvalidInput) {
			t.Errorf("keep of entry id %q: %v, want InvalidInput", bad, err)
		}
	}
	if _, err := s.GroupCreate(ctx, "g8", "h", "not a cursor"); !errors.Is(err, model.ErrInvalidInput) {
		t.Errorf("create after a bad cursor: %v, want InvalidInput", err)
	}
	if groups, err := s.rdb.XInfoGroups(ctx, s.key("g8", "log")).Result(); err != nil || len(groups) != 1 {
		t.Fatalf("groups after refused calls: %v, %v; want g alone", groups, err)
	}
}

func TestGroupReadWhoseReplyWasLostHandsOverWhatItDelivered(t *testing.T) {
	s, server := groupStore(t)
	found := loseReadReply(t, s, server, 0)
	if c := groupCountsOf(found); !slices.Equal(c, []int64{2, 2, 2}) {
		t.Fatalf("counted %v: the lost read delivered each once, the retry once more", c)
	}
}

func TestGroupReadWhoseReplyWasLostLateInALongWaitHandsOverWhatItDelivered(t *testing.T) {
	// The reply is lost long after the read began, past the store's timeout: the retry must
	// still come.
	s, server := groupStoreWith(t, store.WithTimeout(100*time.Millisecond))
	found := loseReadReply(t, s, server, 300*time.Millisecond)
	for _, c := range groupCountsOf(found) {
		// 1 when the connection was killed between two of the wait's calls: nothing was
		// delivered to the call that lost its connection, and the next read delivered it all.
		if c != 1 && c != 2 {
			t.Fatalf("counted %v", groupCountsOf(found))
		}
	}
}

// loseReadReply has a blocking GroupRead of consumer c of group g of session "lost" lose the
// reply that delivers three events, after the read has waited for after, and returns what
// the read returned once done: the three events, none stranded.
func loseReadReply(t *testing.T, s *Store, server *testredis.Server, after time.Duration) []store.Delivery {
	t.Helper()
	ctx := context.Background()
	admin := server.Client()
	groupPut(t, s, "lost-src", "e0", "e1", "e2")
	source := groupMust(admin.XRange(ctx, s.key("lost-src", "log"), "-", "+").Result())(t)
	groupMust(s.GroupCreate(ctx, "lost", "g", ""))(t)

	type outcome struct {
		found []store.Delivery
		err   error
	}
	done := make(chan outcome, 1)
	go func() {
		found, err := s.GroupRead(ctx, "lost", "g", "c", 10, 20*time.Second)
		done <- outcome{found, err}
	}()
	blockedGroupReader(t, admin)
	time.Sleep(after)
	blocked := blockedGroupReader(t, admin)

	// The server serves a blocked read as soon as the command that fed it is done, and sends
	// the reply only when it next polls its connections: killing the connection in the same
	// round trip as the events are written leaves them delivered, pending with c, and the
	// reply lost.
	var args []any
	for _, entry := range source {
		args = append(args, entry.Values["s"], entry.Values["v"], entry.Values["p"])
	}
	pipe := admin.Pipeline()
	// One command feeds the blocked read all three events.
	copied := pipe.Eval(ctx, `for i = 1, #ARGV, 3 do
  redis.call('XADD', KEYS[1], '*', 's', ARGV[i], 'v', ARGV[i + 1], 'p', ARGV[i + 2])
end`, []string{s.key("lost", "log")}, args...)
	killed := pipe.ClientKillByFilter(ctx, "ID", blocked)
	_, _ = pipe.Exec(ctx)
	if err := copied.Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if n, err := killed.Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL: %d, %v", n, err)
	}

	got := <-done
	if got.err != nil {
		t.Fatalf("the retried read: %v", got.err)
	}
	wantGroupBodies(t, "the retried read", got.found, "e0", "e1", "e2")
	groupMust(s.GroupAck(ctx, "lost", "g", groupEntryIDs(got.found)))(t)
	if stats := groupMust(s.GroupStats(ctx, "lost", "g"))(t); stats.Pending != 0 {
		t.Fatalf("stats %+v after acking all", stats)
	}
	return got.found
}

// blockedGroupReader waits until a client of server is blocked in XREADGROUP, and returns its id.
func blockedGroupReader(t *testing.T, admin *redis.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatalf("no client blocked in XREADGROUP: %v", err)
		}
		for _, line := range strings.Split(list, "\n") {
			var id, flags, cmd string
			for _, field := range strings.Fields(line) {
				name, value, _ := strings.Cut(field, "=")
				switch name {
				case "id":
					id = value
				case "flags":
					flags = value
				case "cmd":
					cmd = value
				}
			}
			if cmd == "xreadgroup" && strings.Contains(flags, "b") {
				return id
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGroupReadPutsArtifactsBack(t *testing.T) {
	s, server := groupStore(t)
	ctx := context.Background()
	groupMust(s.GroupCreate(ctx, "ga", "g", ""))(t)
	big := strings.Repeat("x", 100_000)
	stream := groupMust(model.NewStreamID("ga", "feed"))(t)
	groupMust(s.Append(ctx, stream, 0, "big", []model.Event{model.Message("w", big)}))(t)
	// The payload holds a reference, not the body: the read puts it back.
	raw := groupMust(server.Client().XRange(ctx, s.key("ga", "log"), "-", "+").Result())(t)
	if payload, _ := raw[0].Values["p"].(string); len(payload) >= len(big) {
		t.Fatalf("the body was not kept as an artifact (a payload of %d bytes)", len(payload))
	}

	for what, found := range map[string][]store.Delivery{
		"a read":    groupMust(s.GroupRead(ctx, "ga", "g", "c", 10, 0))(t),
		"a re-read": groupMust(s.GroupPending(ctx, "ga", "g", "c", 10))(t),
	} {
		if len(found) != 1 || found[0].Event.Fields["body"] != big {
			t.Errorf("%s did not return the body whole", what)
		}
	}
}

func TestGroupBlockingReadEndsWithItsContext(t *testing.T) {
	s, _ := groupStore(t)
	groupMust(s.GroupCreate(context.Background(), "gc", "g", ""))(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()

	found, err := s.GroupRead(ctx, "gc", "g", "c", 10, time.Hour)

	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a read past its context's deadline: %d deliveries, %v", len(found), err)
	}
}

func TestGroupsOnACluster(t *testing.T) {
	// A session is one slot: its group's transactions, scripts and pipelines run on one node.
	cluster := testredis.StartCluster(t, 3)
	s, err := Open(context.Background(), cluster.URL)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for _, session := range []string{"c1", "c2", "c3", "c4"} { // over the nodes
		groupMust(s.GroupCreate(ctx, session, "g", model.CursorZero))(t)
		groupPut(t, s, session, "a", "b")
		read := groupMust(s.GroupRead(ctx, session, "g", "dead", 10, time.Second))(t)
		wantGroupBodies(t, "the read", read, "a", "b")
		again := groupMust(s.GroupPending(ctx, session, "g", "dead", 10))(t)
		if c := groupCountsOf(again); !slices.Equal(c, []int64{2, 2}) {
			t.Fatalf("session %s: own pending counted %v", session, c)
		}
		taken := groupMust(s.GroupClaim(ctx, session, "g", "alive", 0, 10))(t)
		if c := groupCountsOf(taken); !slices.Equal(c, []int64{3, 3}) {
			t.Fatalf("session %s: claimed counted %v", session, c)
		}
		if err := s.GroupDeadLetter(ctx, session, "g", taken[0], "poison"); err != nil {
			t.Fatalf("session %s: %v", session, err)
		}
		groupMust(s.GroupAck(ctx, session, "g", []string{taken[1].EntryID}))(t)
		if letters := groupMust(s.GroupDeadLetters(ctx, session, "g"))(t); len(letters) != 1 || letters[0]["reason"] != "poison" {
			t.Fatalf("session %s: dead letters %v", session, letters)
		}
		removed := groupMust(s.GroupPrune(ctx, session, "g", 0))(t)
		slices.Sort(removed)
		if !slices.Equal(removed, []string{"alive", "dead"}) {
			t.Fatalf("session %s: pruned %q", session, removed)
		}
		if stats := groupMust(s.GroupStats(ctx, session, "g"))(t); stats.Pending != 0 || stats.LastDelivered != read[1].Event.Cursor {
			t.Fatalf("session %s: stats %+v", session, stats)
		}
		if _, err := s.GroupRead(ctx, session, "nope", "c", 10, 0); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("session %s: a read of a missing group: %v", session, err)
		}
	}
}
