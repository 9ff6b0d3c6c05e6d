package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

func newTailer(t *testing.T, s store.Log, session, group, consumer string, opts agent.TailerOptions) *agent.Tailer {
	t.Helper()
	tailer, err := agent.NewTailer(s, session, group, consumer, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tailer
}

func bodies(events []model.RecordedEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Fields["body"].(string))
	}
	return out
}

func deliveredBodies(batch []store.Delivery) []string {
	var out []string
	for _, d := range batch {
		out = append(out, d.Event.Fields["body"].(string))
	}
	return out
}

// collect is a handler that keeps the bodies it is handed.
type collect struct {
	mu   sync.Mutex
	seen []string
}

func (c *collect) handle(_ context.Context, event model.RecordedEvent) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, event.Fields["body"].(string))
	return nil
}

func (c *collect) bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

func TestTheTailerJoinsWithTheLastNThenHandsEachNewEventToOneConsumer(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		main := streamID(t, "t", "main")
		for i := range 5 {
			appendOne(t, s, main, fmt.Sprintf("old%d", i), msg("w", fmt.Sprintf("old %d", i)))
		}
		opts := agent.TailerOptions{Block: 100 * time.Millisecond, Count: 2}
		a := newTailer(t, s, "t", "agents", "a", opts)
		b := newTailer(t, s, "t", "agents", "b", opts)
		context, err := a.Join(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"old 2", "old 3", "old 4"}; !slices.Equal(bodies(context), want) {
			t.Errorf("the context is %v, want %v", bodies(context), want)
		}
		if _, err := b.Join(ctx, 3); err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			appendOne(t, s, main, fmt.Sprintf("new%d", i), msg("w", fmt.Sprintf("new %d", i)))
		}
		var byA, byB collect
		for range 3 {
			if _, err := a.HandleBatch(ctx, byA.handle); err != nil {
				t.Fatal(err)
			}
			if _, err := b.HandleBatch(ctx, byB.handle); err != nil {
				t.Fatal(err)
			}
		}
		seen := append(byA.bodies(), byB.bodies()...)
		slices.Sort(seen)
		want := []string{"new 0", "new 1", "new 2", "new 3", "new 4", "new 5"}
		if !slices.Equal(seen, want) {
			t.Errorf("the consumers were handed %v, want each of %v once", seen, want)
		}
		if len(byA.bodies()) == 0 || len(byB.bodies()) == 0 {
			t.Errorf("one consumer did all the work: a %v, b %v", byA.bodies(), byB.bodies())
		}
		stats, err := a.Stats(ctx)
		if err != nil || stats.Pending != 0 {
			t.Errorf("the group holds %+v pending (%v), want none", stats, err)
		}
	})
}

func TestAConsumerKilledInsideItsHandlerHasItsEventsTakenOver(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		claim := time.Second
		// Every consumer of the group has the same ClaimIdle; the doomed one keeps its batch
		// fresh ten times a ClaimIdle while its handler runs.
		doomed := newTailer(t, s, "t", "g", "doomed", agent.TailerOptions{Block: 100 * time.Millisecond,
			ClaimIdle: claim, KeepAlive: claim / 10})
		alive := newTailer(t, s, "t", "g", "alive", agent.TailerOptions{Block: 100 * time.Millisecond, ClaimIdle: claim})
		if _, err := doomed.Join(ctx, 0); err != nil {
			t.Fatal(err)
		}
		appendOne(t, s, streamID(t, "t", "main"), "a1", msg("w", "one"), msg("w", "two"))

		killCtx, kill := context.WithCancel(ctx)
		defer kill()
		inside := make(chan struct{})
		ended := make(chan error, 1)
		go func() {
			var once sync.Once
			ended <- doomed.Run(killCtx, func(ctx context.Context, _ model.RecordedEvent) error {
				once.Do(func() { close(inside) })
				<-ctx.Done() // a long tool call, until the process is killed
				return ctx.Err()
			})
		}()
		<-inside

		// While the doomed handler runs, its events are kept fresh: nobody takes them over.
		var early collect
		for deadline := time.Now().Add(2 * claim); time.Now().Before(deadline); {
			if _, err := alive.HandleBatch(ctx, early.handle); err != nil {
				t.Fatal(err)
			}
		}
		if got := early.bodies(); len(got) != 0 {
			t.Errorf("events of a live handler were taken over: %v", got)
		}

		kill()
		if err := <-ended; err != nil {
			t.Fatalf("the killed tailer's Run returned %v", err)
		}
		var taken []store.Delivery
		for deadline := time.Now().Add(10 * claim); len(taken) == 0 && time.Now().Before(deadline); {
			batch, err := alive.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			taken = batch
		}
		if want := []string{"one", "two"}; !slices.Equal(deliveredBodies(taken), want) {
			t.Fatalf("the live consumer took over %v, want %v", deliveredBodies(taken), want)
		}
		for _, d := range taken {
			if d.Deliveries != 2 {
				t.Errorf("%s was delivered %d times, want 2", d.Event.Fields["body"], d.Deliveries)
			}
		}
		if n, err := alive.Ack(ctx, taken); err != nil || n != 2 {
			t.Errorf("acked %d (%v), want 2", n, err)
		}
		if batch, err := alive.Poll(ctx); err != nil || len(batch) != 0 {
			t.Errorf("after the takeover the group still hands out %v (%v)", deliveredBodies(batch), err)
		}
	})
}

