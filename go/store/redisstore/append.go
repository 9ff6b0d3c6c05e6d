package redisstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/lua"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

const (
	// indexRefresh is how often the sessions index is refreshed for one session by one store,
	// at most: it is an index of last activity, not a second record, and refreshing it on every
	// append would cost a round trip each.
	indexRefresh = 1000 // ms
	// openIndexRefresh is how often an append that opens attempts lists its session in the
	// open-sessions index, at most: a reconciler forgets a session only once its entry is
	// older than its prune window (never below twice this), so an entry this recent is there
	// whenever the script opens an attempt.
	openIndexRefresh = 60_000 // ms
	// openMemberSep is between a session id and the token of an append's provisional entry in
	// the open-sessions index.
	openMemberSep = "\x1f"
	// artifactChunk is the size of one chunk of an artifact: one command each, so that no
	// command holds the server for long.
	artifactChunk = 1024 * 1024
	// artifactUploadTTL is how long an artifact written for an append lives until an append
	// references it: the artifacts of an append that never commits go by themselves.
	artifactUploadTTL = time.Hour
	// writeTries is how often an artifact, or an append whose artifact went before it ran, is
	// written before the store gives up.
	writeTries = 3
)

// Append writes events to stream by the rules of spec section 3.1, in their order, in one call
// of append.lua: a used append_id returns its original result (Deduplicated) or an
// *model.IdempotencyConflictError, a stream shorter than this store was acknowledged is an
// *model.VersionConflictError of kind model.ErrHistoryRewound (see AcceptHistory), a stale
// expected version an *model.VersionConflictError, and otherwise every event is written. Fields
// kept as artifacts are written first. A call whose reply is lost is retried with the same
// append_id until the store's timeout, and lands once. An append whose durability (the
// store's, or store.WithDurability's) is not confirmed in time is an
// *model.DurabilityNotConfirmedError carrying what was committed. An append made under a
// lease (store.WithFence) whose holding is over is a *model.LeaseLostError: the script checks
// the holding before anything else, the append_id included.
func (s *Store) Append(ctx context.Context, stream model.StreamID, expected int64, appendID string, events []model.Event, opts ...store.AppendOption) (model.AppendResult, error) {
	var none model.AppendResult
	stream, settings, err := store.CheckAppend(stream, expected, appendID, opts)
	if err != nil {
		return none, err
	}
	level := s.durability
	if d := settings.Durability; d != nil {
		level = *d
	}
	if err := checkDurability(level); err != nil {
		return none, err
	}
	prepared, err := model.PrepareAppend(stream, appendID, events, s.limits)
	if err != nil {
		return none, err
	}
	digest, err := hex.DecodeString(prepared.Digest)
	if err != nil || len(digest) != 32 {
		return none, model.Errorf(model.ErrInvalidInput, "the append's digest is not a sha256: %q", prepared.Digest)
	}
	session := stream.Session
	known, generation := s.acknowledged(stream)
	waits := !level.Local()
	keys := s.appendKeys(session, stream.Name)
	rewrite := ""
	if waits {
		// Written again even as a duplicate, so that the WAIT after it covers the original.
		rewrite = "1"
	}
	fence := ""
	if settings.Fence != nil {
		fence = settings.Fence.LuaArg()
	}
	args := make([]any, 0, 10+len(prepared.Payloads)+2*len(prepared.Uses))
	args = append(args, stream.Name, expected, appendID, string(digest), len(prepared.Payloads),
		known, rewrite, generation, fence)
	for _, payload := range prepared.Payloads {
		args = append(args, payload)
	}
	args = append(args, model.LuaNotes(prepared.Notes))
	for _, use := range prepared.Uses {
		args = append(args, use.SHA256, use.Count)
	}

	listed := ""
	if prepared.OpensAttempts() {
		if listed, err = s.listOpenSession(ctx, session); err != nil {
			return none, err
		}
	}
	if len(prepared.Artifacts) > 0 {
		shas := make([]string, len(prepared.Artifacts))
		for i, artifact := range prepared.Artifacts {
			shas[i] = artifact.SHA256
		}
		keys = append(keys, s.artifactKeys(session, shas)...)
		if err := s.putArtifacts(ctx, session, prepared.Artifacts, false); err != nil {
			return none, err
		}
	}
	var reply appendReply
	var acks waited
	for tries := 0; ; tries++ {
		if s.beforeAppend != nil {
			s.beforeAppend(tries)
		}
		if reply, acks, err = s.sendAppend(ctx, keys, args, level); err != nil {
			// Whether it committed is not known: a provisional listing is left to name the
			// session, which the reconciler forgets once it finds nothing open.
			return none, err
		}
		if reply.kind != appendNoArtifact || tries+1 >= writeTries {
			break
		}
		// An artifact written before went before the call ran (a deletion, its TTL): again.
		if err := s.putArtifacts(ctx, session, prepared.Artifacts, true); err != nil {
			return none, err
		}
	}
	if listed != "" {
		s.settleOpenListing(ctx, session, listed, reply.committed())
	}
	if !reply.committed() {
		return none, s.refused(stream, expected, appendID, known, settings.Fence, reply)
	}
	result := model.AppendResult{
		Stream:       stream,
		FirstVersion: reply.first,
		LastVersion:  reply.last,
		Cursor:       model.LedgerCursor(reply.cursor),
		Deduplicated: reply.kind == appendDup,
		Durability:   model.Local().String(),
	}
	if !result.Deduplicated {
		ms, _, _ := model.ParseCursor(result.Cursor)
		s.touchIndex(ctx, session, ms)
	}
	if waits {
		if result, err = confirm(result, level, acks); err != nil {
			return none, err
		}
	}
	// Acknowledged: a later append that finds the stream shorter in the same generation was
	// rewound by a failover.
	s.acknowledge(stream, result.LastVersion, reply.generation)
	return result, nil
}

