package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// startStore opens a store on a redis-server of its own; the server's client reads what the
// store wrote.
func startStore(t *testing.T, opts ...store.Option) (*Store, *testredis.Server, *redis.Client) {
	t.Helper()
	server := testredis.Start(t)
	return openOn(t, server.URL, opts...), server, server.Client()
}

func streamID(t testing.TB, session, name string) model.StreamID {
	t.Helper()
	id, err := model.NewStreamID(session, name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustAppend(t *testing.T, s *Store, stream model.StreamID, expected int64, appendID string, events ...model.Event) model.AppendResult {
	t.Helper()
	result, err := s.Append(context.Background(), stream, expected, appendID, events)
	if err != nil {
		t.Fatalf("Append %s: %v", appendID, err)
	}
	return result
}

func TestAppendWritesTheLayoutEveryLanguageReads(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	stream := streamID(t, "sess-1", "run-a")
	events := []model.Event{model.Message("planner", "héllo"), model.Message("coder", "on it")}
	result := mustAppend(t, s, stream, 0, "append-1", events...)
	if result.FirstVersion != 1 || result.LastVersion != 2 || result.Deduplicated || result.Durability != "local" {
		t.Fatalf("result %+v", result)
	}

	log, err := rdb.XRange(ctx, "lb:{sess-1}:log", "-", "+").Result()
	if err != nil || len(log) != 2 {
		t.Fatalf("log: %v %v", log, err)
	}
	prepared, err := model.PrepareAppend(stream, "append-1", events, model.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for i, entry := range log {
		if entry.Values["s"] != "run-a" || entry.Values["v"] != fmt.Sprint(i+1) ||
			entry.Values["p"] != string(prepared.Payloads[i]) {
			t.Errorf("log entry %d: %v", i, entry.Values)
		}
	}
	if model.LedgerCursor(log[1].ID) != result.Cursor {
		t.Errorf("cursor %s, log's last entry %s", result.Cursor, log[1].ID)
	}
	if v := rdb.HGet(ctx, "lb:{sess-1}:meta", "run-a").Val(); v != "2" {
		t.Errorf("meta holds version %q", v)
	}
	index, _ := rdb.XRange(ctx, "lb:{sess-1}:s:run-a", "-", "+").Result()
	if len(index) != 1 || index[0].ID != "1-0" || index[0].Values["c"] != log[0].ID || index[0].Values["n"] != "2" {
		t.Errorf("stream index %v", index)
	}
	// The append_id record: the digest's 32 raw bytes, then "<first> <count> <cursor> <generation>".
	digest, _ := hex.DecodeString(prepared.Digest)
	record := rdb.HGet(ctx, "lb:{sess-1}:idem:run-a", "append-1").Val()
	if want := string(digest) + "1 2 " + log[1].ID + " 0"; record != want {
		t.Errorf("append_id record %q, want %q", record, want)
	}
	// The sessions index: bucket crc32("sess-1") mod 64 = 31, as every language computes it.
	if score, err := rdb.ZScore(ctx, "lb:sessions:{lb-31}", "sess-1").Result(); err != nil || int64(score) != model.CursorTime(result.Cursor).UnixMilli() {
		t.Errorf("sessions index: %v %v", score, err)
	}
	if bucketOf("séance") != 10 {
		t.Errorf("bucket of séance: %d, want 10", bucketOf("séance"))
	}
}

func TestAppendRules(t *testing.T) {
	ctx := context.Background()
	s, _, _ := startStore(t)
	stream := streamID(t, "rules", "s")
	first := mustAppend(t, s, stream, 0, "a1", model.Message("a", "one"))

	// The same append again, even with a stale expected version: the original result.
	again, err := s.Append(ctx, stream, 0, "a1", []model.Event{model.Message("a", "one")})
	if err != nil || !again.Deduplicated || again.Cursor != first.Cursor || again.LastVersion != 1 {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	// Other content under the same append_id.
	_, err = s.Append(ctx, stream, 1, "a1", []model.Event{model.Message("a", "other")})
	var idem *model.IdempotencyConflictError
	if !errors.As(err, &idem) || idem.AppendID != "a1" || !errors.Is(err, model.ErrIdempotencyConflict) {
		t.Fatalf("other content: %v", err)
	}
	// A stale expected version.
	_, err = s.Append(ctx, stream, 0, "a2", []model.Event{model.Message("a", "two")})
	var conflict *model.VersionConflictError
	if !errors.As(err, &conflict) || conflict.Expected != 0 || conflict.Actual != 1 || conflict.Rewound {
		t.Fatalf("stale version: %v", err)
	}
	// The append_id of a refused append is not spent.
	if r := mustAppend(t, s, stream, 1, "a2", model.Message("a", "two")); r.FirstVersion != 2 || r.Deduplicated {
		t.Fatalf("a2 after its conflict: %+v", r)
	}
	if r := mustAppend(t, s, stream, model.AnyVersion, "a3", model.Message("a", "three")); r.FirstVersion != 3 {
		t.Fatalf("any version: %+v", r)
	}
	if v, err := s.StreamVersion(ctx, stream); err != nil || v != 3 {
		t.Fatalf("version %d, %v", v, err)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	good := []model.Event{model.Message("a", "b")}
	cases := map[string]func() error{
		"session with a brace": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a{b}", Name: "s"}, 0, "x", good)
			return err
		},
		"empty stream name": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a", Name: ""}, 0, "x", good)
			return err
		},
		"expected below any": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a", Name: "s"}, -2, "x", good)
			return err
		},
		"empty append_id": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a", Name: "s"}, 0, "", good)
			return err
		},
		"invalid event": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a", Name: "s"}, 0, "x", []model.Event{{"type": "message", "agent": "a", "body": 7}})
			return err
		},
		"no events": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a", Name: "s"}, 0, "x", nil)
			return err
		},
		"durability without timeout": func() error {
			_, err := s.Append(ctx, model.StreamID{Session: "a", Name: "s"}, 0, "x", good,
				store.WithDurability(model.Durability{Replicas: 1}))
			return err
		},
		"cursor": func() error {
			_, err := s.ScanSession(ctx, "a", store.ScanOptions{After: "yesterday"})
			return err
		},
		"tail before": func() error {
			_, err := s.Tail(ctx, "a", store.TailOptions{Before: "1-2-3"})
			return err
		},
		"negative limit": func() error {
			_, err := s.ReadStream(ctx, model.StreamID{Session: "a", Name: "s"}, store.ReadStreamOptions{Limit: -1})
			return err
		},
		"sha256": func() error {
			_, err := s.Artifact(ctx, "a", "abc")
			return err
		},
		"lease name": func() error {
			_, err := s.Lease(ctx, store.Acquire, "a", "run 1", "me", time.Second)
			return err
		},
	}
	for name, call := range cases {
		if err := call(); !errors.Is(err, model.ErrInvalidInput) {
			t.Errorf("%s: %v, want InvalidInput", name, err)
		}
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
}