func TestARestartedConsumerGetsItsOwnUnackedEventsFirst(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		opts := agent.TailerOptions{Block: 100 * time.Millisecond, StopOnError: true}
		first := newTailer(t, s, "t", "g", "worker", opts)
		if _, err := first.Join(ctx, 0); err != nil {
			t.Fatal(err)
		}
		appendOne(t, s, streamID(t, "t", "main"), "a1", msg("w", "one"))
		crash := errors.New("crash")
		err := first.Run(ctx, func(context.Context, model.RecordedEvent) error { return crash })
		if !errors.Is(err, crash) {
			t.Fatalf("Run returned %v, want the handler's error", err)
		}
		again := newTailer(t, s, "t", "g", "worker", opts)
		own, err := again.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(deliveredBodies(own), []string{"one"}) || own[0].Deliveries != 2 {
			t.Errorf("the restarted consumer got %v, want its own event once more", own)
		}
	})
}

func TestAnEventThatKeepsFailingGoesToTheDeadLetters(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		tailer := newTailer(t, s, "t", "g", "c", agent.TailerOptions{Block: 50 * time.Millisecond,
			MaxDeliveries: 2, ClaimIdle: time.Millisecond})
		if _, err := tailer.Join(ctx, 0); err != nil {
			t.Fatal(err)
		}
		appendOne(t, s, streamID(t, "t", "main"), "a1", msg("w", "poison"), msg("w", "fine"))
		var handled []string
		for range 6 {
			_, err := tailer.HandleBatch(ctx, func(_ context.Context, event model.RecordedEvent) error {
				if event.Fields["body"] == "poison" {
					return errors.New("no")
				}
				handled = append(handled, event.Fields["body"].(string))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !slices.Equal(handled, []string{"fine"}) {
			t.Errorf("handled %v, want [fine] once", handled)
		}
		letters, err := tailer.DeadLetters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(letters) != 1 || letters[0]["reason"] != "not acked after 2 deliveries" || letters[0]["version"] != "1" {
			t.Errorf("dead letters %v, want the poison, not acked after 2 deliveries", letters)
		}
		if stats, err := tailer.Stats(ctx); err != nil || stats.Pending != 0 {
			t.Errorf("the group holds %+v pending (%v), want none", stats, err)
		}
	})
}

func TestFilteredEventsAreAckedWithoutReachingTheHandler(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.EventStore) {
		ctx := testContext(t)
		tailer := newTailer(t, s, "t", "g", "c", agent.TailerOptions{Block: 50 * time.Millisecond,
			SkipAgent: "me", Types: []string{model.TypeMessage}})
		if _, err := tailer.Join(ctx, 0); err != nil {
			t.Fatal(err)
		}
		appendOne(t, s, streamID(t, "t", "main"), "a1", msg("me", "mine"), msg("you", "yours"),
			model.Mutation("you", "x.changed", nil))
		var seen collect
		if n, err := tailer.HandleBatch(ctx, seen.handle); err != nil || n != 1 {
			t.Fatalf("handled %d (%v), want 1", n, err)
		}
		if !slices.Equal(seen.bodies(), []string{"yours"}) {
			t.Errorf("the handler saw %v, want [yours]", seen.bodies())
		}
		if stats, err := tailer.Stats(ctx); err != nil || stats.Pending != 0 {
			t.Errorf("the group holds %+v pending (%v), want none", stats, err)
		}
	})
}

