package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/lua"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Consumer groups on a session's log, kept as the Python package keeps them: a Redis consumer
// group on <prefix>:{S}:log, delivery counts from its pending list, and a dead-letter stream
// <prefix>:{S}:dead:<group> per group. A group made by one SDK is read by the others.

// checkGroup checks the names a group call takes: the session id, the group's and, when
// given, the consumer's, each by the session-id rule.
func (s *Store) checkGroup(session, group string, consumer ...string) error {
	if err := s.checkSession(session); err != nil {
		return err
	}
	if err := model.CheckName(group, "group name"); err != nil {
		return err
	}
	for _, name := range consumer {
		if err := model.CheckName(name, "consumer name"); err != nil {
			return err
		}
	}
	return nil
}

// noGroup is the error of a call that names a group the session does not have.
func noGroup(session, group string) error {
	return model.Errorf(model.ErrNotFound, "no consumer group '%s' on session '%s'", group, session)
}

// groupCall runs call through the store's retries (what names it in a refusal), a refusal
// because the group does not exist becoming model.ErrNotFound. The group is looked up rather
// than the error parsed, as the Python package does: servers word NOGROUP differently, and a
// transaction or a script wraps it in text of its own.
func (s *Store) groupCall(ctx context.Context, session, group, what string, call func(context.Context) error) error {
	err := s.do(ctx, what, call)
	if err == nil || !errors.Is(err, model.ErrBackendRefused) {
		return err
	}
	exists, lookErr := s.groupExists(ctx, session, group)
	if lookErr == nil && !exists {
		return noGroup(session, group)
	}
	return err
}

