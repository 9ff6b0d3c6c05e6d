package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// RunLog runs the log's part of the contract on the stores open gives: append and its rules,
// reads, scans, tails, waits, versions, the sessions index, artifacts, validation, concurrency,
// and the vectors of conformance/appends.json.
func RunLog(t *testing.T, open func(t *testing.T) store.Log) {
	runAll(t, open, logTests)
	t.Run("conformance vectors", func(t *testing.T) { runVectors(t, open(t)) })
}

var logTests = []test[store.Log]{
	{"an append assigns consecutive versions and returns the last cursor", appendVersions},
	{"a stream with no events has version zero", emptyStream},
	{"a version conflict reports both versions and writes nothing", versionConflict},
	{"a retry after a lost reply returns the original result even with a stale version", retryDeduplicates},
	{"the same append_id with other content is an idempotency conflict", idempotencyConflict},
	{"idempotency compares canonical content not spelling", canonicalIdempotency},
	{"append_ids are scoped to their stream", appendIDScope},
	{"generated event ids are stable across retries and given ones are kept", eventIDs},
	{"cursors increase strictly across streams in commit order", commitOrder},
	{"paging a scan by cursor equals a full scan", scanPaging},
	{"iterating a session a page at a time equals a full scan", sessionIterator},
	{"read_stream pages by version", readStreamPaging},
	{"read_stream across many appends returns every version once", readStreamMany},
	{"tail returns the last n oldest first and nothing of other sessions", tailLast},
	{"tail pages backwards to the start", tailPaging},
	{"recorded events carry every field and the commit time", recordedFields},
	{"bad events are refused and write nothing", badBatches},
	{"an invalid event's error names the event and the field", invalidEventNames},
	{"bad arguments are invalid input and write nothing", badArguments},
	{"names that would break keys or lines are refused", badNames},
	{"too many events in one append are invalid", tooManyEvents},
	{"wait_session returns what commits while it waits", waitWakes},
	{"wait_session without a cursor returns only what commits after the call", waitFromNow},
	{"wait_session ends when its context does", waitContext},
	{"the sessions index lists every session written, newest first", sessionsIndex},
	{"a field above the threshold is kept as an artifact and read back whole", artifacts},
	{"a log-only store is refused a capability it lacks, in one line", needRefuses},
	{"concurrent appends at any version are gapless", concurrentAny},
	{"rival writers at expected versions each take a version once", rivalWriters},
	{"local durability is what every store gives", localDurability},
}

// snapshot is the session's events, as a full scan returns them.
func snapshot(t testing.TB, s store.Log, session string) []model.RecordedEvent {
	t.Helper()
	events, err := s.ScanSession(ctx(t), session, store.ScanOptions{})
	must(t, err, "ScanSession")
	return events
}

func appendOK(t testing.TB, s store.Log, stream model.StreamID, expected int64, appendID string, events ...model.Event) model.AppendResult {
	t.Helper()
	r, err := s.Append(ctx(t), stream, expected, appendID, events)
	must(t, err, "Append "+appendID)
	return r
}

func readStream(t testing.TB, s store.Log, stream model.StreamID, opts store.ReadStreamOptions) []model.RecordedEvent {
	t.Helper()
	events, err := s.ReadStream(ctx(t), stream, opts)
	must(t, err, "ReadStream")
	return events
}

func appendVersions(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	first := appendOK(t, s, ref, 0, "a1", msg("one"), msg("two"))
	second := appendOK(t, s, ref, 2, "a2", msg("three"))

	equal(t, []any{first.FirstVersion, first.LastVersion, first.Deduplicated}, []any{int64(1), int64(2), false}, "first append")
	equal(t, []any{second.FirstVersion, second.LastVersion}, []any{int64(3), int64(3)}, "second append")
	equal(t, first.Stream, ref, "the result's stream")
	events := readStream(t, s, ref, store.ReadStreamOptions{})
	has(t, len(events), 3, "events")
	equal(t, versions(events), []int64{1, 2, 3}, "versions")
	equal(t, bodies(events), strs("one", "two", "three"), "bodies")
	equal(t, events[1].Cursor, first.Cursor, "the first append's cursor is its last event's")
	equal(t, events[2].Cursor, second.Cursor, "the second append's cursor")
	version, err := s.StreamVersion(ctx(t), ref)
	must(t, err, "StreamVersion")
	equal(t, version, int64(3), "StreamVersion")
	exists, err := s.SessionExists(ctx(t), ref.Session)
	must(t, err, "SessionExists")
	equal(t, exists, true, "SessionExists after an append")
}

func emptyStream(t *testing.T, s store.Log) {
	session := newSession(t, "nobody")
	none := streamOf(t, session, "nothing")
	version, err := s.StreamVersion(ctx(t), none)
	must(t, err, "StreamVersion")
	equal(t, version, int64(0), "StreamVersion")
	equal(t, len(readStream(t, s, none, store.ReadStreamOptions{})), 0, "events read")
	equal(t, len(snapshot(t, s, session)), 0, "events scanned")
	tail, err := s.Tail(ctx(t), session, store.TailOptions{N: 5})
	must(t, err, "Tail")
	equal(t, len(tail), 0, "events of the tail")
	exists, err := s.SessionExists(ctx(t), session)
	must(t, err, "SessionExists")
	equal(t, exists, false, "SessionExists")
}