func TestHistoryRewoundAfterAFailoverLostEvents(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	stream := streamID(t, "rewound", "s")
	mustAppend(t, s, stream, 0, "a1", model.Message("a", "one"))
	mustAppend(t, s, stream, 1, "a2", model.Message("a", "two"))
	// What a failover to a replica that lagged behind leaves: the second append gone.
	for _, key := range []string{"lb:{rewound}:log", "lb:{rewound}:s:s", "lb:{rewound}:idem:s"} {
		rdb.Del(ctx, key)
	}
	rdb.HSet(ctx, "lb:{rewound}:meta", "s", 0)
	other := openOn(t, "redis://"+rdb.Options().Addr)

	_, err := s.Append(ctx, stream, model.AnyVersion, "a3", []model.Event{model.Message("a", "three")})
	var rewound *model.VersionConflictError
	if !errors.As(err, &rewound) || !rewound.Rewound || rewound.Expected != 2 || rewound.Actual != 0 ||
		!errors.Is(err, model.ErrHistoryRewound) || !errors.Is(err, model.ErrVersionConflict) {
		t.Fatalf("append after the loss: %v", err)
	}
	if n := rdb.XLen(ctx, "lb:{rewound}:log").Val(); n != 0 {
		t.Fatalf("a rewound append wrote %d events", n)
	}
	// Another writer was told of nothing: it appends.
	if r := mustAppend(t, other, stream, 0, "b1", model.Message("b", "fresh")); r.FirstVersion != 1 {
		t.Fatalf("other writer: %+v", r)
	}
	// Once accepted, this writer builds on the stream as it is.
	s.AcceptHistory(stream)
	if r := mustAppend(t, s, stream, 1, "a3", model.Message("a", "three")); r.FirstVersion != 2 {
		t.Fatalf("after AcceptHistory: %+v", r)
	}
}