func TestRunStopsWhenItsContextEnds(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	tailer := newTailer(t, s, "t", "g", "c", agent.TailerOptions{Block: 50 * time.Millisecond})
	if _, err := tailer.Join(ctx, 0); err != nil {
		t.Fatal(err)
	}
	appendOne(t, s, streamID(t, "t", "main"), "a1", msg("w", "one"), msg("w", "two"))
	runCtx, stop := context.WithCancel(ctx)
	var handled []string
	err := tailer.Run(runCtx, func(_ context.Context, event model.RecordedEvent) error {
		handled = append(handled, event.Fields["body"].(string))
		stop() // the rest of the batch is not handed out
		return nil
	})
	if err != nil || !slices.Equal(handled, []string{"one"}) {
		t.Fatalf("Run returned %v having handled %v, want nil after [one]", err, handled)
	}
	// What was handled was acked though the context had ended; the rest comes back.
	rest, err := tailer.Poll(ctx)
	if err != nil || !slices.Equal(deliveredBodies(rest), []string{"two"}) {
		t.Errorf("after the stop the group hands out %v (%v), want [two]", deliveredBodies(rest), err)
	}
}

func TestWatchYieldsEventsAsTheyCommit(t *testing.T) {
	s := memory.New()
	ctx := testContext(t)
	main := streamID(t, "t", "main")
	before := appendOne(t, s, main, "a0", msg("w", "before"))
	go func() {
		for i := range 3 {
			time.Sleep(20 * time.Millisecond)
			_, _ = s.Append(ctx, main, model.AnyVersion, fmt.Sprintf("a%d", i+1), []model.Event{msg("w", fmt.Sprintf("after %d", i))})
		}
	}()
	var got []string
	for event, err := range agent.Watch(ctx, s, "t", before.Cursor, 100*time.Millisecond) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, event.Fields["body"].(string))
		if len(got) == 3 {
			break
		}
	}
	if want := []string{"after 0", "after 1", "after 2"}; !slices.Equal(got, want) {
		t.Errorf("watched %v, want %v", got, want)
	}
}

func TestAStoreWithoutGroupsIsRefused(t *testing.T) {
	_, err := agent.NewTailer(logOnly{memory.New()}, "t", "g", "c", agent.TailerOptions{})
	if !errors.Is(err, model.ErrUnsupported) {
		t.Fatalf("NewTailer returned %v, want Unsupported", err)
	}
	if want := "this store (memory) has no consumer groups: it has log"; err.Error() != want {
		t.Errorf("the refusal says %q, want %q", err, want)
	}
}

// TestAnEventLostByAFailoverIsReported removes from Redis the newest event a consumer was
// handed, as a failover to a replica that never had it does: the consumer's next look finds
// it gone, counts it, and records a ledger.rewound mutation in the session.
func TestAnEventLostByAFailoverIsReported(t *testing.T) {
	ctx := testContext(t)
	server := testredis.Start(t)
	s := openRedis(t, server.URL)
	tailer := newTailer(t, s, "t", "g", "c", agent.TailerOptions{Block: 50 * time.Millisecond})
	if _, err := tailer.Join(ctx, 0); err != nil {
		t.Fatal(err)
	}
	appended := appendOne(t, s, streamID(t, "t", "main"), "a1", msg("w", "lost"))
	if n, err := tailer.HandleBatch(ctx, func(context.Context, model.RecordedEvent) error { return nil }); err != nil || n != 1 {
		t.Fatalf("handled %d (%v), want 1", n, err)
	}
	entry, err := model.RedisCursor(appended.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	client := server.Client()
	defer client.Close()
	if err := client.XDel(ctx, "lb:{t}:log", entry).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); tailer.Rewinds() == 0 && time.Now().Before(deadline); {
		if _, err := tailer.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if tailer.Rewinds() != 1 {
		t.Fatalf("the tailer counted %d rewinds, want 1", tailer.Rewinds())
	}
	reports := readStream(t, s, "t", agent.RewindStream)
	if len(reports) != 1 {
		t.Fatalf("the session holds %d rewind reports, want 1", len(reports))
	}
	f := reports[0].Fields
	if f["kind"] != agent.RewindKind || f["lost_cursor"] != appended.Cursor || f["agent"] != "g/c" ||
		f["what"] != "an event" || f["session_last_cursor"] != nil {
		t.Errorf("the rewind report is %v", f)
	}
}