func versionConflict(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	appendOK(t, s, ref, 0, "a1", msg("one"))
	before := snapshot(t, s, ref.Session)

	_, err := s.Append(ctx(t), ref, 0, "a2", []model.Event{msg("two")})

	refused(t, err, model.ErrVersionConflict, "a stale version")
	var conflict *model.VersionConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("error %T is no *model.VersionConflictError", err)
	}
	equal(t, []int64{conflict.Expected, conflict.Actual}, []int64{0, 1}, "expected and actual versions")
	equal(t, conflict.Stream, ref, "the conflict's stream")
	if errors.Is(err, model.ErrHistoryRewound) {
		t.Errorf("a stale version is no HistoryRewound")
	}
	equal(t, model.ExitCode(err), 3, "exit code")
	equal(t, snapshot(t, s, ref.Session), before, "the session after the conflict")
	// The refused append_id stays free: the same id succeeds at the right version.
	equal(t, appendOK(t, s, ref, 1, "a2", msg("two")).FirstVersion, int64(2), "the id refused, used again")
}

func retryDeduplicates(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	original := appendOK(t, s, ref, 0, "a1", msg("one"), call("t1", "", "", nil))
	appendOK(t, s, ref, 2, "a2", msg("later"))

	retried := appendOK(t, s, ref, 0, "a1", msg("one"), call("t1", "", "", nil))

	equal(t, retried.Deduplicated, true, "Deduplicated")
	equal(t, []any{retried.FirstVersion, retried.LastVersion, retried.Cursor},
		[]any{original.FirstVersion, original.LastVersion, original.Cursor}, "the retry's result")
	// A retry at any version is the same retry.
	equal(t, appendOK(t, s, ref, model.AnyVersion, "a1", msg("one"), call("t1", "", "", nil)).Deduplicated, true, "Deduplicated at any version")
	version, err := s.StreamVersion(ctx(t), ref)
	must(t, err, "StreamVersion")
	equal(t, version, int64(3), "StreamVersion")
}

func idempotencyConflict(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	appendOK(t, s, ref, 0, "a1", msg("one"))
	before := snapshot(t, s, ref.Session)

	_, err := s.Append(ctx(t), ref, model.AnyVersion, "a1", []model.Event{msg("ONE")})
	refused(t, err, model.ErrIdempotencyConflict, "other content")
	var conflict *model.IdempotencyConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("error %T is no *model.IdempotencyConflictError", err)
	}
	equal(t, []any{conflict.Stream, conflict.AppendID}, []any{ref, "a1"}, "the conflict's stream and append_id")
	_, err = s.Append(ctx(t), ref, 1, "a1", []model.Event{msg("one"), msg("two")})
	refused(t, err, model.ErrIdempotencyConflict, "more events")
	equal(t, model.ExitCode(err), 4, "exit code")

	equal(t, snapshot(t, s, ref.Session), before, "the session after the conflicts")
}

func canonicalIdempotency(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	given := model.Event{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "x",
		"args": map[string]any{"b": 1, "a": []any{1, 2}}}
	respelled := model.Event{"args": map[string]any{"a": []any{int64(1), 2.0}, "b": uint8(1)},
		"attempt_id": "x", "tool": "t", "agent": "a", "type": "tool_call", "parents": []any{}, "run_id": nil}
	built := model.ToolCall("a", "t", "x", map[string]any{"a": []any{1, 2}, "b": 1})

	first := appendOK(t, s, ref, 0, "a1", given)

	equal(t, appendOK(t, s, ref, 0, "a1", respelled).Deduplicated, true, "the respelled event deduplicates")
	equal(t, appendOK(t, s, ref, 0, "a1", built).Deduplicated, true, "the event built with ToolCall deduplicates")
	version, err := s.StreamVersion(ctx(t), ref)
	must(t, err, "StreamVersion")
	equal(t, []int64{first.LastVersion, version}, []int64{1, 1}, "versions")
}

func appendIDScope(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	appendOK(t, s, streamOf(t, session, "run-a"), 0, "a1", msg("one"))
	other := appendOK(t, s, streamOf(t, session, "run-b"), 0, "a1", msg("different"))
	equal(t, other.Deduplicated, false, "the same id on another stream deduplicates")
}

func eventIDs(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	events := []model.Event{msg("one"), msgWith("two", map[string]any{"event_id": "mine"})}
	appendOK(t, s, ref, 0, "a1", events...)
	ids := eventIDsOf(readStream(t, s, ref, store.ReadStreamOptions{}))
	has(t, len(ids), 2, "events")
	appendOK(t, s, ref, 0, "a1", events...)

	equal(t, ids[1], "mine", "the given event id")
	equal(t, ids[0], model.DeriveEventID(ref, "a1", 0), "the generated event id")
	equal(t, eventIDsOf(readStream(t, s, ref, store.ReadStreamOptions{})), ids, "event ids after the retry")
}

func eventIDsOf(events []model.RecordedEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.EventID()
	}
	return out
}

