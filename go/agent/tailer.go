package agent

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// The defaults of TailerOptions, as the Python package's.
const (
	DefaultCount         = 100
	DefaultBlock         = 2 * time.Second
	DefaultMaxDeliveries = 5
	DefaultForgetIdle    = time.Hour
	// defaultKeepAlive is how often a running handler's events are kept fresh when the
	// tailer takes over nothing (ClaimIdle 0): a third of 15 s.
	defaultKeepAlive = 5 * time.Second
	// rewindCheck is how often a consumer looks for the newest event it was handed.
	rewindCheck = time.Second
	// ackTimeout bounds the ack of a batch handled before the run's context ended.
	ackTimeout = 10 * time.Second
)

// RewindStream and RewindKind are where and how a rewind is recorded in the session: a
// ledger.rewound mutation in its ledger stream, where an operator looking at the session
// sees it.
const (
	RewindStream = "ledger"
	RewindKind   = "ledger.rewound"
)

// Handler handles one event a tailer delivers. An error leaves the event unacked, to come
// back (see TailerOptions.StopOnError).
type Handler func(ctx context.Context, event model.RecordedEvent) error

// TailerOptions configures a Tailer. The zero value of a field is its default.
type TailerOptions struct {
	// Count is how many events one read hands out (0: 100).
	Count int
	// Block is how long a read waits for new events (0: 2 s).
	Block time.Duration
	// ClaimIdle takes over events other consumers left unacked this long (0: never). Give
	// every consumer of a group the same.
	ClaimIdle time.Duration
	// MaxDeliveries: after this many deliveries an event goes to the group's dead letters
	// (0: 5).
	MaxDeliveries int64
	// KeepAlive is how often, while a handler runs, its batch's idle time is reset, so that a
	// slow handler is not taken for a dead one (0: a third of ClaimIdle, or 5 s).
	KeepAlive time.Duration
	// SkipAgent: events written by this agent are acked without reaching the handler.
	SkipAgent string
	// Types: only events of these types reach the handler (none: all of them); the others
	// are acked.
	Types []string
	// ForgetIdle: on join, consumers of the group idle this long and holding nothing are
	// removed, so that names used once (a restarted process) do not pile up (0: 1 h).
	ForgetIdle time.Duration
	// StopOnError stops Run at a handler's error, which it returns, after acking what was
	// handled before it. Otherwise the event is left unacked and the run goes on: the event
	// comes back through takeover (ClaimIdle) or this consumer's next start, until
	// MaxDeliveries sends it to the dead letters.
	StopOnError bool
	// Logger receives what the tailer does on its own: takeovers, dead letters, rewinds,
	// handler errors left unacked. Nil logs nothing.
	Logger *slog.Logger
}

// Tailer keeps an agent in the conversation: its last-N context, then every new event of the
// session, at least once, through a consumer group on the session log (Redis's own, or a
// store's with the same semantics). Each new event goes to one consumer of the group; it is
// acked once the handler returns, an event a consumer took and never acked (its process died)
// is taken over by another after ClaimIdle, and an event that keeps failing moves to the
// group's dead letters after MaxDeliveries. Consumers in Go, Python and Node may share one
// group. A Tailer is one consumer: use it from one goroutine at a time.
type Tailer struct {
	log      store.Log
	groups   store.Groups
	session  string
	group    string
	consumer string
	opts     TailerOptions
	logger   *slog.Logger

	recovered bool
	// handled is the cursor of the newest event handed out, "" when none (or it was lost).
	handled   string
	nextCheck time.Time
	rewinds   int
}

// NewTailer returns the consumer consumer of the group group on session. The store must have
// consumer groups (store.Groups): an error of kind model.ErrUnsupported when it has not.
func NewTailer(s store.Log, session, group, consumer string, opts TailerOptions) (*Tailer, error) {
	groups, err := store.Need[store.Groups](s)
	if err != nil {
		return nil, err
	}
	for _, name := range []struct{ value, what string }{
		{session, "session id"}, {group, "group name"}, {consumer, "consumer name"},
	} {
		if err := model.CheckName(name.value, name.what); err != nil {
			return nil, err
		}
	}
	if opts.Count <= 0 {
		opts.Count = DefaultCount
	}
	if opts.Block <= 0 {
		opts.Block = DefaultBlock
	}
	if opts.MaxDeliveries <= 0 {
		opts.MaxDeliveries = DefaultMaxDeliveries
	}
	if opts.ForgetIdle <= 0 {
		opts.ForgetIdle = DefaultForgetIdle
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = defaultKeepAlive
		if opts.ClaimIdle > 0 {
			opts.KeepAlive = max(opts.ClaimIdle/3, time.Millisecond)
		}
	}
	opts.Types = slices.Clone(opts.Types)
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Tailer{log: s, groups: groups, session: session, group: group, consumer: consumer,
		opts: opts, logger: logger}, nil
}

