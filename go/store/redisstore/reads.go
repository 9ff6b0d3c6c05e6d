package redisstore

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/lua"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// How the reads go (the read options' defaults are package store's).
const (
	// readPage is how many entries one round trip of ReadStream or ScanSession reads.
	readPage = 1000
	// maxBlock is the longest one XREAD of WaitSession blocks: a wait is made of slices, so
	// that a lost connection, or a ctx canceled, is noticed within one.
	maxBlock = time.Second
	// artifactReadChunks is how many chunks of an artifact one round trip reads: all at once
	// would have the server copy the whole artifact into one reply.
	artifactReadChunks = 4
)

// records is the session log entries of one read as RecordedEvents: their fields decoded from
// the payloads, each field kept as an artifact put back unless refs (or the store's Refs) leaves
// it a reference, each artifact they reference read once.
func (s *Store) records(ctx context.Context, session string, entries []redis.XMessage, refs bool) ([]model.RecordedEvent, error) {
	out := make([]model.RecordedEvent, len(entries))
	var fetched map[string][]byte
	fetch := func(ref model.ArtifactRef) ([]byte, error) {
		if data, ok := fetched[ref.SHA256]; ok {
			return data, nil
		}
		data, err := s.Artifact(ctx, session, ref.SHA256)
		if err != nil {
			return nil, err
		}
		if fetched == nil {
			fetched = make(map[string][]byte)
		}
		fetched[ref.SHA256] = data
		return data, nil
	}
	for i, entry := range entries {
		event, err := decodeEntry(session, entry)
		if err != nil {
			return nil, err
		}
		if !refs && !s.refs && len(model.RefsIn(event.Fields)) > 0 {
			if event.Fields, err = model.Resolve(event.Fields, fetch); err != nil {
				return nil, err
			}
		}
		out[i] = event
	}
	return out, nil
}

// entryFields is a session log entry's stream name, version and payload (spec section 6:
// fields s, v and p), without decoding the payload.
func entryFields(session string, entry redis.XMessage) (name string, version int64, payload string, err error) {
	text := func(field string) (string, bool) {
		value, ok := entry.Values[field].(string)
		return value, ok
	}
	name, hasName := text("s")
	number, hasVersion := text("v")
	payload, hasPayload := text("p")
	version, perr := strconv.ParseInt(number, 10, 64)
	if !hasName || !hasVersion || !hasPayload || perr != nil {
		return "", 0, "", model.Errorf(model.ErrUnexpectedReply,
			"entry %s of session '%s' is not a ledger event (fields s, v, p)", entry.ID, session)
	}
	return name, version, payload, nil
}

// decodeEntry is a session log entry as written by append.lua: fields s (stream), v (version)
// and p (payload), its id the cursor.
func decodeEntry(session string, entry redis.XMessage) (model.RecordedEvent, error) {
	name, number, payload, err := entryFields(session, entry)
	if err != nil {
		return model.RecordedEvent{}, err
	}
	fields, err := model.Unpack([]byte(payload))
	if err != nil {
		return model.RecordedEvent{}, &model.Error{
			Kind:  model.ErrUnexpectedReply,
			Msg:   "entry " + entry.ID + " of session '" + session + "': " + err.Error(),
			Cause: err,
		}
	}
	return model.RecordedEvent{
		Stream:  model.StreamID{Session: session, Name: name},
		Version: number,
		Cursor:  model.LedgerCursor(entry.ID),
		Fields:  fields,
	}, nil
}

// after is the XRANGE start after a cursor ("": the start of the log).
func after(cursor string) (string, error) {
	if cursor == "" {
		return "-", nil
	}
	id, err := model.RedisCursor(cursor)
	return "(" + id, err
}

// ReadStream returns the stream's events with versions above opts.After, ascending: the
// stream index says which appends hold them and where each one's events lie in the session
// log, which gives them.
func (s *Store) ReadStream(ctx context.Context, stream model.StreamID, opts store.ReadStreamOptions) ([]model.RecordedEvent, error) {
	stream, err := store.CheckReadStream(stream, opts)
	if err != nil {
		return nil, err
	}
	var entries []redis.XMessage
	version := opts.After
	for opts.Limit == 0 || len(entries) < opts.Limit {
		count := readPage
		if opts.Limit > 0 {
			count = min(count, opts.Limit-len(entries))
		}
		page, err := s.readStreamPage(ctx, stream, version+1, count)
		if err != nil {
			return nil, err
		}
		entries = append(entries, page...)
		if len(page) < count {
			break
		}
		// The next page starts after the last entry's version, read off its fields: its
		// payload is decoded once, with the others, below.
		if _, version, _, err = entryFields(stream.Session, page[len(page)-1]); err != nil {
			return nil, err
		}
	}
	return s.records(ctx, stream.Session, entries, opts.Refs)
}