// checkDurability refuses a level that would wait forever: WAIT with a timeout of 0 does.
func checkDurability(level model.Durability) error {
	if !level.Local() && level.Timeout < time.Millisecond {
		return model.Errorf(model.ErrInvalidInput, "durability %s needs a timeout of a millisecond or more, got %s",
			level, level.Timeout)
	}
	return nil
}

// acknowledged is what this store was acknowledged of stream: the highest version, and its
// generation.
func (s *Store) acknowledged(stream model.StreamID) (known, generation int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.written[stream]; w != nil {
		return w.acknowledged, w.generation
	}
	return 0, 0
}

// acknowledge records that stream was acknowledged up to last, in generation.
func (s *Store) acknowledge(stream model.StreamID, last, generation int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.written[stream]
	if w == nil {
		w = &written{}
		remember(s.written, stream, w)
	}
	w.acknowledge(last, generation)
}

// AcceptHistory forgets the versions of stream acknowledged to this store, once a
// HistoryRewound has been dealt with: later appends build on the stream as it now is.
func (s *Store) AcceptHistory(stream model.StreamID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.written[stream]; w != nil {
		w.acknowledged = 0
	}
}

// refused is the error of an append.lua reply that wrote nothing; fence is the holding the
// append named (nil: none).
func (s *Store) refused(stream model.StreamID, expected int64, appendID string, known int64, fence *model.Fence, reply appendReply) error {
	switch reply.kind {
	case appendFenced:
		if fence == nil {
			// Only an append that names a fence is fenced: the server runs another script.
			return model.Errorf(model.ErrUnexpectedReply, "append.lua refused an append made under no lease: %q", reply.kind)
		}
		return &model.LeaseLostError{Fence: *fence, Token: reply.token}
	case appendRewound:
		return &model.VersionConflictError{Stream: stream, Expected: known, Actual: reply.version, Rewound: true}
	case appendConflict:
		return &model.VersionConflictError{Stream: stream, Expected: expected, Actual: reply.version}
	case appendIdem:
		return &model.IdempotencyConflictError{Stream: stream, AppendID: appendID}
	case appendArchived:
		return &model.SessionArchivedError{Session: stream.Session, Archive: reply.where}
	case appendNoArtifact:
		return model.Errorf(model.ErrBackendUnavailable, "an artifact of the append kept going before the append: %s", reply.key)
	}
	return model.Errorf(model.ErrBackendRefused, "redis refused the permission (ACL): this user may not %s %s; nothing written",
		reply.command, reply.key)
}

// waited is what the WAIT (or WAITAOF) after an append answered.
type waited struct {
	// local is whether the primary's AOF was fsynced (WAITAOF); replicas how many replicas
	// confirmed.
	local    bool
	replicas int
	// err is why it could not be asked, nil when it was.
	err error
}

// sendAppend runs append.lua, retried through lost connections until the store's timeout,
// and the WAIT (or WAITAOF) after it when level asks for more than local.
func (s *Store) sendAppend(ctx context.Context, keys []string, args []any, level model.Durability) (appendReply, waited, error) {
	var raw any
	var acks waited
	err := s.do(ctx, "EVALSHA append.lua "+keys[0], func(ctx context.Context) error {
		var err error
		if level.Local() {
			raw, err = lua.Append.Run(ctx, s.rdb, keys, args...).Result()
			return err
		}
		raw, acks, err = s.sendWaiting(ctx, keys, args, level)
		return err
	})
	if err != nil {
		return appendReply{}, waited{}, err
	}
	reply, err := parseAppendReply(raw)
	return reply, acks, err
}

// connector is a client that hands out a connection of its own: a *redis.Client.
type connector interface {
	Conn() *redis.Conn
}