func TestArchivedSessionRefusesAppends(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	stream := streamID(t, "moved", "s")
	first := mustAppend(t, s, stream, 0, "a1", model.Message("a", "one"))
	rdb.HSet(ctx, "lb:{moved}:tomb", "archive", "sqlite:///archive.db")

	_, err := s.Append(ctx, stream, 1, "a2", []model.Event{model.Message("a", "two")})
	var archived *model.SessionArchivedError
	if !errors.As(err, &archived) || archived.Archive != "sqlite:///archive.db" ||
		!errors.Is(err, model.ErrSessionArchived) || !errors.Is(err, model.ErrRefused) {
		t.Fatalf("append to an archived session: %v", err)
	}
	// A retry of an append recorded before still returns its result.
	again, err := s.Append(ctx, stream, 0, "a1", []model.Event{model.Message("a", "one")})
	if err != nil || !again.Deduplicated || again.Cursor != first.Cursor {
		t.Fatalf("retry on an archived session: %+v %v", again, err)
	}
}

// big is a string of n bytes that no compression of the test's making would shorten.
func big(n int, seed string) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		sum := sha256.Sum256([]byte(fmt.Sprint(seed, i)))
		b.WriteString(hex.EncodeToString(sum[:]))
	}
	return b.String()[:n]
}

func TestArtifactsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	stream := streamID(t, "arts", "s")
	body := big(2*1024*1024+100, "body") // three chunks of 1 MiB
	args := map[string]any{"doc": big(100*1024, "args"), "n": int64(7), "ok": true}
	events := []model.Event{
		model.Message("a", body),
		model.ToolCall("a", "index", "call-1", args),
		model.Message("a", body), // the same bytes: stored once, counted twice
	}
	result := mustAppend(t, s, stream, 0, "a1", events...)

	read, err := s.ReadStream(ctx, stream, store.ReadStreamOptions{})
	if err != nil || len(read) != 3 {
		t.Fatalf("read: %d %v", len(read), err)
	}
	if read[0].Fields["body"] != body || read[2].Fields["body"] != body {
		t.Error("the body did not come back whole")
	}
	gotArgs, _ := read[1].Fields["args"].(map[string]any)
	if gotArgs["doc"] != args["doc"] || gotArgs["n"] != int64(7) || gotArgs["ok"] != true {
		t.Errorf("args came back as %v", gotArgs)
	}

	// With references left in: ArtifactRef values, whose bytes Artifact returns.
	refs, err := s.ScanSession(ctx, "arts", store.ScanOptions{Refs: true})
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := refs[0].Fields["body"].(model.ArtifactRef)
	sum := sha256.Sum256([]byte(body))
	if !ok || ref.SHA256 != hex.EncodeToString(sum[:]) || ref.Size != int64(len(body)) || ref.MediaType != model.MediaText {
		t.Fatalf("reference %#v", refs[0].Fields["body"])
	}
	data, err := s.Artifact(ctx, "arts", "sha256:"+ref.SHA256)
	if err != nil || string(data) != body {
		t.Fatalf("Artifact: %d bytes, %v", len(data), err)
	}
	key := "lb:{arts}:art:" + ref.SHA256
	if n := rdb.HLen(ctx, key).Val(); n != 3 {
		t.Errorf("%s has %d chunks", key, n)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl != -1 {
		t.Errorf("a referenced artifact has a TTL: %s", ttl)
	}
	if uses := rdb.HGet(ctx, "lb:{arts}:arts", ref.SHA256).Val(); uses != "2" {
		t.Errorf("uses %q", uses)
	}
	// A retry writes no artifact again, and leaves no upload behind.
	again := mustAppend(t, s, stream, 0, "a1", events...)
	if !again.Deduplicated || again.Cursor != result.Cursor {
		t.Fatalf("retry: %+v", again)
	}
	if keys := rdb.Keys(ctx, "lb:{arts}:art:*:*").Val(); len(keys) != 0 {
		t.Errorf("uploads left: %v", keys)
	}
	if uses := rdb.HGet(ctx, "lb:{arts}:arts", ref.SHA256).Val(); uses != "2" {
		t.Errorf("a retry counted the artifact again: %q", uses)
	}
	tail, err := s.Tail(ctx, "arts", store.TailOptions{N: 1})
	if err != nil || len(tail) != 1 || tail[0].Fields["body"] != body {
		t.Errorf("tail: %v", err)
	}
	if _, err := s.Artifact(ctx, "arts", strings.Repeat("0", 64)); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("an artifact the session lacks: %v", err)
	}
}

