package memory

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// leaseKey names a lease: a session's lease name.
type leaseKey struct {
	session string
	name    string
}

// lease is a lease held: its owner, until when.
type lease struct {
	owner string
	until time.Time
}

// Lease acquires, renews or releases the lease name of session for owner, as the Redis store's
// lease script does: for Acquire and Renew, the token of owner's holding when owner holds the
// lease afterwards (a new holding draws the lease's next token); for Release, 1 when owner let
// it go; 0 when another owner holds it or, to renew or release, when it is gone. To acquire or
// renew, ttl must be a millisecond or more, the least Redis keeps a key for.
func (s *Store) Lease(ctx context.Context, step store.LeaseStep, session, name, owner string, ttl time.Duration) (int64, error) {
	if err := store.CheckLease(step, session, name, ttl); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	key := leaseKey{session, name}
	now := s.now()
	holder, held := s.holderLocked(key, now)
	switch {
	case step == store.Acquire && held && holder != owner:
		return 0, nil
	case step != store.Acquire && (!held || holder != owner):
		return 0, nil
	case step == store.Release:
		delete(s.leases, key)
		return 1, nil
	}
	if !held {
		s.fences[key]++ // a new holding: the same owner's again while it holds keeps its token
	}
	s.leases[key] = lease{owner: owner, until: now.Add(ttl)}
	s.sweepLocked(now)
	return s.fences[key], nil
}

// holderLocked is the owner of the lease key at now, and whether anyone holds it; an expired
// lease is let go, as Redis lets its key go. The caller holds mu.
func (s *Store) holderLocked(key leaseKey, now time.Time) (string, bool) {
	held, ok := s.leases[key]
	if ok && !now.Before(held.until) {
		delete(s.leases, key)
		ok = false
	}
	return held.owner, ok
}

// checkFenceLocked refuses an append made under fence in session unless its holding lasts:
// the lease held by its owner, at its token. The caller holds mu.
func (s *Store) checkFenceLocked(session string, fence *model.Fence) error {
	if fence == nil {
		return nil
	}
	key := leaseKey{session, fence.Lease}
	holder, held := s.holderLocked(key, s.now())
	if token := s.fences[key]; token != fence.Token || !held || holder != fence.Owner {
		return &model.LeaseLostError{Fence: *fence, Token: token}
	}
	return nil
}

// minSweep is the fewest leases a sweep waits for.
const minSweep = 64

// sweepLocked lets go of expired leases once there are sweepAt of them, as Redis expires keys
// nobody reads again. The caller holds mu.
func (s *Store) sweepLocked(now time.Time) {
	if len(s.leases) < s.sweepAt {
		return
	}
	for key, held := range s.leases {
		if !now.Before(held.until) {
			delete(s.leases, key)
		}
	}
	s.sweepAt = max(minSweep, 2*len(s.leases))
}

// OpenAttempts lists the session's requested calls with no terminal event yet, oldest first.
func (s *Store) OpenAttempts(ctx context.Context, session string) ([]model.OpenAttempt, error) {
	if err := model.CheckName(session, "session id"); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	found := []model.OpenAttempt{}
	if state := s.sessions[session]; state != nil {
		for _, open := range state.open {
			found = append(found, open)
		}
	}
	s.mu.Unlock()
	sort.Slice(found, func(i, j int) bool {
		if found[i].Cursor != found[j].Cursor {
			return found[i].Cursor < found[j].Cursor
		}
		return found[i].AttemptID < found[j].AttemptID
	})
	return found, nil
}

// The notes of spec/ledger-v1.md section 6, one an event, as model.PrepareAppend makes them and
// the append script reads them: kind, then its fields, joined by U+001F.
const (
	noteOpens    = "o" // attempt_id, run_id ("" for none), tool
	noteCloses   = "c" // attempt_id
	noteFlags    = "f" // attempt_id, the flagged call's cursor as "<ms>-<seq>" ("" for any)
	noteSeparate = "\x1f"
)

// note keeps the session's open attempts by what one event committed at cursor does to them:
// a call opens its attempt, a result closes it, a flag marks only the attempt whose call it
// names, once. A tool declared safe to replay (note "s") is kept by the Redis store for the
// reconciler's queries, which this SDK does not make, so it is not kept here.
func (s *session) note(stream model.StreamID, note, cursor string) {
	if note == "" {
		return
	}
	parts := strings.Split(note, noteSeparate)
	field := func(i int) string {
		if i < len(parts) {
			return parts[i]
		}
		return ""
	}
	attempt := field(1)
	switch parts[0] {
	case noteOpens:
		s.open[attempt] = model.OpenAttempt{
			Session:   stream.Session,
			AttemptID: attempt,
			RunID:     field(2),
			Tool:      field(3),
			Stream:    stream.Name,
			Cursor:    cursor,
		}
	case noteCloses:
		delete(s.open, attempt)
	case noteFlags:
		open, ok := s.open[attempt]
		if !ok || open.FlaggedCursor != "" {
			return
		}
		if call := field(2); call != "" && !sameCursor(call, open.Cursor) {
			return // a late flag of an earlier attempt of this id
		}
		open.FlaggedCursor = cursor
		s.open[attempt] = open
	}
}

// sameCursor says whether a and b are one cursor, whatever their width.
func sameCursor(a, b string) bool {
	ams, aseq, err := model.ParseCursor(a)
	if err != nil {
		return false
	}
	bms, bseq, err := model.ParseCursor(b)
	return err == nil && ams == bms && aseq == bseq
}
