// Package memory is a store held in this process's memory: the contract of spec/ledger-v1.md
// with the semantics of the Redis store, for tests, demos and programs that need no
// durability. It keeps payloads as Redis does (msgpack, decoded on each read), so what a read
// returns is never an object another caller holds.
package memory

import (
	"context"
	"iter"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Store is a store held in this process, with the capabilities store.Log, store.Attempts and
// store.Groups. It is safe for concurrent use. The zero value is not usable: make one with New.
type Store struct {
	limits model.Limits
	refs   bool
	// now is the clock cursors, leases and idle times are read from.
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]*session
	leases   map[leaseKey]lease
	// fences holds each lease's current token, which a new holding draws: never swept, so
	// that tokens only grow.
	fences map[leaseKey]int64
	// sweepAt is how many leases there may be before the expired ones are let go: twice as
	// many as were live at the last sweep, so sweeping costs O(1) a lease.
	sweepAt int
	// changed is closed, and replaced, by every append and by Close: a waiter takes the current
	// one under mu and waits on it unlocked, so it cannot miss an append made in between.
	changed chan struct{}
	closed  bool
}

var _ store.EventStore = (*Store)(nil)

// New returns an empty Store. Of the options of package store it takes store.WithLimits and
// store.WithRefs: a store in memory has no keys to prefix and nothing to wait for.
func New(opts ...store.Option) *Store {
	set := store.Configure(opts...)
	return &Store{
		limits:   set.Limits.WithDefaults(),
		refs:     set.Refs,
		now:      time.Now,
		sessions: make(map[string]*session),
		leases:   make(map[leaseKey]lease),
		fences:   make(map[leaseKey]int64),
		sweepAt:  minSweep,
		changed:  make(chan struct{}),
	}
}

// entry is one event of a session log.
type entry struct {
	cursor  string
	stream  string
	version int64
	payload []byte
}

// appendKey names an append_id record: append ids are scoped to their stream.
type appendKey struct {
	stream   string
	appendID string
}

// appendRecord is what rule 1 of spec section 3.1 needs of an append written.
type appendRecord struct {
	digest      string
	first, last int64
	cursor      string
}

// session is everything the store holds of one session. A session is made only by an append
// that writes (or a group made on it), so a refused append leaves no trace.
type session struct {
	log []entry
	// streams holds, per stream, the positions of its events in log, in version order.
	streams   map[string][]int
	versions  map[string]int64
	appendIDs map[appendKey]appendRecord
	open      map[string]model.OpenAttempt
	artifacts map[string][]byte
	groups    map[string]*group
}

func newSession() *session {
	return &session{
		streams:   make(map[string][]int),
		versions:  make(map[string]int64),
		appendIDs: make(map[appendKey]appendRecord),
		open:      make(map[string]model.OpenAttempt),
		artifacts: make(map[string][]byte),
		groups:    make(map[string]*group),
	}
}

// newest is the cursor of the session's last event, model.CursorZero when it has none.
func (s *session) newest() string {
	if len(s.log) == 0 {
		return model.CursorZero
	}
	return s.log[len(s.log)-1].cursor
}

// above is the position of the first entry whose cursor is above cursor (at or above it with
// orAt): a binary search, as cursors of one width sort as text.
func (s *session) above(cursor string, orAt bool) int {
	return sort.Search(len(s.log), func(i int) bool {
		if orAt {
			return s.log[i].cursor >= cursor
		}
		return s.log[i].cursor > cursor
	})
}

// Limits is what an append to this store may hold.
func (s *Store) Limits() model.Limits { return s.limits }

// Tier says what kind of store this is: "memory".
func (s *Store) Tier() string { return "memory" }

// Close has every call that follows, and every wait in progress, end with an error of kind
// model.ErrBackendUnavailable, as a Redis store's calls do once it is closed. It is safe to
// call twice.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.wake()
	}
	return nil
}

// wake ends every wait on s.changed; the caller holds mu.
func (s *Store) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// lock takes mu for a call, unless ctx is done or the store closed.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return model.Errorf(model.ErrBackendUnavailable, "the memory store is closed")
	}
	return nil
}

