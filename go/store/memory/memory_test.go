package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// clock is a clock a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) move(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// withClock is a new store reading the time from a clock of the test's.
func withClock(opts ...store.Option) (*Store, *clock) {
	c := &clock{now: time.UnixMilli(1_795_993_625_879)}
	s := New(opts...)
	s.now = c.read
	return s, c
}

func stream(t *testing.T, session, name string) model.StreamID {
	t.Helper()
	id, err := model.NewStreamID(session, name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func msg(body string) model.Event {
	return model.Event{"type": "message", "agent": "a", "body": body}
}

func TestCursorsAfter(t *testing.T) {
	cases := []struct {
		name  string
		last  string
		now   int64
		count int
		want  []string
	}{
		{"the clock moved on", "0000000000005-000003", 9, 2, []string{"0000000000009-000000", "0000000000009-000001"}},
		{"the same millisecond", "0000000000009-000001", 9, 1, []string{"0000000000009-000002"}},
		{"the clock went back", "0000000000009-000001", 4, 1, []string{"0000000000009-000002"}},
		{"the sequence is full", "0000000000009-999998", 9, 3, []string{"0000000000009-999999", "0000000000010-000000", "0000000000010-000001"}},
		{"the first event", model.CursorZero, 1_795_993_625_879, 1, []string{"1795993625879-000000"}},
	}
	for _, c := range cases {
		got := cursorsAfter(c.last, c.now, c.count)
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCursorsIncreaseWhenTheClockGoesBack(t *testing.T) {
	s, c := withClock()
	ref := stream(t, "s", "main")
	first, err := s.Append(context.Background(), ref, 0, "a1", []model.Event{msg("one")})
	if err != nil {
		t.Fatal(err)
	}
	c.move(-time.Hour)
	second, err := s.Append(context.Background(), ref, 1, "a2", []model.Event{msg("two")})
	if err != nil {
		t.Fatal(err)
	}
	if first.Cursor != "1795993625879-000000" || second.Cursor != "1795993625879-000001" {
		t.Errorf("cursors %s, %s", first.Cursor, second.Cursor)
	}
	sessions, err := s.Sessions(context.Background(), store.SessionsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || !sessions[0].Last.Equal(time.UnixMilli(1_795_993_625_879)) {
		t.Errorf("sessions %v", sessions)
	}
}

func TestLeaseExpiresByTheClock(t *testing.T) {
	s, c := withClock()
	ctx := context.Background()
	lease := func(step store.LeaseStep, owner string) int64 {
		t.Helper()
		token, err := s.Lease(ctx, step, "s", "run-1", owner, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	if lease(store.Acquire, "me") != 1 {
		t.Fatal("not acquired with the first token")
	}
	c.move(999 * time.Millisecond)
	if lease(store.Acquire, "you") != 0 {
		t.Fatal("taken 1ms before it expires")
	}
	if lease(store.Renew, "me") != 1 {
		t.Fatal("not renewed, with its token")
	}
	c.move(999 * time.Millisecond)
	if lease(store.Acquire, "you") != 0 {
		t.Fatal("taken though renewed")
	}
	c.move(time.Millisecond)
	if lease(store.Renew, "me") != 0 {
		t.Fatal("renewed once expired")
	}
	if lease(store.Acquire, "you") != 2 {
		t.Fatal("not taken once expired, with the next token")
	}
}

func TestAFenceLapsesWithItsLeaseByTheClock(t *testing.T) {
	// Given a holding of a lease of one second
	s, c := withClock()
	ctx := context.Background()
	token, err := s.Lease(ctx, store.Acquire, "s", "run-1", "me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fence := store.WithFence(model.Fence{Lease: "run-1", Owner: "me", Token: token})
	stream := model.StreamID{Session: "s", Name: "main"}
	one := []model.Event{model.Message("a", "one")}
	// When its last millisecond comes, the append under it lands
	c.move(999 * time.Millisecond)
	if _, err := s.Append(ctx, stream, 0, "a1", one, fence); err != nil {
		t.Fatal(err)
	}
	// Then, a millisecond later, nobody holding it, the next is refused and writes nothing
	c.move(time.Millisecond)
	_, err = s.Append(ctx, stream, 1, "a2", []model.Event{model.Message("a", "late")}, fence)
	var lost *model.LeaseLostError
	if !errors.As(err, &lost) || lost.Token != token {
		t.Fatalf("an append under an expired lease: %v", err)
	}
	if v, _ := s.StreamVersion(ctx, stream); v != 1 {
		t.Fatalf("version %d after the refusal, want 1", v)
	}
	// And so is a retry of the append recorded under it: the fence comes first
	if _, err := s.Append(ctx, stream, 0, "a1", one, fence); !errors.As(err, &lost) {
		t.Fatalf("the retry of a recorded append under a lapsed holding: %v", err)
	}
}

func TestLeaseArguments(t *testing.T) {
	s := New()
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond} {
		if _, err := s.Lease(ctx, store.Acquire, "s", "run-1", "me", ttl); !errors.Is(err, model.ErrInvalidInput) {
			t.Errorf("acquire for %s: %v", ttl, err)
		}
	}
	if released, err := s.Lease(ctx, store.Release, "s", "run-1", "me", 0); err != nil || released != 0 {
		t.Errorf("releasing what nobody holds: %v, %v", released, err)
	}
}

func TestClaimByTheClock(t *testing.T) {
	s, c := withClock()
	ctx := context.Background()
	if _, err := s.GroupCreate(ctx, "s", "g", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, stream(t, "s", "feed"), 0, "a1", []model.Event{msg("a"), msg("b")}); err != nil {
		t.Fatal(err)
	}
	held, err := s.GroupRead(ctx, "s", "g", "dead", 10, 0)
	if err != nil || len(held) != 2 {
		t.Fatalf("read %v, %v", held, err)
	}
	c.move(time.Minute)
	if err := s.GroupKeep(ctx, "s", "g", "dead", []string{held[1].EntryID}); err != nil {
		t.Fatal(err)
	}
	taken, err := s.GroupClaim(ctx, "s", "g", "alive", time.Minute, 10)
	if err != nil || len(taken) != 1 || taken[0].EntryID != held[0].EntryID || taken[0].Deliveries != 2 {
		t.Fatalf("claimed %v, %v", taken, err)
	}
	c.move(59 * time.Second)
	if taken, _ := s.GroupClaim(ctx, "s", "g", "third", time.Minute, 10); len(taken) != 0 {
		t.Fatalf("claimed %d events idle 59s", len(taken))
	}
	// Pruned of the idle: nobody while both hold an event; "third", who took nothing, was never
	// made a consumer.
	removed, err := s.GroupPrune(ctx, "s", "g", 0)
	if err != nil || len(removed) != 0 {
		t.Fatalf("pruned %v, %v", removed, err)
	}
	if _, err := s.GroupAck(ctx, "s", "g", []string{held[0].EntryID, held[1].EntryID}); err != nil {
		t.Fatal(err)
	}
	c.move(time.Second) // both were last seen a minute ago
	removed, err = s.GroupPrune(ctx, "s", "g", time.Minute)
	if err != nil || strings.Join(removed, " ") != "alive dead" {
		t.Fatalf("pruned %v, %v", removed, err)
	}
}

func TestEntryIDsInEitherWidth(t *testing.T) {
	s := New()
	ctx := context.Background()
	if _, err := s.GroupCreate(ctx, "s", "g", "0-0"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Append(ctx, stream(t, "s", "feed"), 0, "a1", []model.Event{msg("a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GroupRead(ctx, "s", "g", "c", 1, 0); err != nil {
		t.Fatal(err)
	}
	id, err := model.RedisCursor(r.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.GroupAck(ctx, "s", "g", []string{id}); err != nil || n != 1 {
		t.Fatalf("acked %d by %s: %v", n, id, err)
	}
	if _, err := s.GroupAck(ctx, "s", "g", []string{"nope"}); !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("ack of a bad entry id: %v", err)
	}
}

func TestDurabilityBeyondTheProcessIsRefused(t *testing.T) {
	s := New()
	ctx := context.Background()
	ref := stream(t, "s", "main")
	d, err := model.ParseDurability("replicas:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, ref, 0, "a1", []model.Event{msg("x")}, store.WithDurability(d))
	if !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("append waiting for a replica: %v", err)
	}
	if ok, _ := s.SessionExists(ctx, "s"); ok {
		t.Fatal("the refused append wrote")
	}
}

func TestOptions(t *testing.T) {
	ctx := context.Background()
	limits := model.DefaultLimits()
	limits.MaxEventsPerAppend = 2
	s := New(store.WithLimits(limits), store.WithRefs())
	if s.Limits() != limits {
		t.Fatalf("limits %+v", s.Limits())
	}
	ref := stream(t, "s", "main")
	if _, err := s.Append(ctx, ref, 0, "a1", []model.Event{msg("1"), msg("2"), msg("3")}); !errors.Is(err, model.ErrInvalidEvent) {
		t.Fatalf("3 events at a limit of 2: %v", err)
	}
	big := strings.Repeat("z", 70_000)
	if _, err := s.Append(ctx, ref, 0, "a1", []model.Event{msg(big)}); err != nil {
		t.Fatal(err)
	}
	events, err := s.ReadStream(ctx, ref, store.ReadStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := events[0].Fields["body"].(model.ArtifactRef); !ok {
		t.Fatalf("a store of Refs read a body of %T", events[0].Fields["body"])
	}
	if New().Limits() != model.DefaultLimits() {
		t.Fatal("the zero Limits are not the defaults")
	}
}

func TestReadsAreCopies(t *testing.T) {
	s := New()
	ctx := context.Background()
	ref := stream(t, "s", "main")
	given := model.Event{"type": "mutation", "agent": "a", "kind": "k", "list": []any{"x"}}
	if _, err := s.Append(ctx, ref, 0, "a1", []model.Event{given}); err != nil {
		t.Fatal(err)
	}
	given["list"].([]any)[0] = "changed by the writer"
	first, _ := s.ReadStream(ctx, ref, store.ReadStreamOptions{})
	first[0].Fields["list"].([]any)[0] = "changed by a reader"
	second, _ := s.ReadStream(ctx, ref, store.ReadStreamOptions{})
	if got := second[0].Fields["list"].([]any)[0]; got != "x" {
		t.Fatalf("read %q", got)
	}
}

func TestClose(t *testing.T) {
	s := New()
	ctx := context.Background()
	waited := make(chan error, 2)
	go func() {
		_, err := s.WaitSession(ctx, "s", store.WaitOptions{Timeout: time.Hour})
		waited <- err
	}()
	go func() {
		if _, err := s.GroupCreate(ctx, "s", "g", ""); err != nil {
			waited <- err
			return
		}
		_, err := s.GroupRead(ctx, "s", "g", "c", 1, time.Hour)
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond) // most often, both are waiting by now; if not, they fail alike
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-waited; !errors.Is(err, model.ErrBackendUnavailable) {
			t.Errorf("a wait ended by Close: %v", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	_, err := s.Append(ctx, stream(t, "s", "main"), 0, "a1", []model.Event{msg("x")})
	if !errors.Is(err, model.ErrBackendUnavailable) {
		t.Fatalf("an append after Close: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	s := New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Append(ctx, stream(t, "s", "main"), 0, "a1", []model.Event{msg("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("an append with a canceled context: %v", err)
	}
	if ok, _ := s.SessionExists(context.Background(), "s"); ok {
		t.Fatal("written")
	}
}

func TestExpiredLeasesAreLetGo(t *testing.T) {
	s, c := withClock()
	ctx := context.Background()
	for i := range 3 * minSweep {
		if _, err := s.Lease(ctx, store.Acquire, "s", fmt.Sprintf("run-%d", i), "me", time.Second); err != nil {
			t.Fatal(err)
		}
		c.move(time.Second)
	}
	s.mu.Lock()
	held := len(s.leases)
	s.mu.Unlock()
	if held > minSweep {
		t.Fatalf("%d leases kept, none of them live", held)
	}
}
