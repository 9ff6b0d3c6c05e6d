package redisstore

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/ledger-bus/ledger-bus/go/internal/lua"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Lease acquires, renews or releases the lease name of session for owner, in one call of
// lease.lua: for Acquire and Renew, the token of owner's holding (1 or more) when owner holds
// the lease afterwards; for Release, 1 when owner let it go; 0 when another owner holds it or,
// to renew or release, when it is gone. A new holding draws the next token of the lease in
// the session's fences hash (lb:{S}:fences, which no deletion removes, so tokens only grow).
// To acquire or renew, ttl must be a millisecond or more, the least Redis keeps a key for. A
// run's lease is named "run-<run_id>" (spec section 7).
func (s *Store) Lease(ctx context.Context, step store.LeaseStep, session, name, owner string, ttl time.Duration) (int64, error) {
	if err := store.CheckLease(step, session, name, ttl); err != nil {
		return 0, err
	}
	keys := s.leaseKeys(session, name)
	var raw any
	err := s.do(ctx, "EVALSHA lease.lua "+keys[0], func(ctx context.Context) error {
		var err error
		raw, err = lua.Lease.Run(ctx, s.rdb, keys, string(step), owner, ttl.Milliseconds(), name).Result()
		return err
	})
	if err != nil {
		return 0, err
	}
	return parseLeaseReply(raw)
}

// OpenAttempts lists the session's requested calls with no terminal event yet, oldest first:
// the session's open hash, attempt_id -> "<run_id>␟<tool>␟<stream>␟<cursor>␟<flag cursor>"
// (spec section 6).
func (s *Store) OpenAttempts(ctx context.Context, session string) ([]model.OpenAttempt, error) {
	if err := s.checkSession(session); err != nil {
		return nil, err
	}
	key := s.key(session, "open")
	var found map[string]string
	err := s.do(ctx, "HGETALL "+key, func(ctx context.Context) error {
		var err error
		found, err = s.rdb.HGetAll(ctx, key).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]model.OpenAttempt, 0, len(found))
	for attempt, value := range found {
		open, err := openAttempt(session, attempt, value)
		if err != nil {
			return nil, err
		}
		out = append(out, open)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Cursor != out[j].Cursor {
			return out[i].Cursor < out[j].Cursor
		}
		return out[i].AttemptID < out[j].AttemptID
	})
	return out, nil
}

// openAttempt reads one entry of a session's open hash.
func openAttempt(session, attempt, value string) (model.OpenAttempt, error) {
	parts := strings.Split(value, "\x1f")
	bad := func() (model.OpenAttempt, error) {
		return model.OpenAttempt{}, model.Errorf(model.ErrUnexpectedReply,
			"open attempt '%s' of session '%s' is recorded as %q, not run␟tool␟stream␟cursor␟flag", attempt, session, value)
	}
	if len(parts) != 5 {
		return bad()
	}
	cursor, err := model.RedisCursor(parts[3])
	if err != nil {
		return bad()
	}
	open := model.OpenAttempt{
		Session:   session,
		AttemptID: attempt,
		RunID:     parts[0],
		Tool:      parts[1],
		Stream:    parts[2],
		Cursor:    model.LedgerCursor(cursor),
	}
	if parts[4] != "" {
		flagged, err := model.RedisCursor(parts[4])
		if err != nil {
			return bad()
		}
		open.FlaggedCursor = model.LedgerCursor(flagged)
	}
	return open, nil
}