func TestArtifactGoneBeforeTheScriptIsWrittenAgain(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	stream := streamID(t, "gone", "s")
	body := big(100*1024, "gone")
	sum := sha256.Sum256([]byte(body))
	key := "lb:{gone}:art:" + hex.EncodeToString(sum[:])
	var calls []int
	s.beforeAppend = func(try int) {
		calls = append(calls, try)
		if try == 0 {
			// What a deletion of the session, or the upload's TTL, does between the write of
			// the artifact and the script.
			rdb.Del(ctx, key)
		}
	}
	result := mustAppend(t, s, stream, 0, "a1", model.Message("a", body))
	if len(calls) != 2 || result.Deduplicated {
		t.Fatalf("script calls %v, result %+v", calls, result)
	}
	read, err := s.ReadStream(ctx, stream, store.ReadStreamOptions{})
	if err != nil || len(read) != 1 || read[0].Fields["body"] != body {
		t.Fatalf("read back: %v", err)
	}

	// Gone on every try: the append gives up, having written nothing.
	s.beforeAppend = func(int) { rdb.Del(ctx, key) }
	other := big(100*1024, "other")
	sum = sha256.Sum256([]byte(other))
	key = "lb:{gone}:art:" + hex.EncodeToString(sum[:])
	_, err = s.Append(ctx, stream, 1, "a2", []model.Event{model.Message("a", other)})
	if !errors.Is(err, model.ErrBackendUnavailable) {
		t.Fatalf("an artifact gone every time: %v", err)
	}
	if v, _ := s.StreamVersion(ctx, stream); v != 1 {
		t.Fatalf("version %d after a failed append", v)
	}
}

func TestOpenAttemptsAndTheirIndex(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	stream := streamID(t, "sess-1", "run")
	call := model.ToolCall("a", "search", "step#1", map[string]any{"q": "x"})
	call["run_id"] = "r1"
	result := mustAppend(t, s, stream, 0, "c1", call)

	open, err := s.OpenAttempts(ctx, "sess-1")
	want := model.OpenAttempt{Session: "sess-1", AttemptID: "step#1", RunID: "r1", Tool: "search", Stream: "run", Cursor: result.Cursor}
	if err != nil || len(open) != 1 || open[0] != want {
		t.Fatalf("open attempts %+v, %v", open, err)
	}
	members := rdb.ZRange(ctx, "lb:open-sessions:{lb-31}", 0, -1).Val()
	if len(members) != 1 || members[0] != "sess-1" {
		t.Fatalf("open-sessions index %v", members)
	}
	mustAppend(t, s, stream, 1, "r1", model.ToolResult("a", "search", "step#1", "ok", "found"))
	if open, _ := s.OpenAttempts(ctx, "sess-1"); len(open) != 0 {
		t.Fatalf("still open: %+v", open)
	}

	// A refused append that would open an attempt leaves nothing in the index: its listing
	// was provisional.
	fresh := openOn(t, "redis://"+rdb.Options().Addr)
	other := streamID(t, "sess-2", "run")
	mustAppend(t, fresh, other, 0, "m1", model.Message("a", "hi"))
	rdb.Del(ctx, "lb:open-sessions:{lb-"+fmt.Sprintf("%02d", bucketOf("sess-2"))+"}")
	_, err = fresh.Append(ctx, other, 0, "c1", []model.Event{model.ToolCall("a", "t", "x#1", nil)})
	if !errors.Is(err, model.ErrVersionConflict) {
		t.Fatalf("stale append: %v", err)
	}
	if n := rdb.ZCard(ctx, "lb:open-sessions:{lb-"+fmt.Sprintf("%02d", bucketOf("sess-2"))+"}").Val(); n != 0 {
		t.Fatalf("a refused append left %d members in the open-sessions index", n)
	}
}