// wait waits, unlocked, until changed is closed, the deadline passes or ctx is done.
func (s *Store) wait(ctx context.Context, changed <-chan struct{}, deadline time.Time) error {
	left := deadline.Sub(s.now())
	if left <= 0 {
		return nil
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-changed:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Append writes events to stream by the rules of spec section 3.1, in their order:
// a used append_id returns its original result (or an IdempotencyConflictError), a stale
// expected version is a VersionConflictError, and otherwise every event is written. An append
// made under a lease holding that is over (store.WithFence) is a *model.LeaseLostError,
// checked before anything else, as the Redis store's script checks it. Its arguments are
// checked first, as every store checks them (store.CheckAppend). Only local durability can be
// had of a memory store; asking for more is an error of kind model.ErrInvalidInput.
func (s *Store) Append(ctx context.Context, stream model.StreamID, expected int64, appendID string, events []model.Event, opts ...store.AppendOption) (model.AppendResult, error) {
	stream, settings, err := store.CheckAppend(stream, expected, appendID, opts)
	if err != nil {
		return model.AppendResult{}, err
	}
	if d := settings.Durability; d != nil && !d.Local() {
		return model.AppendResult{}, model.Errorf(model.ErrInvalidInput,
			"a memory store keeps nothing beyond this process: durability %s cannot be had", d)
	}
	prepared, err := model.PrepareAppend(stream, appendID, events, s.limits)
	if err != nil {
		return model.AppendResult{}, err
	}
	if err := s.lock(ctx); err != nil {
		return model.AppendResult{}, err
	}
	defer s.mu.Unlock()

	state := s.sessions[stream.Session]
	if state == nil {
		state = newSession() // kept only once the append writes
	}
	// The fence first of all, the append_id included, as the Redis store's script checks it.
	if err := s.checkFenceLocked(stream.Session, settings.Fence); err != nil {
		return model.AppendResult{}, err
	}
	key := appendKey{stream.Name, appendID}
	if prior, ok := state.appendIDs[key]; ok {
		if prior.digest != prepared.Digest {
			return model.AppendResult{}, &model.IdempotencyConflictError{Stream: stream, AppendID: appendID}
		}
		return result(stream, prior, true), nil
	}
	version := state.versions[stream.Name]
	if expected != model.AnyVersion && expected != version {
		return model.AppendResult{}, &model.VersionConflictError{Stream: stream, Expected: expected, Actual: version}
	}

	s.sessions[stream.Session] = state
	cursors := cursorsAfter(state.newest(), s.now().UnixMilli(), len(prepared.Payloads))
	positions := state.streams[stream.Name]
	for i, payload := range prepared.Payloads {
		positions = append(positions, len(state.log))
		state.log = append(state.log, entry{
			cursor:  cursors[i],
			stream:  stream.Name,
			version: version + int64(i) + 1,
			payload: payload,
		})
		if i < len(prepared.Notes) {
			state.note(stream, prepared.Notes[i], cursors[i])
		}
	}
	state.streams[stream.Name] = positions
	for _, artifact := range prepared.Artifacts {
		if _, ok := state.artifacts[artifact.SHA256]; !ok {
			state.artifacts[artifact.SHA256] = artifact.Data
		}
	}
	record := appendRecord{
		digest: prepared.Digest,
		first:  version + 1,
		last:   version + int64(len(prepared.Payloads)),
		cursor: cursors[len(cursors)-1],
	}
	state.versions[stream.Name] = record.last
	state.appendIDs[key] = record
	s.wake()
	return result(stream, record, false), nil
}

func result(stream model.StreamID, r appendRecord, deduplicated bool) model.AppendResult {
	return model.AppendResult{
		Stream:       stream,
		FirstVersion: r.first,
		LastVersion:  r.last,
		Cursor:       r.cursor,
		Deduplicated: deduplicated,
		Durability:   model.Local().String(),
	}
}

// cursorsAfter is the cursors of count events committed at nowMs after the cursor last, as
// Redis takes stream entry ids: the clock, but never at or below the last one (a clock that
// went back, or several events in one millisecond, go on in the sequence).
func cursorsAfter(last string, nowMs int64, count int) []string {
	ms, seq, err := model.ParseCursor(last)
	if err != nil {
		ms, seq = 0, 0 // last is always one of this store's own cursors
	}
	found := make([]string, count)
	for i := range found {
		switch {
		case nowMs > ms:
			ms, seq = nowMs, 0
		case seq >= maxSeq:
			// The sequence has six digits: past them the cursor would no longer sort as text,
			// so the millisecond moves on instead.
			ms, seq = ms+1, 0
		default:
			seq++
		}
		found[i] = model.FormatCursor(ms, seq)
	}
	return found
}

const maxSeq = 999_999

// ReadStream returns the stream's events with versions above opts.After, ascending.
func (s *Store) ReadStream(ctx context.Context, stream model.StreamID, opts store.ReadStreamOptions) ([]model.RecordedEvent, error) {
	stream, err := store.CheckReadStream(stream, opts)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var found []entry
	if state := s.sessions[stream.Session]; state != nil {
		positions := state.streams[stream.Name]
		start := sort.Search(len(positions), func(i int) bool {
			return state.log[positions[i]].version > opts.After
		})
		positions = positions[start:]
		if opts.Limit > 0 && len(positions) > opts.Limit {
			positions = positions[:opts.Limit]
		}
		found = make([]entry, len(positions))
		for i, p := range positions {
			found[i] = state.log[p]
		}
	}
	s.mu.Unlock()
	return s.records(ctx, stream.Session, found, opts.Refs)
}

// ScanSession returns the session's events after the cursor opts.After, in commit order.
func (s *Store) ScanSession(ctx context.Context, session string, opts store.ScanOptions) ([]model.RecordedEvent, error) {
	if err := model.CheckName(session, "session id"); err != nil {
		return nil, err
	}
	after, err := cursorOrZero(opts.After)
	if err != nil {
		return nil, err
	}
	if err := store.CheckCount(opts.Limit, "limit"); err != nil {
		return nil, err
	}
	found, err := s.scan(ctx, session, after, opts.Limit)
	if err != nil {
		return nil, err
	}
	return s.records(ctx, session, found, opts.Refs)
}

// scan is the session's entries after the cursor after, at most limit of them (0: all).
func (s *Store) scan(ctx context.Context, session, after string, limit int) ([]entry, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.scanLocked(session, after, limit), nil
}

func (s *Store) scanLocked(session, after string, limit int) []entry {
	state := s.sessions[session]
	if state == nil {
		return nil
	}
	found := state.log[state.above(after, false):]
	if limit > 0 && len(found) > limit {
		found = found[:limit]
	}
	return append([]entry(nil), found...)
}

// Session yields the session's events after the cursor opts.After, in commit order, a page of
// opts.Page a round trip (store.Paged over ScanSession); it stops at the first error, which it
// yields.
func (s *Store) Session(ctx context.Context, session string, opts store.IterOptions) iter.Seq2[model.RecordedEvent, error] {
	return store.Paged(ctx, session, opts, s.ScanSession)
}

// Tail returns the session's last opts.N events (before the cursor opts.Before, when given),
// oldest first.
func (s *Store) Tail(ctx context.Context, session string, opts store.TailOptions) ([]model.RecordedEvent, error) {
	if err := model.CheckName(session, "session id"); err != nil {
		return nil, err
	}
	n, err := opts.Count()
	if err != nil {
		return nil, err
	}
	var before string
	if opts.Before != "" {
		var err error
		if before, err = cursor(opts.Before); err != nil {
			return nil, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	var found []entry
	if state := s.sessions[session]; state != nil {
		end := len(state.log)
		if before != "" {
			end = state.above(before, true)
		}
		found = append(found, state.log[max(0, end-n):end]...)
	}
	s.mu.Unlock()
	return s.records(ctx, session, found, opts.Refs)
}

// WaitSession returns the events after the cursor opts.After (or, without one, those committed
// after the call), waiting up to opts.Timeout for the first one: none when nothing came. A
// done ctx ends the wait with its error.
func (s *Store) WaitSession(ctx context.Context, session string, opts store.WaitOptions) ([]model.RecordedEvent, error) {
	if err := model.CheckName(session, "session id"); err != nil {
		return nil, err
	}
	var after string
	if opts.After != "" {
		var err error
		if after, err = cursor(opts.After); err != nil {
			return nil, err
		}
	}
	limit, err := opts.MaxEvents()
	if err != nil {
		return nil, err
	}
	deadline := s.now().Add(max(0, opts.Timeout))
	for {
		if err := s.lock(ctx); err != nil {
			return nil, err
		}
		if after == "" {
			after = model.CursorZero
			if state := s.sessions[session]; state != nil {
				after = state.newest()
			}
		}
		found := s.scanLocked(session, after, limit)
		changed := s.changed
		s.mu.Unlock()
		if len(found) > 0 || !s.now().Before(deadline) {
			return s.records(ctx, session, found, opts.Refs)
		}
		if err := s.wait(ctx, changed, deadline); err != nil {
			return nil, err
		}
	}
}

// StreamVersion is the number of events ever appended to the stream (0 for none).
func (s *Store) StreamVersion(ctx context.Context, stream model.StreamID) (int64, error) {
	stream, err := model.NewStreamID(stream.Session, stream.Name)
	if err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if state := s.sessions[stream.Session]; state != nil {
		return state.versions[stream.Name], nil
	}
	return 0, nil
}

// SessionExists says whether any event was ever appended to the session.
func (s *Store) SessionExists(ctx context.Context, session string) (bool, error) {
	if err := model.CheckName(session, "session id"); err != nil {
		return false, err
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	state := s.sessions[session]
	return state != nil && len(state.log) > 0, nil
}

// Sessions lists the sessions with events by last activity, newest first (by id among
// sessions last active in the same millisecond).
func (s *Store) Sessions(ctx context.Context, opts store.SessionsOptions) ([]store.Activity, error) {
	if err := store.CheckCount(opts.Limit, "limit"); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	type last struct{ session, cursor string }
	var all []last
	for id, state := range s.sessions {
		if len(state.log) > 0 {
			all = append(all, last{id, state.newest()})
		}
	}
	s.mu.Unlock()
	ms := func(c string) string { return c[:strings.IndexByte(c, '-')] }
	sort.Slice(all, func(i, j int) bool {
		if a, b := ms(all[i].cursor), ms(all[j].cursor); a != b {
			return a > b
		}
		return all[i].session < all[j].session
	})
	if opts.Limit > 0 && len(all) > opts.Limit {
		all = all[:opts.Limit]
	}
	found := make([]store.Activity, len(all))
	for i, a := range all {
		found[i] = store.Activity{Session: a.session, Last: model.CursorTime(a.cursor)}
	}
	return found, nil
}

// Artifact returns a copy of the bytes of one of the session's artifacts, by its sha256 in
// hex ("sha256:" before it allowed); an error of kind model.ErrNotFound when there is none
// such.
func (s *Store) Artifact(ctx context.Context, session, sha256 string) ([]byte, error) {
	if err := model.CheckName(session, "session id"); err != nil {
		return nil, err
	}
	digest, err := checkSHA(sha256)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.artifactLocked(session, digest)
}

func (s *Store) artifactLocked(session, digest string) ([]byte, error) {
	if state := s.sessions[session]; state != nil {
		if data, ok := state.artifacts[digest]; ok {
			return append([]byte(nil), data...), nil
		}
	}
	return nil, model.Errorf(model.ErrNotFound, "session '%s' holds no artifact sha256:%s", session, digest)
}

// records decodes entries of session as recorded events, each field kept as an artifact put
// back unless refs (or the store's Refs) leaves it a reference.
func (s *Store) records(ctx context.Context, session string, found []entry, refs bool) ([]model.RecordedEvent, error) {
	if len(found) == 0 {
		return []model.RecordedEvent{}, nil
	}
	out := make([]model.RecordedEvent, len(found))
	for i, e := range found {
		record, err := s.record(ctx, session, e, refs)
		if err != nil {
			return nil, err
		}
		out[i] = record
	}
	return out, nil
}

func (s *Store) record(ctx context.Context, session string, e entry, refs bool) (model.RecordedEvent, error) {
	fields, err := model.Unpack(e.payload)
	if err != nil {
		return model.RecordedEvent{}, err
	}
	if !refs && !s.refs && len(model.RefsIn(fields)) > 0 {
		fields, err = model.Resolve(fields, func(ref model.ArtifactRef) ([]byte, error) {
			return s.Artifact(ctx, session, ref.SHA256)
		})
		if err != nil {
			return model.RecordedEvent{}, err
		}
	}
	return model.RecordedEvent{
		Stream:  model.StreamID{Session: session, Name: e.stream},
		Version: e.version,
		Cursor:  e.cursor,
		Fields:  fields,
	}, nil
}

// cursor is text checked as a cursor, in the fixed width that sorts as text.
func cursor(text string) (string, error) {
	id, err := model.RedisCursor(text)
	if err != nil {
		return "", err
	}
	return model.LedgerCursor(id), nil
}

// cursorOrZero is cursor, with "" the start of the log.
func cursorOrZero(text string) (string, error) {
	if text == "" {
		return model.CursorZero, nil
	}
	return cursor(text)
}

// checkSHA is an artifact's sha256 as the store keys it: 64 lowercase hex digits, "sha256:"
// before them allowed, as the Python package reads it.
func checkSHA(text string) (string, error) {
	digest := strings.ToLower(strings.TrimPrefix(text, "sha256:"))
	ok := len(digest) == 64
	for i := 0; ok && i < len(digest); i++ {
		c := digest[i]
		ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
	}
	if !ok {
		return "", model.Errorf(model.ErrInvalidInput, "not a sha256: '%s'", text)
	}
	return digest, nil
}