// sendWaiting runs append.lua and then its WAIT (or WAITAOF) on one connection to the primary
// of the session: WAIT counts the replicas that have everything that connection wrote. Two
// commands rather than one pipeline, so that the WAIT's read waits as long as it asks.
func (s *Store) sendWaiting(ctx context.Context, keys []string, args []any, level model.Durability) (any, waited, error) {
	var node connector
	if s.cluster != nil {
		primary, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, waited{}, err
		}
		node = primary
	} else if c, ok := s.rdb.(connector); ok {
		node = c
	} else {
		return nil, waited{}, model.Errorf(model.ErrUnsupported,
			"durability %s needs a connection of its own, which a %T cannot give", level, s.rdb)
	}
	conn := node.Conn()
	defer conn.Close()
	if level.AOF {
		if err := s.checkWaitAOF(ctx, conn, level); err != nil {
			return nil, waited{}, err
		}
	}
	raw, err := lua.Append.Run(ctx, conn, keys, args...).Result()
	if err != nil {
		if text := err.Error(); s.cluster != nil && (strings.HasPrefix(text, "MOVED ") || strings.HasPrefix(text, "ASK ")) {
			s.cluster.ReloadState(ctx)
			return nil, waited{}, slotMoved{err}
		}
		return nil, waited{}, err
	}
	var acks waited
	if level.AOF {
		counts, err := conn.WaitAOF(ctx, 1, level.Replicas, level.Timeout).Result()
		switch {
		case err != nil:
			acks.err = err
		case len(counts) != 2:
			acks.err = unexpected("WAITAOF", counts)
		default:
			acks.local, acks.replicas = counts[0] > 0, int(counts[1])
		}
	} else {
		n, err := conn.Wait(ctx, level.Replicas, level.Timeout).Result()
		acks.err, acks.replicas = err, int(n)
	}
	return raw, acks, nil
}

// checkWaitAOF refuses durability with "aof" on a server without WAITAOF (before Redis 7.2),
// asked once: WAITAOF 0 0 asks for nothing, so it answers at once where it exists.
func (s *Store) checkWaitAOF(ctx context.Context, conn *redis.Conn, level model.Durability) error {
	s.mu.Lock()
	has := s.waitAOF
	s.mu.Unlock()
	if has == nil {
		err := conn.WaitAOF(ctx, 0, 0, time.Millisecond).Err()
		if err != nil && !strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			return err
		}
		found := err == nil
		has = &found
		s.mu.Lock()
		s.waitAOF = has
		s.mu.Unlock()
	}
	if !*has {
		return model.Errorf(model.ErrBackendRefused, "durability %s needs WAITAOF (Redis 7.2 or newer, or "+
			"Valkey); this server has none: nothing written", level)
	}
	return nil
}

// confirm is result with what was confirmed; a *model.DurabilityNotConfirmedError carrying it
// when that falls short of level.
func confirm(result model.AppendResult, level model.Durability, acks waited) (model.AppendResult, error) {
	where := fmt.Sprintf("stream %s: written on the primary (cursor %s)", result.Stream, result.Cursor)
	result.Durability = level.String()
	if acks.err != nil {
		return model.AppendResult{}, &model.DurabilityNotConfirmedError{
			Msg: fmt.Sprintf("%s, but durability %s could not be asked for: %v; retry with the same append_id",
				where, level, acks.err),
			Result: result,
		}
	}
	result.Replicas = acks.replicas
	result.AOF = level.AOF && acks.local
	if acks.replicas >= level.Replicas && (acks.local || !level.AOF) {
		return result, nil
	}
	var missing []string
	if level.AOF && !acks.local {
		missing = append(missing, "the primary's AOF was not fsynced")
	}
	if acks.replicas < level.Replicas {
		missing = append(missing, fmt.Sprintf("%d of %d replica(s) confirmed", acks.replicas, level.Replicas))
	}
	return model.AppendResult{}, &model.DurabilityNotConfirmedError{
		Msg: fmt.Sprintf("%s, not confirmed as %s within %d ms: %s; retry with the same append_id",
			where, level, level.Timeout.Milliseconds(), strings.Join(missing, "; ")),
		Result: result,
	}
}

// listOpenSession lists the session in the open-sessions index before an append that opens
// attempts, as a provisional member of the append's own ("<session>␟<token>"): a writer killed
// right after its request committed must not leave an attempt no reconciler can find, and the
// index lives outside the session's slot, where the script cannot write on a cluster. Once a
// minute per session; "" when no listing was due.
func (s *Store) listOpenSession(ctx context.Context, session string) (string, error) {
	now := stamp()
	s.mu.Lock()
	last, ok := s.openIndexed[session]
	s.mu.Unlock()
	if ok && now-last < openIndexRefresh {
		return "", nil
	}
	member := session + openMemberSep + token(8)
	key := s.openIndexKey(bucketOf(session))
	err := s.do(ctx, "ZADD "+key, func(ctx context.Context) error {
		return s.rdb.ZAdd(ctx, key, redis.Z{Score: float64(now), Member: member}).Err()
	})
	if err != nil {
		return "", err
	}
	return member, nil
}