// Context returns the session's last n events, oldest first, at a cost O(n) whatever the
// session's length.
func (t *Tailer) Context(ctx context.Context, n int) ([]model.RecordedEvent, error) {
	if n <= 0 {
		return nil, nil
	}
	return t.log.Tail(ctx, t.session, store.TailOptions{N: n})
}

// Join returns the last-n context and makes sure the group exists. A new group starts right
// after the context returned, so nothing committed in between is missed; an existing group
// keeps its place, and forgets its consumers idle for ForgetIdle.
func (t *Tailer) Join(ctx context.Context, n int) ([]model.RecordedEvent, error) {
	events, err := t.Context(ctx, n)
	if err != nil {
		return nil, err
	}
	exists, err := t.groups.GroupExists(ctx, t.session, t.group)
	if err != nil {
		return nil, err
	}
	if exists {
		gone, err := t.groups.GroupPrune(ctx, t.session, t.group, t.opts.ForgetIdle)
		if err != nil {
			return nil, err
		}
		if len(gone) > 0 {
			t.logger.Info("forgot idle consumers", "group", t.group, "count", len(gone))
		}
		return events, nil
	}
	newest := model.CursorZero // the session was empty: whatever it holds by now is new
	switch {
	case len(events) > 0:
		newest = events[len(events)-1].Cursor
	case n <= 0:
		latest, err := t.log.Tail(ctx, t.session, store.TailOptions{N: 1})
		if err != nil {
			return nil, err
		}
		if len(latest) > 0 {
			newest = latest[len(latest)-1].Cursor
		}
	}
	if _, err := t.groups.GroupCreate(ctx, t.session, t.group, newest); err != nil {
		return nil, err
	}
	return events, nil
}

// Poll returns one batch for the handler: first this consumer's own unacked events (after a
// start, or after a read that failed), then events taken over from idle consumers, else new
// events, waiting up to Block for them. Events delivered more than MaxDeliveries times go to
// the dead letters, and events the options filter out are acked, on the way.
func (t *Tailer) Poll(ctx context.Context) ([]store.Delivery, error) {
	batch, err := t.poll(ctx)
	if err != nil {
		// A read that failed may have delivered events to this consumer on the server; they
		// are pending with it, and only a read of its own pending events finds them again.
		t.recovered = false
		return nil, err
	}
	for _, d := range batch {
		if d.Event.Cursor > t.handled {
			t.handled = d.Event.Cursor
		}
	}
	return batch, nil
}

func (t *Tailer) poll(ctx context.Context) ([]store.Delivery, error) {
	if t.handled != "" && (!t.recovered || !time.Now().Before(t.nextCheck)) {
		if err := t.checkRewind(ctx); err != nil {
			return nil, err
		}
	}
	if !t.recovered {
		if _, err := t.Join(ctx, 0); err != nil {
			return nil, err
		}
		own, err := t.groups.GroupPending(ctx, t.session, t.group, t.consumer, t.opts.Count)
		if err != nil {
			return nil, err
		}
		t.recovered = true
		if len(own) > 0 {
			return t.sort(ctx, own)
		}
	}
	if t.opts.ClaimIdle > 0 {
		taken, err := t.groups.GroupClaim(ctx, t.session, t.group, t.consumer, t.opts.ClaimIdle, t.opts.Count)
		if err != nil {
			return nil, err
		}
		if len(taken) > 0 {
			t.logger.Info("took over idle events", "count", len(taken), "idle", t.opts.ClaimIdle)
			return t.sort(ctx, taken)
		}
	}
	found, err := t.groups.GroupRead(ctx, t.session, t.group, t.consumer, t.opts.Count, t.opts.Block)
	if err != nil {
		return nil, err
	}
	return t.sort(ctx, found)
}