func commitOrder(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	var order []any
	for i := range 30 {
		ref := streamOf(t, session, fmt.Sprintf("run-%d", i%3))
		r := appendOK(t, s, ref, model.AnyVersion, fmt.Sprintf("x%d", i), msg(fmt.Sprintf("m%d", i)), msg(fmt.Sprintf("n%d", i)))
		order = append(order, fmt.Sprintf("m%d", i), fmt.Sprintf("n%d", i))
		equal(t, r.LastVersion, int64(2*(i/3+1)), "last version")
	}

	events := snapshot(t, s, session)
	equal(t, bodies(events), order, "commit order")
	strictlyIncreasing(t, cursors(events))
	for _, name := range []string{"run-0", "run-1", "run-2"} {
		var found []int64
		for _, e := range events {
			if e.Stream.Name == name {
				found = append(found, e.Version)
			}
		}
		equal(t, found, span(1, 20), "versions of "+name)
	}
}

func strictlyIncreasing(t testing.TB, found []string) {
	t.Helper()
	for i := 1; i < len(found); i++ {
		if found[i-1] >= found[i] {
			t.Fatalf("cursor %d (%s) does not sort above cursor %d (%s)", i, found[i], i-1, found[i-1])
		}
	}
}

func scanPaging(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	for i := range 57 {
		appendOK(t, s, streamOf(t, session, fmt.Sprintf("r%d", i%4)), model.AnyVersion, fmt.Sprintf("a%d", i), msg(fmt.Sprint(i)))
	}
	full := snapshot(t, s, session)

	var paged []model.RecordedEvent
	after := ""
	for {
		page, err := s.ScanSession(ctx(t), session, store.ScanOptions{After: after, Limit: 10})
		must(t, err, "ScanSession")
		if len(page) == 0 {
			break
		}
		if len(page) > 10 {
			t.Fatalf("a page of %d events, asked for 10", len(page))
		}
		paged = append(paged, page...)
		if len(paged) > len(full) {
			t.Fatalf("paging returns more events than the session has: the scan after a cursor holds it")
		}
		after = page[len(page)-1].Cursor
	}

	has(t, len(full), 57, "events scanned")
	equal(t, paged, full, "the pages")
	// A cursor in the Redis entry id's own width is the same cursor.
	ms, seq, err := model.ParseCursor(full[9].Cursor)
	must(t, err, "ParseCursor")
	short, err := s.ScanSession(ctx(t), session, store.ScanOptions{After: fmt.Sprintf("%d-%d", ms, seq)})
	must(t, err, "ScanSession after a short cursor")
	equal(t, short, full[10:], "the scan after the short cursor")
}

func sessionIterator(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	for i := range 23 {
		appendOK(t, s, streamOf(t, session, fmt.Sprintf("r%d", i%2)), model.AnyVersion, fmt.Sprintf("a%d", i), msg(fmt.Sprint(i)))
	}
	full := snapshot(t, s, session)
	has(t, len(full), 23, "events scanned")

	for _, page := range []int{0, 1, 7, 23, 100} {
		var found []model.RecordedEvent
		for e, err := range s.Session(ctx(t), session, store.IterOptions{Page: page}) {
			must(t, err, "Session")
			found = append(found, e)
			if len(found) > len(full) {
				t.Fatalf("iterating %d a page yields more events than the session has", page)
			}
		}
		equal(t, found, full, fmt.Sprintf("the events iterated %d a page", page))
	}

	var found []model.RecordedEvent
	for e, err := range s.Session(ctx(t), session, store.IterOptions{After: full[4].Cursor, Page: 5}) {
		must(t, err, "Session")
		found = append(found, e)
		if len(found) == 8 {
			break // a loop may stop when it likes
		}
	}
	equal(t, found, full[5:13], "the events iterated after a cursor, up to a break")

	n := 0
	for _, err := range s.Session(ctx(t), session, store.IterOptions{After: "not a cursor"}) {
		n++
		refused(t, err, model.ErrInvalidInput, "iterating after a bad cursor")
	}
	equal(t, n, 1, "what iterating after a bad cursor yields")
}

func readStreamPaging(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	appendOK(t, s, ref, 0, "a1", messages("", 25)...)
	equal(t, versions(readStream(t, s, ref, store.ReadStreamOptions{After: 20})), []int64{21, 22, 23, 24, 25}, "after 20")
	equal(t, versions(readStream(t, s, ref, store.ReadStreamOptions{After: 3, Limit: 2})), []int64{4, 5}, "after 3, at most 2")
	equal(t, len(readStream(t, s, ref, store.ReadStreamOptions{After: 25})), 0, "events after the last")
}

func readStreamMany(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	ref := streamOf(t, session, "run-a")
	noise := streamOf(t, session, "noise")
	for i := range 300 {
		events := make([]model.Event, 7)
		for k := range events {
			events[k] = msg(fmt.Sprintf("%d.%d", i, k))
		}
		appendOK(t, s, ref, model.AnyVersion, fmt.Sprintf("a%d", i), events...)
		appendOK(t, s, noise, model.AnyVersion, fmt.Sprintf("n%d", i), msg("noise"))
	}

	events := readStream(t, s, ref, store.ReadStreamOptions{})
	equal(t, versions(events), span(1, 2100), "versions")
	for _, e := range events {
		if e.Stream != ref {
			t.Fatalf("an event of %s read from %s", e.Stream, ref)
		}
	}
	middle := readStream(t, s, ref, store.ReadStreamOptions{After: 1003, Limit: 9})
	equal(t, bodies(middle), strs("143.2", "143.3", "143.4", "143.5", "143.6", "144.0", "144.1", "144.2", "144.3"), "a page in the middle")
}