// readStreamPage is up to count log entries of stream from version first on: read_stream.lua,
// or its two reads where the server has no EVALSHA_RO.
func (s *Store) readStreamPage(ctx context.Context, stream model.StreamID, first int64, count int) ([]redis.XMessage, error) {
	keys := s.readStreamKeys(stream.Session, stream.Name)
	index, log := keys[0], keys[1]
	s.mu.Lock()
	script := !s.noReadScript
	s.mu.Unlock()
	if script {
		var raw any
		err := s.do(ctx, "EVALSHA_RO read_stream.lua "+index, func(ctx context.Context) error {
			var err error
			raw, err = lua.ReadStream.RunRO(ctx, s.rdb, keys, first, count).Result()
			return err
		})
		if err == nil {
			return parseReadStreamReply(raw)
		}
		if !strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			return nil, err
		}
		s.mu.Lock()
		s.noReadScript = true // a server older than Redis 7: the two reads below
		s.mu.Unlock()
	}
	return s.readStreamTwice(ctx, index, log, first, count)
}

// readStreamTwice is read_stream.lua as two rounds of reads: the index entries of the appends
// that hold the versions wanted, then each append's events. Entries never change once
// written, so this returns what the script would.
func (s *Store) readStreamTwice(ctx context.Context, index, log string, first int64, count int) ([]redis.XMessage, error) {
	start := strconv.FormatInt(first, 10) + "-0"
	var head, rest []redis.XMessage
	err := s.do(ctx, "XRANGE "+index, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		headCmd := pipe.XRevRangeN(ctx, index, start, "-", 1)
		restCmd := pipe.XRangeN(ctx, index, "("+start, "+", int64(count))
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		head, rest = headCmd.Val(), restCmd.Val()
		return nil
	})
	if err != nil {
		return nil, err
	}
	type span struct {
		cursor     string
		skip, take int64
	}
	var plan []span
	wanted := int64(count)
	for _, entry := range append(head, rest...) {
		msText, _, _ := strings.Cut(entry.ID, "-")
		begins, _ := strconv.ParseInt(msText, 10, 64)
		cursor, _ := entry.Values["c"].(string)
		n, _ := strconv.ParseInt(stringOf(entry.Values["n"]), 10, 64)
		skip := max(0, first-begins)
		take := min(n-skip, wanted)
		if take > 0 && cursor != "" {
			plan = append(plan, span{cursor, skip, take})
			wanted -= take
		}
		if wanted == 0 {
			break
		}
	}
	var out []redis.XMessage
	err = s.do(ctx, "XRANGE "+log, func(ctx context.Context) error {
		out = out[:0]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, len(plan))
		for i, p := range plan {
			cmds[i] = pipe.XRangeN(ctx, log, p.cursor, "+", p.skip+p.take)
		}
		if len(plan) > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		for i, p := range plan {
			found := cmds[i].Val()
			out = append(out, found[min(int64(len(found)), p.skip):min(int64(len(found)), p.skip+p.take)]...)
		}
		return nil
	})
	return out, err
}

func stringOf(v any) string {
	text, _ := v.(string)
	return text
}

// ScanSession returns the session's events after the cursor opts.After, in commit order.
func (s *Store) ScanSession(ctx context.Context, session string, opts store.ScanOptions) ([]model.RecordedEvent, error) {
	if err := s.checkSession(session); err != nil {
		return nil, err
	}
	start, err := after(opts.After)
	if err != nil {
		return nil, err
	}
	if err := store.CheckCount(opts.Limit, "limit"); err != nil {
		return nil, err
	}
	var entries []redis.XMessage
	for opts.Limit == 0 || len(entries) < opts.Limit {
		count := readPage
		if opts.Limit > 0 {
			count = min(count, opts.Limit-len(entries))
		}
		page, err := s.scan(ctx, session, start, count)
		if err != nil {
			return nil, err
		}
		entries = append(entries, page...)
		if len(page) < count {
			break
		}
		start = "(" + page[len(page)-1].ID
	}
	return s.records(ctx, session, entries, opts.Refs)
}

