package memory

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// group is a consumer group as Redis keeps one: the cursor of the last event delivered, the
// entries delivered and not acked with who holds them, its consumers, its dead letters. Entry
// ids are the events' cursors.
type group struct {
	last    string
	pending map[string]*pending
	// seen is when each consumer last read, claimed or kept something.
	seen map[string]time.Time
	dead []map[string]string
}

// pending is one entry delivered and not acked.
type pending struct {
	consumer   string
	deliveries int64
	// since is when it was last delivered or kept: what its idle time is counted from.
	since time.Time
}

// checkGroup checks the names a group call takes; consumer only when given.
func checkGroup(session, name string, consumer ...string) error {
	if err := model.CheckName(session, "session id"); err != nil {
		return err
	}
	if err := model.CheckName(name, "group name"); err != nil {
		return err
	}
	for _, c := range consumer {
		if err := model.CheckName(c, "consumer name"); err != nil {
			return err
		}
	}
	return nil
}

// groupLocked is the session's group; an error of kind model.ErrNotFound when there is none.
// The caller holds mu.
func (s *Store) groupLocked(session, name string) (*session, *group, error) {
	if state := s.sessions[session]; state != nil {
		if found := state.groups[name]; found != nil {
			return state, found, nil
		}
	}
	return nil, nil, model.Errorf(model.ErrNotFound, "no consumer group '%s' on session '%s'", name, session)
}

// handed is one entry a group hands out, before its event is decoded.
type handed struct {
	entry      entry
	deliveries int64
}

// deliverLocked hands the entries at cursors to consumer: each becomes (or stays) pending with
// it, its idle time reset and its delivery count one more. A call that hands out nothing makes
// no consumer, as the Python package's memory store has it. The caller holds mu.
func (s *Store) deliverLocked(state *session, found *group, consumer string, cursors []string) []handed {
	now := s.now()
	if _, known := found.seen[consumer]; len(cursors) > 0 || known {
		found.seen[consumer] = now
	}
	out := make([]handed, 0, len(cursors))
	for _, c := range cursors {
		held := found.pending[c]
		if held == nil {
			held = &pending{}
			found.pending[c] = held
		}
		held.consumer, held.since = consumer, now
		held.deliveries++
		at := state.above(c, true)
		if at == len(state.log) || state.log[at].cursor != c {
			// Not in the log: nothing to redo. This store never removes events, so this is
			// only a guard.
			delete(found.pending, c)
			continue
		}
		out = append(out, handed{state.log[at], held.deliveries})
	}
	return out
}

// deliveries decodes what a group handed out.
func (s *Store) deliveries(ctx context.Context, session string, found []handed) ([]store.Delivery, error) {
	out := make([]store.Delivery, len(found))
	for i, h := range found {
		event, err := s.record(ctx, session, h.entry, false)
		if err != nil {
			return nil, err
		}
		out[i] = store.Delivery{Event: event, EntryID: h.entry.cursor, Deliveries: h.deliveries}
	}
	return out, nil
}