func tailLast(t *testing.T, s store.Log) {
	one, two := newSession(t, "s1"), newSession(t, "s2")
	for i := range 40 {
		session, name := two, "s2"
		if i%2 == 1 {
			session, name = one, "s1"
		}
		appendOK(t, s, streamOf(t, session, "main"), model.AnyVersion, fmt.Sprintf("a%d", i), msg(fmt.Sprintf("%s-%d", name, i)))
	}

	last, err := s.Tail(ctx(t), one, store.TailOptions{N: 5})
	must(t, err, "Tail")
	equal(t, bodies(last), strs("s1-31", "s1-33", "s1-35", "s1-37", "s1-39"), "the last 5")
	for _, e := range last {
		equal(t, e.Stream.Session, one, "the session of an event of the tail")
	}
	all, err := s.Tail(ctx(t), one, store.TailOptions{N: 100})
	must(t, err, "Tail")
	equal(t, len(all), 20, "a tail longer than the session")
	some, err := s.Tail(ctx(t), one, store.TailOptions{})
	must(t, err, "Tail")
	equal(t, len(some), 20, "a tail of the default length")
}

func tailPaging(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	for i := range 47 {
		appendOK(t, s, streamOf(t, session, fmt.Sprintf("r%d", i%3)), model.AnyVersion, fmt.Sprintf("a%d", i), msg(fmt.Sprint(i)))
	}
	full := snapshot(t, s, session)

	var pages [][]model.RecordedEvent
	before := ""
	for {
		page, err := s.Tail(ctx(t), session, store.TailOptions{N: 10, Before: before})
		must(t, err, "Tail")
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		if len(pages) > len(full) {
			t.Fatalf("paging a tail backwards does not end: the tail before a cursor holds it")
		}
		before = page[0].Cursor
	}
	var back []model.RecordedEvent
	for i := len(pages) - 1; i >= 0; i-- {
		back = append(back, pages[i]...)
	}
	has(t, len(pages), 5, "pages of 10 of 47 events")
	equal(t, len(pages[len(pages)-1]), 7, "the oldest page")
	equal(t, back, full, "the pages, oldest first")
}

func recordedFields(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	before := time.Now()
	appendOK(t, s, ref, 0, "a1",
		model.Event{"type": "mutation", "agent": "w", "kind": "task.done", "task_id": "jwt", "run_id": "r1",
			"parents": []any{"e0"}, "score": 0.5, "n": -7, "big": int64(1<<53 - 1), "none": nil, "yes": true},
		model.Event{"type": "tool_result", "agent": "w", "tool": "t", "attempt_id": "x", "status": "error",
			"result": map[string]any{"error": "boom", "n": []any{1, nil, true}}},
	)
	events := readStream(t, s, ref, store.ReadStreamOptions{})
	has(t, len(events), 2, "events read")
	mutation, done := events[0], events[1]

	equal(t, mutation.Fields, model.Event{"type": "mutation", "agent": "w", "kind": "task.done", "task_id": "jwt",
		"run_id": "r1", "parents": []any{"e0"}, "score": 0.5, "n": int64(-7), "big": int64(1<<53 - 1),
		"none": nil, "yes": true, "event_id": model.DeriveEventID(ref, "a1", 0)}, "the mutation's fields")
	equal(t, []string{mutation.Type(), mutation.Agent()}, []string{"mutation", "w"}, "type and agent")
	equal(t, done.Fields["result"], map[string]any{"error": "boom", "n": []any{int64(1), nil, true}}, "the result")
	equal(t, done.Stream, ref, "the stream")

	at := mutation.RecordedAt()
	ms, _, err := model.ParseCursor(mutation.Cursor)
	must(t, err, "ParseCursor")
	equal(t, at.UnixMilli(), ms, "the commit time is the cursor's")
	equal(t, at.Location(), time.UTC, "the commit time's zone")
	// The store's clock is not this process's: only a commit time far off the mark is wrong
	// (seconds taken for milliseconds, or none at all).
	if at.Before(before.Add(-time.Hour)) || at.After(time.Now().Add(time.Hour)) {
		t.Errorf("commit time %s is not near %s", at, before)
	}
}