// GroupCreate makes the consumer group, delivering what commits after the cursor after ("":
// after what the session holds now); false, changing nothing, when the group exists.
func (s *Store) GroupCreate(ctx context.Context, session, group, after string) (bool, error) {
	if err := s.checkGroup(session, group); err != nil {
		return false, err
	}
	start := "$"
	if after != "" {
		var err error
		if start, err = model.RedisCursor(after); err != nil {
			return false, err
		}
	}
	log := s.key(session, "log")
	created := true
	err := s.do(ctx, "XGROUP CREATE "+log, func(ctx context.Context) error {
		err := s.rdb.XGroupCreateMkStream(ctx, log, group, start).Err()
		// A retry after a lost reply meets the group its first try made, and says false,
		// as the Python package's does: the group is there either way.
		if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
			created = false
			return nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	return created, nil
}

// GroupExists says whether the session has the consumer group.
func (s *Store) GroupExists(ctx context.Context, session, group string) (bool, error) {
	if err := s.checkGroup(session, group); err != nil {
		return false, err
	}
	return s.groupExists(ctx, session, group)
}

// groupExists is GroupExists, the names already checked.
func (s *Store) groupExists(ctx context.Context, session, group string) (bool, error) {
	_, found, err := s.groupInfo(ctx, session, group)
	return found, err
}

// groupInfo is what XINFO GROUPS says of the group; found is false when the session has no
// such group (or no log at all).
func (s *Store) groupInfo(ctx context.Context, session, group string) (info redis.XInfoGroup, found bool, err error) {
	log := s.key(session, "log")
	var groups []redis.XInfoGroup
	err = s.do(ctx, "XINFO GROUPS "+log, func(ctx context.Context) error {
		var err error
		groups, err = s.rdb.XInfoGroups(ctx, log).Result()
		if err != nil && isNoSuchKey(err) {
			groups, err = nil, nil
		}
		return err
	})
	if err != nil {
		return info, false, err
	}
	for _, g := range groups {
		if g.Name == group {
			return g, true, nil
		}
	}
	return info, false, nil
}

// isNoSuchKey reports the refusal of XINFO on a log that does not exist yet.
func isNoSuchKey(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(strings.ToLower(reply.Error()), "no such key")
}

// GroupRead hands consumer up to count events not yet delivered to the group (at least one),
// waiting up to block for the first; block <= 0 does not wait. Each is pending with consumer
// until acked, delivered once. A done ctx ends the wait with its error.
//
// A read whose reply was lost on the way back is retried by first reading the consumer's own
// pending events, as spec section 3.6 asks: the lost read may have delivered them, and a read
// of new events would never see them again.
func (s *Store) GroupRead(ctx context.Context, session, group, consumer string, count int, block time.Duration) ([]store.Delivery, error) {
	if err := s.checkGroup(session, group, consumer); err != nil {
		return nil, err
	}
	n := int64(max(1, count))
	if block <= 0 {
		return s.groupRead(ctx, session, group, consumer, n, -1) // go-redis: no BLOCK
	}
	// The wait is cut into slices shorter than the store's timeout, each a call of its own:
	// the store stops retrying a call its timeout after the call began, and a connection lost
	// late in a long wait must still leave time for the retry that reads what it delivered.
	// The last slice ends with ctx's deadline, so that the server ends the wait when ctx does
	// whether or not the client watches ctx while it reads.
	end := time.Now().Add(block)
	deadline, ok := ctx.Deadline()
	endsWithCtx := ok && deadline.Before(end)
	if endsWithCtx {
		end = deadline
	}
	for {
		// BLOCK takes milliseconds: a wait below one still waits.
		wait := max(min(time.Until(end), s.timeout/2), time.Millisecond)
		found, err := s.groupRead(ctx, session, group, consumer, n, wait)
		if err != nil || len(found) > 0 {
			return found, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !time.Now().Before(end) {
			if endsWithCtx {
				// The server may answer "nothing" a moment before ctx's deadline passes
				// here: the wait ended because ctx did, so the read ends with ctx's error.
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return nil, nil
		}
	}
}

// groupRead is one XREADGROUP of new entries, waiting up to wait (-1: not at all), retried
// through lost connections, each retry reading the consumer's own pending entries first.
func (s *Store) groupRead(ctx context.Context, session, group, consumer string, count int64, wait time.Duration) ([]store.Delivery, error) {
	log := s.key(session, "log")
	var (
		entries []redis.XMessage
		own     bool
		tries   int
	)
	err := s.groupCall(ctx, session, group, "XREADGROUP "+log, func(ctx context.Context) error {
		tries++
		if tries > 1 {
			mine, err := s.groupOwn(ctx, log, group, consumer, count)
			if err != nil {
				return err
			}
			if len(mine) > 0 {
				entries, own = mine, true
				return nil
			}
		}
		streams, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: consumer, Streams: []string{log, ">"}, Count: count, Block: wait,
		}).Result()
		if errors.Is(err, redis.Nil) {
			entries = nil // the wait ended with nothing new
			return nil
		}
		entries = groupEntries(streams)
		return err
	})
	if err != nil {
		return nil, err
	}
	if own {
		return s.groupOwnPending(ctx, session, group, entries)
	}
	return s.groupDeliveries(ctx, session, group, entries, false)
}

// GroupPending hands consumer up to count of its own pending events again (at least one),
// oldest first: after its restart, or a failed read. Each is counted once more, and its
// Deliveries says so.
func (s *Store) GroupPending(ctx context.Context, session, group, consumer string, count int) ([]store.Delivery, error) {
	if err := s.checkGroup(session, group, consumer); err != nil {
		return nil, err
	}
	log := s.key(session, "log")
	var entries []redis.XMessage
	err := s.groupCall(ctx, session, group, "XREADGROUP "+log, func(ctx context.Context) error {
		var err error
		entries, err = s.groupOwn(ctx, log, group, consumer, int64(max(1, count)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.groupOwnPending(ctx, session, group, entries)
}

// groupOwn reads the consumer's own pending entries (XREADGROUP from id 0), which counts each
// as delivered once more.
func (s *Store) groupOwn(ctx context.Context, log, group, consumer string, count int64) ([]redis.XMessage, error) {
	streams, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{log, "0"}, Count: count, Block: -1,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return groupEntries(streams), nil
}

// groupEntries are the entries of the one stream an XREADGROUP read.
func groupEntries(streams []redis.XStream) []redis.XMessage {
	if len(streams) == 0 {
		return nil
	}
	return streams[0].Messages
}

// groupOwnPending turns entries pending with a consumer into deliveries with their counts. An entry
// deleted from the log since it was delivered comes back with no fields: there is nothing to
// redo, so it is acked and left out.
func (s *Store) groupOwnPending(ctx context.Context, session, group string, entries []redis.XMessage) ([]store.Delivery, error) {
	kept, gone := groupGone(entries)
	if len(gone) > 0 {
		if _, err := s.groupAck(ctx, session, group, gone); err != nil {
			return nil, err
		}
	}
	return s.groupDeliveries(ctx, session, group, kept, true)
}

// groupGone separates the entries that still hold an event from the ids of those deleted from
// the log.
func groupGone(entries []redis.XMessage) (kept []redis.XMessage, gone []string) {
	kept = entries[:0:0]
	for _, entry := range entries {
		if len(entry.Values) == 0 {
			gone = append(gone, entry.ID)
			continue
		}
		kept = append(kept, entry)
	}
	return kept, gone
}

// groupDeliveries turns log entries into deliveries, their events whole (artifacts put back,
// unless the store was opened with Refs). With counted, each carries its delivery count from
// the group's pending list; otherwise it was delivered for the first time just now.
func (s *Store) groupDeliveries(ctx context.Context, session, group string, entries []redis.XMessage, counted bool) ([]store.Delivery, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	var counts map[string]int64
	if counted {
		var err error
		if counts, err = s.groupCounts(ctx, session, group, entries); err != nil {
			return nil, err
		}
	}
	events, err := s.records(ctx, session, entries, false)
	if err != nil {
		return nil, err
	}
	out := make([]store.Delivery, len(entries))
	for i, entry := range entries {
		times, ok := counts[entry.ID]
		if !ok {
			times = 1
		}
		out[i] = store.Delivery{Event: events[i], EntryID: entry.ID, Deliveries: times}
	}
	return out, nil
}

// groupCounts reads how often the group handed out each entry, one XPENDING per entry in
// one round trip.
func (s *Store) groupCounts(ctx context.Context, session, group string, entries []redis.XMessage) (map[string]int64, error) {
	log := s.key(session, "log")
	counts := make(map[string]int64, len(entries))
	err := s.groupCall(ctx, session, group, "XPENDING "+log, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.XPendingExtCmd, len(entries))
		for i, entry := range entries {
			cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: log, Group: group, Start: entry.ID, End: entry.ID, Count: 1,
			})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, cmd := range cmds {
			for _, item := range cmd.Val() {
				counts[item.ID] = item.RetryCount
			}
		}
		return nil
	})
	return counts, err
}

// GroupClaim moves to consumer up to count events (at least one) pending at least minIdle with
// any consumer, each counted once more: the events of a consumer that died.
func (s *Store) GroupClaim(ctx context.Context, session, group, consumer string, minIdle time.Duration, count int) ([]store.Delivery, error) {
	if err := s.checkGroup(session, group, consumer); err != nil {
		return nil, err
	}
	log := s.key(session, "log")
	var entries []redis.XMessage
	err := s.groupCall(ctx, session, group, "XAUTOCLAIM "+log, func(ctx context.Context) error {
		var err error
		entries, _, err = s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: log, Group: group, Consumer: consumer,
			MinIdle: max(0, minIdle), Start: "0-0", Count: int64(max(1, count)),
		}).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	// Redis 7 drops entries deleted from the log out of the pending list by itself; an older
	// server hands them over with no fields, and there is nothing to redo for those either.
	return s.groupOwnPending(ctx, session, group, entries)
}

// GroupKeep resets the idle time of entries consumer still works on, so that no GroupClaim
// takes them from it. Their delivery counts do not change: XCLAIM with JUSTID does not count a
// delivery, as the Python package relies on.
func (s *Store) GroupKeep(ctx context.Context, session, group, consumer string, entryIDs []string) error {
	if err := s.checkGroup(session, group, consumer); err != nil {
		return err
	}
	if err := checkGroupEntries(entryIDs); err != nil || len(entryIDs) == 0 {
		return err
	}
	log := s.key(session, "log")
	return s.groupCall(ctx, session, group, "XCLAIM "+log, func(ctx context.Context) error {
		return s.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
			Stream: log, Group: group, Consumer: consumer, MinIdle: 0, Messages: entryIDs,
		}).Err()
	})
}

// GroupAck marks entries handled; it returns how many of them were pending.
func (s *Store) GroupAck(ctx context.Context, session, group string, entryIDs []string) (int64, error) {
	if err := s.checkGroup(session, group); err != nil {
		return 0, err
	}
	if err := checkGroupEntries(entryIDs); err != nil || len(entryIDs) == 0 {
		return 0, err
	}
	return s.groupAck(ctx, session, group, entryIDs)
}

// groupAck is GroupAck, the names and ids already checked.
func (s *Store) groupAck(ctx context.Context, session, group string, entryIDs []string) (int64, error) {
	log := s.key(session, "log")
	var acked int64
	err := s.groupCall(ctx, session, group, "XACK "+log, func(ctx context.Context) error {
		var err error
		acked, err = s.rdb.XAck(ctx, log, group, entryIDs...).Result()
		return err
	})
	if err != nil || acked > 0 {
		return acked, err
	}
	// XACK acks nothing of a group that is not there, and says so no differently than of
	// entries acked before: the group is looked up to tell the two apart.
	if exists, err := s.groupExists(ctx, session, group); err != nil {
		return 0, err
	} else if !exists {
		return 0, noGroup(session, group)
	}
	return 0, nil
}

// checkGroupEntries refuses what is not a Redis stream entry id ("<ms>-<seq>"), before a
// transaction could half-apply a command the server refuses only when it runs it.
func checkGroupEntries(ids []string) error {
	decimal := func(text string) bool {
		if text == "" || text[0] == '+' {
			return false
		}
		_, err := strconv.ParseUint(text, 10, 64)
		return err == nil
	}
	for _, id := range ids {
		ms, seq, ok := strings.Cut(id, "-")
		if !ok || !decimal(ms) || !decimal(seq) {
			return model.Errorf(model.ErrInvalidInput, "not a consumer group entry id: '%s'", id)
		}
	}
	return nil
}

// deadLetterFields is what a dead letter records of the event a group gave up on: the fields, in
// their order, that the Python package records.
func deadLetterFields(delivery store.Delivery, reason string) []any {
	event := delivery.Event
	return []any{
		"entry", delivery.EntryID,
		"cursor", event.Cursor,
		"stream", event.Stream.Name,
		"version", strconv.FormatInt(event.Version, 10),
		"event_id", event.EventID(),
		"deliveries", strconv.FormatInt(delivery.Deliveries, 10),
		"reason", reason,
	}
}

// GroupDeadLetter records the delivery in the group's dead-letter stream with the reason and
// acks it, in one MULTI/EXEC (the session's keys share a slot, so it works on a cluster too).
func (s *Store) GroupDeadLetter(ctx context.Context, session, group string, delivery store.Delivery, reason string) error {
	if err := s.checkGroup(session, group); err != nil {
		return err
	}
	if err := checkGroupEntries([]string{delivery.EntryID}); err != nil {
		return err
	}
	// A transaction is not rolled back when one of its commands fails as it runs: an XACK
	// refused for want of the group would leave a dead letter of a group that is not there.
	// Look first.
	if exists, err := s.groupExists(ctx, session, group); err != nil {
		return err
	} else if !exists {
		return noGroup(session, group)
	}
	log, dead := s.key(session, "log"), s.key(session, "dead:"+group)
	fields := deadLetterFields(delivery, reason)
	return s.groupCall(ctx, session, group, "MULTI XADD "+dead+" XACK "+log, func(ctx context.Context) error {
		_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: dead, ID: "*", Values: fields})
			pipe.XAck(ctx, log, group, delivery.EntryID)
			return nil
		})
		return err
	})
}