// scan is XRANGE of the session log from start, count entries at most.
func (s *Store) scan(ctx context.Context, session, start string, count int) ([]redis.XMessage, error) {
	log := s.key(session, "log")
	var found []redis.XMessage
	err := s.do(ctx, "XRANGE "+log, func(ctx context.Context) error {
		var err error
		found, err = s.rdb.XRangeN(ctx, log, start, "+", int64(count)).Result()
		return err
	})
	return found, err
}

// Session yields the session's events after the cursor opts.After, in commit order, a page of
// opts.Page a round trip (store.Paged over ScanSession); it stops at the first error, which it
// yields.
func (s *Store) Session(ctx context.Context, session string, opts store.IterOptions) iter.Seq2[model.RecordedEvent, error] {
	return store.Paged(ctx, session, opts, s.ScanSession)
}

// Tail returns the session's last opts.N events (before the cursor opts.Before, when given),
// oldest first: one XREVRANGE with COUNT, whatever the session's length.
func (s *Store) Tail(ctx context.Context, session string, opts store.TailOptions) ([]model.RecordedEvent, error) {
	if err := s.checkSession(session); err != nil {
		return nil, err
	}
	n, err := opts.Count()
	if err != nil {
		return nil, err
	}
	end := "+"
	if opts.Before != "" {
		id, err := model.RedisCursor(opts.Before)
		if err != nil {
			return nil, err
		}
		end = "(" + id
	}
	log := s.key(session, "log")
	var found []redis.XMessage
	err = s.do(ctx, "XREVRANGE "+log, func(ctx context.Context) error {
		var err error
		found, err = s.rdb.XRevRangeN(ctx, log, end, "-", int64(n)).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Reverse(found)
	return s.records(ctx, session, found, opts.Refs)
}

// WaitSession returns the events after the cursor opts.After (or, without one, those committed
// after the call), waiting up to opts.Timeout for the first one: none when nothing came. A
// done ctx ends the wait with its error.
func (s *Store) WaitSession(ctx context.Context, session string, opts store.WaitOptions) ([]model.RecordedEvent, error) {
	if err := s.checkSession(session); err != nil {
		return nil, err
	}
	limit, err := opts.MaxEvents()
	if err != nil {
		return nil, err
	}
	log := s.key(session, "log")
	var last string
	if opts.After != "" {
		var err error
		if last, err = model.RedisCursor(opts.After); err != nil {
			return nil, err
		}
	} else {
		// "$" would be read again on every slice and miss what lands in between: pin it.
		err := s.do(ctx, "XREVRANGE "+log, func(ctx context.Context) error {
			newest, err := s.rdb.XRevRangeN(ctx, log, "+", "-", 1).Result()
			last = "0-0"
			if len(newest) > 0 {
				last = newest[0].ID
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(max(0, opts.Timeout))
	for {
		block := min(maxBlock, time.Until(deadline))
		if block < time.Millisecond {
			block = -1 // no BLOCK: what is there now
		}
		var found []redis.XStream
		err := s.do(ctx, "XREAD "+log, func(ctx context.Context) error {
			var err error
			found, err = s.rdb.XRead(ctx, &redis.XReadArgs{
				Streams: []string{log, last},
				Count:   int64(limit),
				Block:   block,
			}).Result()
			if errors.Is(err, redis.Nil) {
				return nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(found) > 0 && len(found[0].Messages) > 0 {
			return s.records(ctx, session, found[0].Messages, opts.Refs)
		}
		if block < 0 || !time.Now().Before(deadline) {
			return []model.RecordedEvent{}, nil
		}
	}
}

// StreamVersion is the number of events ever appended to the stream (0 for none).
func (s *Store) StreamVersion(ctx context.Context, stream model.StreamID) (int64, error) {
	stream, err := model.NewStreamID(stream.Session, stream.Name)
	if err != nil {
		return 0, err
	}
	meta := s.key(stream.Session, "meta")
	var version int64
	err = s.do(ctx, "HGET "+meta, func(ctx context.Context) error {
		text, err := s.rdb.HGet(ctx, meta, stream.Name).Result()
		if errors.Is(err, redis.Nil) {
			version = 0
			return nil
		}
		if err != nil {
			return err
		}
		if version, err = strconv.ParseInt(text, 10, 64); err != nil {
			return model.Errorf(model.ErrUnexpectedReply, "%s holds version '%s' for stream '%s'", meta, text, stream.Name)
		}
		return nil
	})
	return version, err
}

// SessionExists says whether any event was ever appended to the session: whether it has the
// record of its streams' versions, which every append writes and nothing else does.
func (s *Store) SessionExists(ctx context.Context, session string) (bool, error) {
	if err := s.checkSession(session); err != nil {
		return false, err
	}
	meta := s.key(session, "meta")
	var n int64
	err := s.do(ctx, "EXISTS "+meta, func(ctx context.Context) error {
		var err error
		n, err = s.rdb.Exists(ctx, meta).Result()
		return err
	})
	return n > 0, err
}

// Sessions lists sessions by last activity, newest first (by id among sessions last active in
// the same millisecond), from the sessions index: its 64 buckets read in one round trip.
func (s *Store) Sessions(ctx context.Context, opts store.SessionsOptions) ([]store.Activity, error) {
	if err := store.CheckCount(opts.Limit, "limit"); err != nil {
		return nil, err
	}
	stop := int64(opts.Limit) - 1 // -1: all of them
	var found []redis.Z
	err := s.do(ctx, "ZRANGE "+s.indexKey(0), func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.ZSliceCmd, indexBuckets)
		for bucket := range indexBuckets {
			cmds[bucket] = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
				Key: s.indexKey(bucket), Start: 0, Stop: stop, Rev: true,
			})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		found = found[:0]
		for _, cmd := range cmds {
			found = append(found, cmd.Val()...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	all := make([]store.Activity, 0, len(found))
	for _, z := range found {
		member, _ := z.Member.(string)
		all = append(all, store.Activity{Session: member, Last: time.UnixMilli(int64(z.Score)).UTC()})
	}
	slices.SortFunc(all, func(a, b store.Activity) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return strings.Compare(a.Session, b.Session)
	})
	if opts.Limit > 0 && len(all) > opts.Limit {
		all = all[:opts.Limit]
	}
	return all, nil
}

// Artifact returns the bytes of one of the session's artifacts, by its sha256 in hex
// ("sha256:" before it allowed); an error of kind model.ErrNotFound when there is none such,
// or when it was written for an append that has not committed.
func (s *Store) Artifact(ctx context.Context, session, sha256 string) ([]byte, error) {
	if err := s.checkSession(session); err != nil {
		return nil, err
	}
	digest, err := model.CheckSHA256(sha256)
	if err != nil {
		return nil, err
	}
	data, err := s.artifactBytes(ctx, session, digest)
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, model.Errorf(model.ErrNotFound, "session '%s' holds no artifact sha256:%s", session, digest)
	}
	return data, nil
}

// artifactBytes reads an artifact a few chunks a round trip; nil when the session holds none
// such.
func (s *Store) artifactBytes(ctx context.Context, session, digest string) ([]byte, error) {
	key, uses := s.artifactKey(session, digest), s.key(session, "arts")
	var data []byte
	err := s.do(ctx, "HMGET "+key, func(ctx context.Context) error {
		data = nil
		pipe := s.rdb.Pipeline()
		referenced := pipe.HExists(ctx, uses, digest)
		count := pipe.HLen(ctx, key)
		first := pipe.HMGet(ctx, key, chunkNames(0, artifactReadChunks)...)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		n := int(count.Val())
		if !referenced.Val() || n == 0 {
			return nil // one written for an append yet to commit is not yet one
		}
		parts := first.Val()[:min(n, artifactReadChunks)]
		for start := artifactReadChunks; start < n; start += artifactReadChunks {
			more, err := s.rdb.HMGet(ctx, key, chunkNames(start, min(n, start+artifactReadChunks))...).Result()
			if err != nil {
				return err
			}
			parts = append(parts, more...)
		}
		var whole []byte
		for _, part := range parts {
			chunk, ok := part.(string)
			if !ok {
				return nil // deleted while read
			}
			whole = append(whole, chunk...)
		}
		data = whole
		if data == nil {
			data = []byte{}
		}
		return nil
	})
	return data, err
}

// chunkNames are the field names of an artifact's chunks from start to end (excluded).
func chunkNames(start, end int) []string {
	names := make([]string, 0, end-start)
	for n := start; n < end; n++ {
		names = append(names, strconv.Itoa(n))
	}
	return names
}