// badBatchCases are appends that break section 2 of the spec, each refused whole.
func badBatchCases() map[string][]model.Event {
	parents := make([]any, 30_000)
	for n := range parents {
		parents[n] = fmt.Sprintf("%040d", n)
	}
	return map[string][]model.Event{
		"unknown type":               {{"type": "thought", "agent": "a"}},
		"missing field":              {{"type": "message", "agent": "a"}},
		"missing attempt id":         {{"type": "tool_call", "agent": "a", "tool": "t"}},
		"bad status":                 {{"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "x", "status": "maybe"}},
		"wrong field type":           {{"type": "message", "agent": "a", "body": 7}},
		"unknown field on a message": {{"type": "message", "agent": "a", "body": "x", "mood": "ok"}},
		"empty agent":                {{"type": "message", "agent": "", "body": "x"}},
		"control character in an id": {{"type": "message", "agent": "a\nb", "body": "x"}},
		"NaN":                        {{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "x", "args": map[string]any{"v": math.NaN()}}},
		"Infinity":                   {{"type": "mutation", "agent": "a", "kind": "k", "score": math.Inf(1)}},
		"lone surrogate":             {{"type": "message", "agent": "a", "body": "bad \xed\xa0\x80 text"}},
		"invalid UTF-8":              {{"type": "message", "agent": "a", "body": "bad \xff text"}},
		"surrogate in a key":         {{"type": "mutation", "agent": "a", "kind": "k", "data": map[string]any{"\xed\xbf\xbf": 1}}},
		"integer JSON cannot carry":  {{"type": "mutation", "agent": "a", "kind": "k", "n": int64(1 << 53)}},
		"a value JSON cannot carry":  {{"type": "mutation", "agent": "a", "kind": "k", "f": func() {}}},
		"reserved mutation field":    {{"type": "mutation", "agent": "a", "kind": "k", "version": 3}},
		"not an object":              {nil},
		"nested too deep":            {{"type": "mutation", "agent": "a", "kind": "k", "deep": nested(130)}},
		// What no artifact can take: the fields that frame an event stay in it (spec 3.11).
		"oversized event": {{"type": "message", "agent": "a", "body": "x", "parents": parents}},
		"empty batch":     {},
		"one bad event among good ones": {
			{"type": "message", "agent": "a", "body": "fine"},
			{"type": "message", "agent": "a", "body": "fine too"},
			{"type": "message", "agent": "a", "body": math.NaN()},
		},
	}
}

// nested is a list holding a list ... depth deep.
func nested(depth int) any {
	var v any = "bottom"
	for range depth {
		v = []any{v}
	}
	return v
}

func badBatches(t *testing.T, s store.Log) {
	cases := badBatchCases()
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ref := streamOf(t, newSession(t, "s1"), "run-a")
			appendOK(t, s, ref, 0, "a0", msg("existing"))
			before := snapshot(t, s, ref.Session)

			_, err := s.Append(ctx(t), ref, 1, "bad", cases[name])

			refused(t, err, model.ErrInvalidEvent, name)
			var invalid *model.InvalidEventError
			if !errors.As(err, &invalid) {
				t.Errorf("error %T is no *model.InvalidEventError", err)
			}
			equal(t, model.ExitCode(err), 2, "exit code")
			equal(t, snapshot(t, s, ref.Session), before, "the session after the refusal")
			version, err := s.StreamVersion(ctx(t), ref)
			must(t, err, "StreamVersion")
			equal(t, version, int64(1), "StreamVersion after the refusal")
			// The append_id was not consumed: a good append may still use it.
			equal(t, appendOK(t, s, ref, 1, "bad", msg("good")).FirstVersion, int64(2), "the id refused, used again")
		})
	}
}

func invalidEventNames(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	var invalid *model.InvalidEventError

	_, err := s.Append(ctx(t), ref, 0, "a1", badBatchCases()["one bad event among good ones"])
	if !errors.As(err, &invalid) {
		t.Fatalf("error %v (%T) is no *model.InvalidEventError", err, err)
	}
	equal(t, []any{invalid.Index, invalid.Field}, []any{2, "body"}, "index and field")

	_, err = s.Append(ctx(t), ref, 0, "a1", []model.Event{call("x", "", "", map[string]any{"nested": map[string]any{"deep": []any{0, math.NaN()}}})})
	if !errors.As(err, &invalid) {
		t.Fatalf("error %v (%T) is no *model.InvalidEventError", err, err)
	}
	equal(t, []any{invalid.Index, invalid.Field}, []any{0, "args.nested.deep[1]"}, "index and field")
}