// GroupDeadLetters returns the group's dead letters, oldest first: the fields each recorded
// (entry, cursor, stream, version, event_id, deliveries, reason). A group that does not exist
// has none, as the Python package says.
func (s *Store) GroupDeadLetters(ctx context.Context, session, group string) ([]map[string]string, error) {
	if err := s.checkGroup(session, group); err != nil {
		return nil, err
	}
	dead := s.key(session, "dead:"+group)
	var entries []redis.XMessage
	err := s.do(ctx, "XRANGE "+dead, func(ctx context.Context) error {
		var err error
		entries, err = s.rdb.XRange(ctx, dead, "-", "+").Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(entries))
	for _, entry := range entries {
		letter := make(map[string]string, len(entry.Values))
		for name, value := range entry.Values {
			letter[name] = fmt.Sprint(value)
		}
		out = append(out, letter)
	}
	return out, nil
}

// GroupPrune removes the group's consumers idle at least idle that hold nothing pending, in one
// script (prune_consumers.lua), so that a consumer reading between a look and its removal
// keeps what it holds; it returns their names.
func (s *Store) GroupPrune(ctx context.Context, session, group string, idle time.Duration) ([]string, error) {
	if err := s.checkGroup(session, group); err != nil {
		return nil, err
	}
	keys := s.pruneConsumersKeys(session)
	var reply any
	err := s.groupCall(ctx, session, group, "EVALSHA prune_consumers.lua "+keys[0], func(ctx context.Context) error {
		var err error
		reply, err = lua.PruneConsumers.Run(ctx, s.rdb, keys, group, max(0, idle).Milliseconds()).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	return parseNamesReply("prune_consumers.lua", reply)
}

// GroupStats says how many events the group holds delivered and not acked, and the cursor of
// the last it delivered.
func (s *Store) GroupStats(ctx context.Context, session, group string) (store.GroupStats, error) {
	if err := s.checkGroup(session, group); err != nil {
		return store.GroupStats{}, err
	}
	info, found, err := s.groupInfo(ctx, session, group)
	if err != nil {
		return store.GroupStats{}, err
	}
	if !found {
		return store.GroupStats{}, noGroup(session, group)
	}
	return store.GroupStats{Pending: info.Pending, LastDelivered: model.LedgerCursor(info.LastDeliveredID)}, nil
}