func TestLease(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t)
	token, err := s.Lease(ctx, store.Acquire, "sess", "run-r1", "me", time.Minute)
	if err != nil || token != 1 {
		t.Fatalf("acquire: %v %v", token, err)
	}
	if owner := rdb.Get(ctx, "lb:{sess}:lease:run-r1").Val(); owner != "me" {
		t.Fatalf("lease key holds %q", owner)
	}
	// The token lives in the session's fences hash, by lease name, as every SDK reads it.
	if held := rdb.HGet(ctx, "lb:{sess}:fences", "run-r1").Val(); held != "1" {
		t.Fatalf("the fences hash holds %q for run-r1", held)
	}
	if token, _ := s.Lease(ctx, store.Acquire, "sess", "run-r1", "you", time.Minute); token != 0 {
		t.Fatal("a held lease was acquired by another owner")
	}
	if released, _ := s.Lease(ctx, store.Release, "sess", "run-r1", "me", 0); released != 1 {
		t.Fatal("release")
	}
	if token, _ := s.Lease(ctx, store.Acquire, "sess", "run-r1", "you", time.Minute); token != 2 {
		t.Fatalf("the next holding drew %d, want 2", token)
	}
	if _, err := s.Lease(ctx, "steal", "sess", "run-r1", "me", time.Minute); !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("an unknown step: %v", err)
	}
}

func TestALeaseHeldBeforeFencingDrawsItsTokenWhenRenewed(t *testing.T) {
	// Given a lease taken by an SDK from before fencing: its key, and no token
	ctx := context.Background()
	s, _, rdb := startStore(t)
	if err := rdb.Set(ctx, "lb:{sess}:lease:run-r1", "me", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// When its owner renews it, Then the holding draws a token, which fences its appends
	token, err := s.Lease(ctx, store.Renew, "sess", "run-r1", "me", time.Minute)
	if err != nil || token != 1 {
		t.Fatalf("renew: %v %v", token, err)
	}
	fence := store.WithFence(model.Fence{Lease: "run-r1", Owner: "me", Token: token})
	if _, err := s.Append(ctx, streamID(t, "sess", "main"), 0, "a1", []model.Event{model.Message("a", "x")}, fence); err != nil {
		t.Fatal(err)
	}
}

func TestSessionsIndex(t *testing.T) {
	ctx := context.Background()
	s, _, _ := startStore(t)
	for i, session := range []string{"older", "newer"} {
		mustAppend(t, s, streamID(t, session, "s"), 0, "a", model.Message("a", "x"))
		if i == 0 {
			time.Sleep(5 * time.Millisecond) // two distinct milliseconds of activity
		}
	}
	found, err := s.Sessions(ctx, store.SessionsOptions{})
	if err != nil || len(found) != 2 || found[0].Session != "newer" || found[1].Session != "older" {
		t.Fatalf("sessions %+v, %v", found, err)
	}
	if one, _ := s.Sessions(ctx, store.SessionsOptions{Limit: 1}); len(one) != 1 || one[0].Session != "newer" {
		t.Fatalf("limit 1: %+v", one)
	}
	if ok, _ := s.SessionExists(ctx, "older"); !ok {
		t.Fatal("older does not exist")
	}
	if ok, _ := s.SessionExists(ctx, "never"); ok {
		t.Fatal("a session never written exists")
	}
}

func TestReadStreamWithoutTheReadScript(t *testing.T) {
	ctx := context.Background()
	s, _, _ := startStore(t)
	stream := streamID(t, "two-reads", "s")
	for i := range 5 {
		events := make([]model.Event, i+1)
		for j := range events {
			events[j] = model.Message("a", fmt.Sprint(i, j))
		}
		mustAppend(t, s, stream, model.AnyVersion, fmt.Sprint("a", i), events...)
	}
	mustAppend(t, s, streamID(t, "two-reads", "other"), 0, "o", model.Message("a", "between"))
	withScript, err := s.ReadStream(ctx, stream, store.ReadStreamOptions{After: 2, Limit: 9})
	if err != nil {
		t.Fatal(err)
	}
	// As on a server older than Redis 7, with no EVALSHA_RO: the two rounds of reads.
	s.noReadScript = true
	without, err := s.ReadStream(ctx, stream, store.ReadStreamOptions{After: 2, Limit: 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(withScript) != 9 || len(without) != 9 {
		t.Fatalf("%d and %d events", len(withScript), len(without))
	}
	for i := range withScript {
		if withScript[i].Version != int64(i+3) || without[i].Version != withScript[i].Version ||
			without[i].Cursor != withScript[i].Cursor || without[i].Fields["body"] != withScript[i].Fields["body"] {
			t.Errorf("event %d: %+v and %+v", i, withScript[i], without[i])
		}
	}
}