func badArguments(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	ref := streamOf(t, session, "x")
	good := []model.Event{msg("x")}
	cases := []struct {
		name     string
		stream   model.StreamID
		expected int64
		appendID string
	}{
		{"a negative version", ref, -2, "a"},
		{"an empty append_id", ref, 0, ""},
		{"an append_id of 513 characters", ref, 0, strings.Repeat("é", 513)},
		{"an append_id of invalid UTF-8", ref, 0, "a\xffb"},
		{"a session id with a space", model.StreamID{Session: "s 1", Name: "x"}, 0, "a"},
		{"an empty stream name", model.StreamID{Session: session, Name: ""}, 0, "a"},
		{"a stream name with a brace", model.StreamID{Session: session, Name: "{x}"}, 0, "a"},
	}
	for _, c := range cases {
		_, err := s.Append(ctx(t), c.stream, c.expected, c.appendID, good)
		refused(t, err, model.ErrInvalidInput, c.name)
		equal(t, model.ExitCode(err), 2, c.name+": exit code")
	}
	// An append_id of 512 characters (not bytes) is good.
	appendOK(t, s, streamOf(t, session, "long"), 0, strings.Repeat("é", 512), msg("x"))

	reads := map[string]func() error{
		"ScanSession after a bad cursor": func() error {
			_, err := s.ScanSession(ctx(t), session, store.ScanOptions{After: "yesterday"})
			return err
		},
		"ScanSession with a negative limit": func() error {
			_, err := s.ScanSession(ctx(t), session, store.ScanOptions{Limit: -1})
			return err
		},
		"ScanSession of a bad session id": func() error {
			_, err := s.ScanSession(ctx(t), "a{b}", store.ScanOptions{})
			return err
		},
		"ReadStream after a negative version": func() error {
			_, err := s.ReadStream(ctx(t), ref, store.ReadStreamOptions{After: -1})
			return err
		},
		"ReadStream of a bad stream": func() error {
			_, err := s.ReadStream(ctx(t), model.StreamID{Session: session, Name: "a b"}, store.ReadStreamOptions{})
			return err
		},
		"Tail before a bad cursor": func() error {
			_, err := s.Tail(ctx(t), session, store.TailOptions{Before: "12-x"})
			return err
		},
		"Tail of a negative count": func() error {
			_, err := s.Tail(ctx(t), session, store.TailOptions{N: -1})
			return err
		},
		"WaitSession after a bad cursor": func() error {
			_, err := s.WaitSession(ctx(t), session, store.WaitOptions{After: "-1"})
			return err
		},
		"StreamVersion of a bad stream": func() error {
			_, err := s.StreamVersion(ctx(t), model.StreamID{Session: "", Name: "x"})
			return err
		},
		"SessionExists of a bad session id": func() error {
			_, err := s.SessionExists(ctx(t), "tab\there")
			return err
		},
		"Artifact of a bad sha256": func() error {
			_, err := s.Artifact(ctx(t), session, "xyz")
			return err
		},
	}
	for name, read := range reads {
		refused(t, read(), model.ErrInvalidInput, name)
	}
	equal(t, eventIDsOf(snapshot(t, s, session)), []string{model.DeriveEventID(streamOf(t, session, "long"), strings.Repeat("é", 512), 0)}, "what was written")
}

func badNames(t *testing.T, s store.Log) {
	for _, name := range []string{"", "has space", "br{ace", "br}ace", "tab\t", "nl\n", "del\x7f", "c1\u0085", "nbsp\u00a0", "bad\xff", strings.Repeat("x", 201)} {
		_, err := model.NewStreamID(name, "main")
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("session id %q", name))
		_, err = model.NewStreamID("s1", name)
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("stream name %q", name))
		_, err = s.StreamVersion(ctx(t), model.StreamID{Session: name, Name: "main"})
		refused(t, err, model.ErrInvalidInput, fmt.Sprintf("StreamVersion of session id %q", name))
	}
	// 200 characters, not bytes, is the bound.
	long := strings.Repeat("é", 200)
	if _, err := model.NewStreamID(long, long); err != nil {
		t.Errorf("names of 200 characters refused: %v", err)
	}
}

func tooManyEvents(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	_, err := s.Append(ctx(t), ref, 0, "a1", messages("", limitsOf(s).MaxEventsPerAppend+1))
	refused(t, err, model.ErrInvalidEvent, "too many events")
	version, err := s.StreamVersion(ctx(t), ref)
	must(t, err, "StreamVersion")
	equal(t, version, int64(0), "StreamVersion")
}

func waitWakes(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	old := appendOK(t, s, ref, 0, "a1", msg("old"))

	written := make(chan error, 1)
	go func() {
		// Late enough, most often, that the wait below is waiting: it finds the event either way.
		time.Sleep(100 * time.Millisecond)
		_, err := s.Append(context.Background(), ref, 1, "a2", []model.Event{msg("new")})
		written <- err
	}()
	found, err := s.WaitSession(woken(t), ref.Session, store.WaitOptions{After: old.Cursor, Timeout: time.Minute})
	must(t, <-written, "the append waited for")
	must(t, err, "WaitSession")
	has(t, len(found), 1, "events the wait returned")
	equal(t, bodies(found), strs("new"), "what the wait returned")

	none, err := s.WaitSession(ctx(t), ref.Session, store.WaitOptions{After: found[len(found)-1].Cursor, Timeout: 50 * time.Millisecond})
	must(t, err, "WaitSession")
	equal(t, len(none), 0, "events of a wait that timed out")
	none, err = s.WaitSession(ctx(t), ref.Session, store.WaitOptions{After: found[len(found)-1].Cursor})
	must(t, err, "WaitSession")
	equal(t, len(none), 0, "events of a wait of no time")
}

// woken is the context of a wait an append should end: it ends first, with an error, if the
// store does not wake the wait, long before the wait's own timeout would return what came.
func woken(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func waitFromNow(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	appendOK(t, s, ref, 0, "a1", msg("old"))

	none, err := s.WaitSession(ctx(t), ref.Session, store.WaitOptions{Timeout: 50 * time.Millisecond})
	must(t, err, "WaitSession")
	equal(t, len(none), 0, "events committed before the wait")

	// The writer appends until the wait returns: whenever the wait began, what it returns
	// committed after it did, so it is none of what came before.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := s.Append(context.Background(), ref, model.AnyVersion, fmt.Sprintf("n%d", i), []model.Event{msg(fmt.Sprintf("new-%d", i))}); err != nil {
				t.Errorf("Append: %v", err)
				return
			}
		}
	}()
	found, err := s.WaitSession(woken(t), ref.Session, store.WaitOptions{Timeout: time.Minute, Limit: 2})
	close(done)
	wg.Wait()
	must(t, err, "WaitSession")
	if len(found) == 0 || len(found) > 2 {
		t.Fatalf("the wait returned %d events, want 1 or 2", len(found))
	}
	for _, e := range found {
		if body, _ := e.Fields["body"].(string); !strings.HasPrefix(body, "new-") {
			t.Errorf("the wait returned %q, committed before it", body)
		}
	}
}