// settleOpenListing follows the script: a committed append lists the session under its own
// name, and the provisional member goes either way, so a refused append leaves nothing
// anywhere. Left behind (a failure here), the member still names the session to the
// reconciler, which forgets it with the session.
func (s *Store) settleOpenListing(ctx context.Context, session, member string, committed bool) {
	key := s.openIndexKey(bucketOf(session))
	now := stamp()
	settled := bestEffort(ctx, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		if committed {
			pipe.ZAddArgs(ctx, key, redis.ZAddArgs{GT: true, Members: []redis.Z{{Score: float64(now), Member: session}}})
		}
		pipe.ZRem(ctx, key, member)
		_, err := pipe.Exec(ctx)
		return err
	})
	if settled && committed {
		s.mu.Lock()
		remember(s.openIndexed, session, now)
		s.mu.Unlock()
	}
}

// touchIndex refreshes the session's last activity in the sessions index after a committed
// append, at most once a second per session.
func (s *Store) touchIndex(ctx context.Context, session string, ms int64) {
	s.mu.Lock()
	last, ok := s.indexed[session]
	s.mu.Unlock()
	if ok && ms-last < indexRefresh {
		return
	}
	key := s.indexKey(bucketOf(session))
	touched := bestEffort(ctx, func(ctx context.Context) error {
		return s.rdb.ZAddArgs(ctx, key, redis.ZAddArgs{
			GT: true, Members: []redis.Z{{Score: float64(ms), Member: session}},
		}).Err()
	})
	if touched {
		s.mu.Lock()
		remember(s.indexed, session, ms)
		s.mu.Unlock()
	}
}

// putArtifacts writes the artifacts the session does not hold (all of them when again).
func (s *Store) putArtifacts(ctx context.Context, session string, artifacts []model.Artifact, again bool) error {
	todo := artifacts
	if !again {
		var there []*redis.IntCmd
		err := s.do(ctx, "EXISTS "+s.artifactKey(session, artifacts[0].SHA256), func(ctx context.Context) error {
			pipe := s.rdb.Pipeline()
			there = there[:0]
			for _, artifact := range artifacts {
				there = append(there, pipe.Exists(ctx, s.artifactKey(session, artifact.SHA256)))
			}
			_, err := pipe.Exec(ctx)
			return err
		})
		if err != nil {
			return err
		}
		todo = nil
		for i, artifact := range artifacts {
			if there[i].Val() == 0 {
				todo = append(todo, artifact)
			}
		}
	}
	for _, artifact := range todo {
		names := s.artifactPutKeys(session, artifact.SHA256, token(6))
		whole := false
		for tries := 0; tries < writeTries && !whole; tries++ {
			err := s.do(ctx, "HSET "+names[0], func(ctx context.Context) error {
				var err error
				whole, err = s.putArtifact(ctx, artifact, names)
				return err
			})
			if err != nil {
				return err
			}
		}
		if !whole {
			return model.Errorf(model.ErrBackendUnavailable, "artifact sha256:%s could not be written whole", artifact.SHA256)
		}
	}
	return nil
}

// putArtifact writes one artifact under a name of its own, the upload (names[0]), a chunk per
// command, the chunks after the first in one round trip, until artifact_put.lua names it
// (names: its KEYS); false when the upload came out short.
func (s *Store) putArtifact(ctx context.Context, artifact model.Artifact, names []string) (bool, error) {
	upload := names[0]
	var chunks [][]byte
	for at := 0; at < len(artifact.Data); at += artifactChunk {
		chunks = append(chunks, artifact.Data[at:min(at+artifactChunk, len(artifact.Data))])
	}
	if len(chunks) == 0 {
		chunks = [][]byte{{}}
	}
	// The first chunk and the TTL together: an upload cut short goes by itself.
	_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, upload, "0", chunks[0])
		pipe.PExpire(ctx, upload, artifactUploadTTL)
		return nil
	})
	if err != nil {
		return false, err
	}
	// The other chunks in one round trip, a command each (no command holds the server long).
	if len(chunks) > 1 {
		_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for n := 1; n < len(chunks); n++ {
				pipe.HSet(ctx, upload, fmt.Sprint(n), chunks[n])
			}
			return nil
		})
		if err != nil {
			return false, err
		}
	}
	raw, err := lua.ArtifactPut.Run(ctx, s.rdb, names, len(artifact.Data), len(chunks)).Result()
	if err != nil {
		return false, err
	}
	return parseArtifactPutReply(raw)
}