// GroupCreate makes the group, delivering what commits after the cursor after ("": after what
// the session holds now); false, changing nothing, when it exists.
func (s *Store) GroupCreate(ctx context.Context, session, name, after string) (bool, error) {
	if err := checkGroup(session, name); err != nil {
		return false, err
	}
	var start string
	if after != "" {
		var err error
		if start, err = cursor(after); err != nil {
			return false, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	state := s.sessions[session]
	if state == nil {
		// As Redis makes the session log for a group (MKSTREAM): the session still has no event.
		state = newSession()
		s.sessions[session] = state
	}
	if _, ok := state.groups[name]; ok {
		return false, nil
	}
	if start == "" {
		start = state.newest()
	}
	state.groups[name] = &group{
		last:    start,
		pending: make(map[string]*pending),
		seen:    make(map[string]time.Time),
	}
	return true, nil
}

// GroupExists says whether the session has the group.
func (s *Store) GroupExists(ctx context.Context, session, name string) (bool, error) {
	if err := checkGroup(session, name); err != nil {
		return false, err
	}
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	_, _, err := s.groupLocked(session, name)
	return err == nil, nil
}

// GroupRead hands consumer up to count events not yet delivered to the group (at least one),
// waiting up to block for the first. A done ctx ends the wait with its error.
func (s *Store) GroupRead(ctx context.Context, session, name, consumer string, count int, block time.Duration) ([]store.Delivery, error) {
	if err := checkGroup(session, name, consumer); err != nil {
		return nil, err
	}
	count = max(1, count)
	deadline := s.now().Add(max(0, block))
	for {
		if err := s.lock(ctx); err != nil {
			return nil, err
		}
		state, found, err := s.groupLocked(session, name)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		var fresh []string
		for _, e := range state.log[state.above(found.last, false):] {
			if len(fresh) == count {
				break
			}
			fresh = append(fresh, e.cursor)
		}
		if len(fresh) > 0 || !s.now().Before(deadline) {
			if len(fresh) > 0 {
				found.last = fresh[len(fresh)-1]
			}
			handed := s.deliverLocked(state, found, consumer, fresh)
			s.mu.Unlock()
			return s.deliveries(ctx, session, handed)
		}
		changed := s.changed
		s.mu.Unlock()
		if err := s.wait(ctx, changed, deadline); err != nil {
			return nil, err
		}
	}
}

// GroupPending hands consumer up to count (at least one) of its own pending events again, in
// commit order, each counted once more.
func (s *Store) GroupPending(ctx context.Context, session, name, consumer string, count int) ([]store.Delivery, error) {
	return s.redeliver(ctx, session, name, consumer, count, func(held *pending, _ time.Time) bool {
		return held.consumer == consumer
	})
}

// GroupClaim moves to consumer up to count events (at least one) pending at least minIdle with
// any consumer, in commit order, each counted once more.
func (s *Store) GroupClaim(ctx context.Context, session, name, consumer string, minIdle time.Duration, count int) ([]store.Delivery, error) {
	minIdle = max(0, minIdle)
	return s.redeliver(ctx, session, name, consumer, count, func(held *pending, now time.Time) bool {
		return now.Sub(held.since) >= minIdle
	})
}

// redeliver hands consumer the first count pending entries that take says it may have.
func (s *Store) redeliver(ctx context.Context, session, name, consumer string, count int, take func(*pending, time.Time) bool) ([]store.Delivery, error) {
	if err := checkGroup(session, name, consumer); err != nil {
		return nil, err
	}
	count = max(1, count)
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	state, found, err := s.groupLocked(session, name)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	now := s.now()
	var chosen []string
	for c, held := range found.pending {
		if take(held, now) {
			chosen = append(chosen, c)
		}
	}
	sort.Strings(chosen)
	if len(chosen) > count {
		chosen = chosen[:count]
	}
	handed := s.deliverLocked(state, found, consumer, chosen)
	s.mu.Unlock()
	return s.deliveries(ctx, session, handed)
}

// entryIDs checks entry ids, as the cursors this store makes them.
func entryIDs(ids []string) ([]string, error) {
	out := make([]string, len(ids))
	for i, id := range ids {
		c, err := cursor(id)
		if err != nil {
			return nil, model.Errorf(model.ErrInvalidInput, "not an entry id: '%s'", id)
		}
		out[i] = c
	}
	return out, nil
}

// GroupKeep resets the idle time of the entries consumer still works on, without counting a
// delivery; the entries become consumer's.
func (s *Store) GroupKeep(ctx context.Context, session, name, consumer string, ids []string) error {
	if err := checkGroup(session, name, consumer); err != nil {
		return err
	}
	ids, err := entryIDs(ids)
	if err != nil || len(ids) == 0 {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	_, found, err := s.groupLocked(session, name)
	if err != nil {
		return err
	}
	now := s.now()
	found.seen[consumer] = now
	for _, c := range ids {
		if held := found.pending[c]; held != nil {
			held.consumer, held.since = consumer, now
		}
	}
	return nil
}

// GroupAck acknowledges entries: how many were pending.
func (s *Store) GroupAck(ctx context.Context, session, name string, ids []string) (int64, error) {
	if err := checkGroup(session, name); err != nil {
		return 0, err
	}
	ids, err := entryIDs(ids)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	_, found, err := s.groupLocked(session, name)
	if err != nil {
		return 0, err
	}
	var acked int64
	for _, c := range ids {
		if _, ok := found.pending[c]; ok {
			delete(found.pending, c)
			acked++
		}
	}
	return acked, nil
}

// GroupDeadLetter records the delivery as a dead letter with the reason, and acks it, in one
// step.
func (s *Store) GroupDeadLetter(ctx context.Context, session, name string, delivery store.Delivery, reason string) error {
	if err := checkGroup(session, name); err != nil {
		return err
	}
	ids, err := entryIDs([]string{delivery.EntryID})
	if err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	_, found, err := s.groupLocked(session, name)
	if err != nil {
		return err
	}
	found.dead = append(found.dead, deadLetter(delivery, reason))
	delete(found.pending, ids[0])
	return nil
}

// deadLetter is what a dead letter records of the event a group gave up on: the same fields
// as the Python package's and every other store's.
func deadLetter(delivery store.Delivery, reason string) map[string]string {
	event := delivery.Event
	return map[string]string{
		"entry":      delivery.EntryID,
		"cursor":     event.Cursor,
		"stream":     event.Stream.Name,
		"version":    strconv.FormatInt(event.Version, 10),
		"event_id":   event.EventID(),
		"deliveries": strconv.FormatInt(delivery.Deliveries, 10),
		"reason":     reason,
	}
}

// GroupDeadLetters returns the group's dead letters, oldest first (none for a group that does
// not exist, as a Redis dead-letter stream that was never written).
func (s *Store) GroupDeadLetters(ctx context.Context, session, name string) ([]map[string]string, error) {
	if err := checkGroup(session, name); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []map[string]string{}
	if _, found, err := s.groupLocked(session, name); err == nil {
		for _, letter := range found.dead {
			copied := make(map[string]string, len(letter))
			for k, v := range letter {
				copied[k] = v
			}
			out = append(out, copied)
		}
	}
	return out, nil
}

// GroupPrune removes, in one step, the consumers idle at least idle that hold nothing pending;
// it returns them, by name.
func (s *Store) GroupPrune(ctx context.Context, session, name string, idle time.Duration) ([]string, error) {
	if err := checkGroup(session, name); err != nil {
		return nil, err
	}
	idle = max(0, idle)
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	_, found, err := s.groupLocked(session, name)
	if err != nil {
		return nil, err
	}
	holding := make(map[string]bool)
	for _, held := range found.pending {
		holding[held.consumer] = true
	}
	now := s.now()
	removed := []string{}
	for consumer, seen := range found.seen {
		if !holding[consumer] && now.Sub(seen) >= idle {
			removed = append(removed, consumer)
		}
	}
	sort.Strings(removed)
	for _, consumer := range removed {
		delete(found.seen, consumer)
	}
	return removed, nil
}

// GroupStats says how many entries the group holds pending and the cursor of the last event
// it delivered (model.CursorZero before any).
func (s *Store) GroupStats(ctx context.Context, session, name string) (store.GroupStats, error) {
	if err := checkGroup(session, name); err != nil {
		return store.GroupStats{}, err
	}
	if err := s.lock(ctx); err != nil {
		return store.GroupStats{}, err
	}
	defer s.mu.Unlock()
	_, found, err := s.groupLocked(session, name)
	if err != nil {
		return store.GroupStats{}, err
	}
	return store.GroupStats{Pending: int64(len(found.pending)), LastDelivered: found.last}, nil
}