func waitContext(t *testing.T, s store.Log) {
	session := newSession(t, "s1")
	c, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	defer cancel()
	found, err := s.WaitSession(c, session, store.WaitOptions{Timeout: time.Minute})
	if err == nil {
		t.Fatalf("a wait whose context ended returned %d events and no error", len(found))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q (%T) is not context.DeadlineExceeded", err, err)
	}
}

func sessionsIndex(t *testing.T, s store.Log) {
	one, two := newSession(t, "s1"), newSession(t, "s2")
	appendOK(t, s, streamOf(t, one, "run-a"), 0, "a1", msg("one"), msg("two"))
	appendOK(t, s, streamOf(t, two, "main"), 0, "x", msg("four"))

	all, err := s.Sessions(ctx(t), store.SessionsOptions{})
	must(t, err, "Sessions")
	listed := map[string]bool{}
	for i, a := range all {
		listed[a.Session] = true
		if i > 0 && a.Last.After(all[i-1].Last) {
			t.Errorf("session %s (%s) is listed after %s (%s), older", a.Session, a.Last, all[i-1].Session, all[i-1].Last)
		}
	}
	if !listed[one] || !listed[two] {
		t.Errorf("sessions %s and %s are not both in the index", one, two)
	}
	some, err := s.Sessions(ctx(t), store.SessionsOptions{Limit: 1})
	must(t, err, "Sessions")
	equal(t, len(some), 1, "sessions listed at a limit of 1")
	_, err = s.Sessions(ctx(t), store.SessionsOptions{Limit: -1})
	refused(t, err, model.ErrInvalidInput, "a negative limit")
}

func artifacts(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	big := strings.Repeat("x", 70_000)
	rows := make([]any, 3000)
	for n := range rows {
		rows[n] = map[string]any{"n": int64(n), "label": fmt.Sprintf("row %d", n)}
	}
	args := map[string]any{"data": map[string]any{"rows": rows}}
	events := []model.Event{msg(big), call("c1", "", "t", args)}
	appendOK(t, s, ref, 0, "a1", events...)

	whole := readStream(t, s, ref, store.ReadStreamOptions{})
	has(t, len(whole), 2, "events read")
	equal(t, whole[0].Fields["body"], big, "the body read back")
	equal(t, whole[1].Fields["args"], args, "the args read back")
	tail, err := s.Tail(ctx(t), ref.Session, store.TailOptions{N: 2})
	must(t, err, "Tail")
	equal(t, tail, whole, "the tail")
	equal(t, snapshot(t, s, ref.Session), whole, "the scan")
	var iterated []model.RecordedEvent
	for e, err := range s.Session(ctx(t), ref.Session, store.IterOptions{}) {
		must(t, err, "Session")
		iterated = append(iterated, e)
	}
	equal(t, iterated, whole, "the events iterated")
	waited, err := s.WaitSession(ctx(t), ref.Session, store.WaitOptions{After: model.CursorZero})
	must(t, err, "WaitSession")
	equal(t, waited, whole, "the events waited for")

	refs := readStream(t, s, ref, store.ReadStreamOptions{Refs: true})
	has(t, len(refs), 2, "events read with Refs")
	body, ok := refs[0].Fields["body"].(model.ArtifactRef)
	if !ok {
		t.Fatalf("the body read with Refs is %T, not a model.ArtifactRef", refs[0].Fields["body"])
	}
	equal(t, body.Size, int64(70_000), "the reference's size")
	equal(t, body.MediaType, "text/plain; charset=utf-8", "the reference's media type")
	data, err := s.Artifact(ctx(t), ref.Session, body.SHA256)
	must(t, err, "Artifact")
	equal(t, string(data), big, "the artifact's bytes")
	if _, ok := refs[1].Fields["args"].(model.ArtifactRef); !ok {
		t.Errorf("the args read with Refs are %T, not a model.ArtifactRef", refs[1].Fields["args"])
	}
	scanned, err := s.ScanSession(ctx(t), ref.Session, store.ScanOptions{Refs: true})
	must(t, err, "ScanSession")
	equal(t, scanned, refs, "the scan with Refs")

	_, err = s.Artifact(ctx(t), ref.Session, strings.Repeat("0", 64))
	refused(t, err, model.ErrNotFound, "an artifact the session does not hold")
	_, err = s.Artifact(ctx(t), newSession(t, "other"), body.SHA256)
	refused(t, err, model.ErrNotFound, "an artifact of another session")
	// A retry of the append deduplicates, artifacts and all.
	equal(t, appendOK(t, s, ref, 0, "a1", events...).Deduplicated, true, "the retry deduplicates")
	// The same bytes in a later append are the same artifact.
	appendOK(t, s, ref, 2, "a2", msg(big))
	again := readStream(t, s, ref, store.ReadStreamOptions{After: 2, Refs: true})
	has(t, len(again), 1, "events read after version 2")
	equal(t, again[0].Fields["body"], body, "the reference of the same bytes appended again")
}