// sort dead-letters the exhausted and acks the unwanted; it returns what the handler should
// see.
func (t *Tailer) sort(ctx context.Context, found []store.Delivery) ([]store.Delivery, error) {
	unfiltered := t.opts.SkipAgent == "" && len(t.opts.Types) == 0
	if unfiltered && !slices.ContainsFunc(found, t.exhausted) {
		return found, nil // the common batch: every event goes to the handler
	}
	var keep []store.Delivery
	var skipped []string
	for _, d := range found {
		switch {
		case t.exhausted(d):
			reason := "not acked after " + strconv.FormatInt(d.Deliveries-1, 10) + " deliveries"
			if err := t.groups.GroupDeadLetter(ctx, t.session, t.group, d, reason); err != nil {
				return nil, err
			}
			t.logger.Warn("dead-lettered an event", "entry", d.EntryID, "reason", reason)
		case t.wanted(d.Event):
			keep = append(keep, d)
		default:
			skipped = append(skipped, d.EntryID)
		}
	}
	if len(skipped) > 0 {
		if _, err := t.groups.GroupAck(ctx, t.session, t.group, skipped); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

func (t *Tailer) exhausted(d store.Delivery) bool { return d.Deliveries > t.opts.MaxDeliveries }

func (t *Tailer) wanted(event model.RecordedEvent) bool {
	if t.opts.SkipAgent != "" && event.Agent() == t.opts.SkipAgent {
		return false
	}
	return len(t.opts.Types) == 0 || slices.Contains(t.opts.Types, event.Type())
}

// Ack acknowledges deliveries: the group hands them out no more. It returns how many were
// pending.
func (t *Tailer) Ack(ctx context.Context, deliveries []store.Delivery) (int64, error) {
	if len(deliveries) == 0 {
		return 0, nil
	}
	ids := make([]string, len(deliveries))
	for i, d := range deliveries {
		ids[i] = d.EntryID
	}
	return t.groups.GroupAck(ctx, t.session, t.group, ids)
}

// Run delivers events to handler, a batch at a time (HandleBatch), until ctx is done, when it
// returns nil. It returns the error of a read that failed (after the store's own retries),
// and with StopOnError a handler's.
func (t *Tailer) Run(ctx context.Context, handler Handler) error {
	for ctx.Err() == nil {
		if _, err := t.HandleBatch(ctx, handler); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// HandleBatch polls one batch and hands each of its events to handler, keeping the batch
// fresh (GroupKeep every KeepAlive) while the handler works, then acks what was handled. It
// returns how many events were handled. A handler's error leaves its event unacked, or with
// StopOnError ends the batch and is returned. Once ctx is done no more events are handed
// out; what was handled is acked all the same, and the rest, pending with this consumer, is
// what its next poll hands out first.
func (t *Tailer) HandleBatch(ctx context.Context, handler Handler) (int, error) {
	batch, err := t.Poll(ctx)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	stopKeeping := t.keeping(ctx, batch)
	var handled []store.Delivery
	var failed error
	for _, d := range batch {
		if ctx.Err() != nil {
			// The rest stays pending with this consumer: its next poll reads it first.
			t.recovered = false
			break
		}
		if err := handler(ctx, d.Event); err != nil {
			if t.opts.StopOnError {
				failed = err
				t.recovered = false
				break
			}
			t.logger.Warn("handler failed; event left unacked", "entry", d.EntryID, "err", err)
			continue
		}
		handled = append(handled, d)
	}
	stopKeeping()
	// Acked even when ctx ended meanwhile: what was handled should not come back.
	ackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if _, err := t.Ack(ackCtx, handled); err != nil {
		return len(handled), errors.Join(failed, err)
	}
	return len(handled), failed
}

// keeping resets the idle time of the batch's entries every KeepAlive while the handler
// works on them, in a goroutine; it returns the stop, which waits for the goroutine.
func (t *Tailer) keeping(ctx context.Context, batch []store.Delivery) func() {
	ids := make([]string, len(batch))
	for i, d := range batch {
		ids[i] = d.EntryID
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(t.opts.KeepAlive)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			if err := t.groups.GroupKeep(ctx, t.session, t.group, t.consumer, ids); err != nil {
				t.logger.Warn("could not refresh in-flight events", "count", len(ids), "err", err)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// Stats is what the group says of itself.
func (t *Tailer) Stats(ctx context.Context) (store.GroupStats, error) {
	return t.groups.GroupStats(ctx, t.session, t.group)
}

// DeadLetters returns the group's dead letters, oldest first.
func (t *Tailer) DeadLetters(ctx context.Context) ([]map[string]string, error) {
	return t.groups.GroupDeadLetters(ctx, t.session, t.group)
}

// Rewinds is how many times an event handed out to this consumer was found gone afterwards:
// a failover lost it (the group was rewound with it, and hands out what replaced it as new).
func (t *Tailer) Rewinds() int { return t.rewinds }

// checkRewind looks whether the newest event handed out is still there. A failover that lost
// it rewound the group too, which then hands out what replaced it as new. Looked at after a
// failed read and once a second: the store may have reconnected to a promoted replica without
// a word, and a read of new events cannot tell.
func (t *Tailer) checkRewind(ctx context.Context) error {
	t.nextCheck = time.Now().Add(rewindCheck)
	gone, err := CursorGone(ctx, t.log, t.session, t.handled)
	if err != nil || !gone {
		return err
	}
	t.rewinds++
	observer := t.group + "/" + t.consumer
	if err := ReportRewind(ctx, t.log, t.session, observer, t.handled, "an event", t.logger); err != nil {
		return err
	}
	t.handled = ""
	return nil
}

// CursorGone says whether the event committed at cursor is no longer in the session.
func CursorGone(ctx context.Context, log store.Log, session, cursor string) (bool, error) {
	before, err := previousCursor(cursor)
	if err != nil {
		return false, err
	}
	found, err := log.ScanSession(ctx, session, store.ScanOptions{After: before, Limit: 1, Refs: true})
	if err != nil {
		return false, err
	}
	return len(found) == 0 || found[0].Cursor != cursor, nil
}

// ReportRewind says that observer handled what (an event) at lostCursor and the session no
// longer has it: a log line, and a ledger.rewound mutation in the session's ledger stream, as
// the Python package records it. The mutation that cannot be written is logged, not returned.
func ReportRewind(ctx context.Context, log store.Log, session, observer, lostCursor, what string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	latest, err := log.Tail(ctx, session, store.TailOptions{N: 1, Refs: true})
	if err != nil {
		return err
	}
	var nowLast any // null when the session is empty now
	if len(latest) > 0 {
		nowLast = latest[0].Cursor
	}
	logger.Error("session was rewound: a failover lost acknowledged events", "session", session,
		"observer", observer, "what", what, "lost_cursor", lostCursor, "now_last", nowLast)
	event := model.Event{"type": model.TypeMutation, "agent": observer, "kind": RewindKind,
		"lost_cursor": lostCursor, "what": what, "session_last_cursor": nowLast}
	stream, err := model.NewStreamID(session, RewindStream)
	if err != nil {
		return err
	}
	if _, err := log.Append(ctx, stream, model.AnyVersion, "rewound:"+observer+":"+lostCursor, []model.Event{event}); err != nil {
		if !errors.Is(err, model.ErrLedger) {
			return err
		}
		logger.Error("could not record the rewind in the session", "session", session, "err", err)
	}
	return nil
}

// previousCursor is the greatest cursor below cursor: a scan after it starts at cursor itself.
func previousCursor(cursor string) (string, error) {
	ms, seq, err := model.ParseCursor(cursor)
	if err != nil {
		return "", err
	}
	switch {
	case seq > 0:
		return model.FormatCursor(ms, seq-1), nil
	case ms > 0:
		return model.FormatCursor(ms-1, 999_999), nil
	}
	return model.CursorZero, nil
}

// Watch yields every event of the session committed after the cursor after ("": from the
// start), as it commits, waiting up to block (0: 5 s) at a time, until ctx is done or the
// loop stops; it yields a read's error and stops. A reader on its own: no group, nothing
// acked, nothing kept on the server, so it suits a person watching and read-only
// credentials. A reader that must not miss an event across its own restarts, or shares the
// work with others, is a Tailer.
func Watch(ctx context.Context, log store.Log, session, after string, block time.Duration) iter.Seq2[model.RecordedEvent, error] {
	if block <= 0 {
		block = 5 * time.Second
	}
	if after == "" {
		after = model.CursorZero
	}
	return func(yield func(model.RecordedEvent, error) bool) {
		cursor := after
		for ctx.Err() == nil {
			batch, err := log.WaitSession(ctx, session, store.WaitOptions{After: cursor, Timeout: block})
			if err != nil {
				if ctx.Err() == nil {
					yield(model.RecordedEvent{}, err)
				}
				return
			}
			for _, event := range batch {
				if !yield(event, nil) {
					return
				}
				cursor = event.Cursor
			}
		}
	}
}