// logOnly is a store with the log alone, however much more the store it wraps has.
type logOnly struct{ store.Log }

func needRefuses(t *testing.T, s store.Log) {
	only := logOnly{s}
	_, err := store.Need[store.Groups](only)
	refused(t, err, model.ErrUnsupported, "Need[store.Groups]")
	refused(t, err, model.ErrBackendRefused, "Need[store.Groups]")
	equal(t, err.Error(), fmt.Sprintf("this store (%s) has no consumer groups: it has log", s.Tier()), "the refusal")
	equal(t, model.ExitCode(err), 8, "exit code")
	_, err = store.Need[store.Attempts](only)
	refused(t, err, model.ErrUnsupported, "Need[store.Attempts]")
	equal(t, err.Error(), fmt.Sprintf("this store (%s) has no leases and open attempts: it has log", s.Tier()), "the refusal")
	if _, err := store.Need[store.Log](only); err != nil {
		t.Errorf("Need[store.Log] of a log: %v", err)
	}
}

func concurrentAny(t *testing.T, s store.Log) {
	const writers, each = 8, 25
	session := newSession(t, "s1")
	ref := streamOf(t, session, "shared")
	results := make([][]model.AppendResult, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				events := []model.Event{msg(fmt.Sprintf("w%d-%d-a", w, i)), msg(fmt.Sprintf("w%d-%d-b", w, i))}
				r, err := s.Append(context.Background(), ref, model.AnyVersion, fmt.Sprintf("w%d-%d", w, i), events)
				if err != nil {
					t.Errorf("writer %d, append %d: %v", w, i, err)
					return
				}
				results[w] = append(results[w], r)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	taken := map[int64]string{}
	for w, rs := range results {
		for i, r := range rs {
			if r.LastVersion != r.FirstVersion+1 || r.Deduplicated {
				t.Errorf("writer %d, append %d: versions %d..%d, deduplicated %v", w, i, r.FirstVersion, r.LastVersion, r.Deduplicated)
			}
			if i > 0 && r.FirstVersion <= rs[i-1].LastVersion {
				t.Errorf("writer %d: append %d took versions below its previous one's", w, i)
			}
			for v := r.FirstVersion; v <= r.LastVersion; v++ {
				if prior, ok := taken[v]; ok {
					t.Errorf("version %d taken twice: %s and writer %d", v, prior, w)
				}
				taken[v] = fmt.Sprintf("writer %d", w)
			}
		}
	}
	events := readStream(t, s, ref, store.ReadStreamOptions{})
	equal(t, versions(events), span(1, writers*each*2), "the versions, gapless")
	strictlyIncreasing(t, cursors(events))
	equal(t, cursors(snapshot(t, s, session)), cursors(events), "the session log")
	for i := 0; i < len(events); i += 2 {
		a, _ := events[i].Fields["body"].(string)
		b, _ := events[i+1].Fields["body"].(string)
		if !strings.HasSuffix(a, "-a") || strings.TrimSuffix(a, "-a")+"-b" != b {
			t.Fatalf("an append's events are not consecutive: %q then %q", a, b)
		}
	}
}

func rivalWriters(t *testing.T, s store.Log) {
	const writers, each = 8, 10
	ref := streamOf(t, newSession(t, "s1"), "contended")
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[int64]int{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; {
				version, err := s.StreamVersion(context.Background(), ref)
				if err != nil {
					t.Errorf("StreamVersion: %v", err)
					return
				}
				r, err := s.Append(context.Background(), ref, version, fmt.Sprintf("w%d-%d", w, i), []model.Event{msg(fmt.Sprintf("w%d-%d", w, i))})
				var conflict *model.VersionConflictError
				switch {
				case errors.As(err, &conflict):
					if conflict.Expected != version || conflict.Actual <= version {
						t.Errorf("a conflict at %d reports %d, %d", version, conflict.Expected, conflict.Actual)
						return
					}
					continue // another writer took it: read again and retry
				case err != nil:
					t.Errorf("Append: %v", err)
					return
				}
				if r.FirstVersion != version+1 {
					t.Errorf("an append at %d took version %d", version, r.FirstVersion)
				}
				mu.Lock()
				won[r.FirstVersion]++
				mu.Unlock()
				i++
			}
		}()
	}
	wg.Wait()
	equal(t, len(won), writers*each, "versions won")
	for v, n := range won {
		if n != 1 {
			t.Errorf("version %d won %d times", v, n)
		}
	}
	equal(t, versions(readStream(t, s, ref, store.ReadStreamOptions{})), span(1, writers*each), "the versions")
}

func localDurability(t *testing.T, s store.Log) {
	ref := streamOf(t, newSession(t, "s1"), "run-a")
	r, err := s.Append(ctx(t), ref, 0, "a1", []model.Event{msg("one")}, store.WithDurability(model.Local()))
	must(t, err, "Append with local durability")
	equal(t, []any{r.Durability, r.FirstVersion}, []any{"local", int64(1)}, "the result's durability and version")
}
