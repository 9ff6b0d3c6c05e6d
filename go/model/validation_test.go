package model

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// The refusals Python names are held to its words in TestGoldenInvalid; these are the ones
// only Go values can make, and the rules around them.

func TestInvalidGoValues(t *testing.T) {
	type point struct{ X, Y int }
	type mood string
	call := func(args map[string]any) Event { return ToolCall("a", "t", "c1", args) }
	mutation := func(name string, value any) Event { return Mutation("a", "k", map[string]any{name: value}) }
	cases := []struct {
		name   string
		events []Event
		index  int
		field  string
		reason string
	}{
		{"a struct", []Event{call(map[string]any{"p": point{1, 2}})}, 0, "args.p", "model.point is not a JSON value"},
		{"a pointer", []Event{mutation("p", &point{})}, 0, "p", "*model.point is not a JSON value"},
		{"a channel", []Event{call(map[string]any{"nested": map[string]any{"c": make(chan int)}})}, 0, "args.nested.c", "chan int is not a JSON value"},
		{"a func", []Event{mutation("f", func() {})}, 0, "f", "func() is not a JSON value"},
		{"a complex number", []Event{mutation("z", complex(1, 2))}, 0, "z", "complex128 is not a JSON value"},
		{"NaN deep down", []Event{call(map[string]any{"nested": map[string]any{"deep": []any{0, math.NaN()}}})}, 0, "args.nested.deep[1]", "nan is not a JSON number"},
		{"Inf as a result", []Event{ToolResult("a", "t", "c1", "ok", math.Inf(1))}, 0, "result", "inf is not a JSON number"},
		{"a float32 NaN", []Event{mutation("f", float32(math.NaN()))}, 0, "f", "nan is not a JSON number"},
		{"an int64 beyond 2^53-1", []Event{mutation("n", int64(math.MaxInt64))}, 0, "n", "integer outside"},
		{"an int below -(2^53-1)", []Event{mutation("n", []int{0, math.MinInt64})}, 0, "n[1]", "integer outside"},
		{"a uint64 too big", []Event{mutation("n", uint64(1<<53))}, 0, "n", "integer outside"},
		{"a string that is not UTF-8", []Event{Message("a", "bad \xc3\x28 text")}, 0, "body", "string is not valid UTF-8"},
		{"an agent that is not UTF-8", []Event{Message("a\xff", "x")}, 0, "agent", "string is not valid UTF-8"},
		{"a key that is not UTF-8", []Event{mutation("data", map[string]any{"\xff": 1})}, 0, "data", "object key"},
		{"a map with int keys", []Event{mutation("m", map[int]string{1: "x"})}, 0, "m", "object key 1 is not a string"},
		{"bytes", []Event{Message("a", "x"), mutation("b", []byte("raw"))}, 1, "b", "[]uint8 is not a JSON value; give a string"},
		{"an ArtifactRef given", []Event{mutation("r", ArtifactRef{SHA256: "00"})}, 0, "r", "an ArtifactRef is not a JSON value"},
		{"args a struct", []Event{{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c", "args": point{}}}, 0, "args", "Input should be a valid dictionary"},
		{"args nil", []Event{{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c", "args": nil}}, 0, "args", "Input should be a valid dictionary"},
		{"agent a number", []Event{{"type": "message", "agent": 3, "body": "x"}}, 0, "agent", "Input should be a valid string"},
		{"parents of ints", []Event{{"type": "message", "agent": "a", "body": "x", "parents": []int{1}}}, 0, "parents.0", "Input should be a valid string"},
		{"parents as bytes", []Event{{"type": "message", "agent": "a", "body": "x", "parents": []byte("p")}}, 0, "parents", "Input should be a valid list"},
		{"an unknown field of a named string type", []Event{{"type": "message", "agent": "a", "body": "x", "mood": mood("ok")}}, 0, "mood", "message events have no such field"},
		{"a nil event", []Event{Message("a", "x"), nil}, 1, "type", "unknown event type None; the vocabulary is message, tool_call, tool_result, mutation"},
		{"a type of another kind", []Event{{"type": 7}}, 0, "type", "unknown event type 7; the vocabulary is message, tool_call, tool_result, mutation"},
		{"the first of two faults in an event", []Event{{"type": "message", "agent": "", "body": 7}}, 0, "agent", "String should have at least 1 character"},
		{"an unknown field after a missing one", []Event{{"type": "message", "agent": "a", "zzz": 1, "aaa": 2}}, 0, "body", "required field is missing"},
		{"unknown fields by name", []Event{{"type": "message", "agent": "a", "body": "x", "zzz": 1, "aaa": 2}}, 0, "aaa", "message events have no such field"},
		{"a JSON fault after a vocabulary fault in a later event", []Event{mutation("x", math.NaN()), {"type": "message"}}, 0, "x", "nan is not a JSON number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := PrepareAppend(StreamID{"s", "x"}, "a", c.events, DefaultLimits())
			var invalid *InvalidEventError
			if !errors.As(err, &invalid) {
				t.Fatalf("error %v, want an InvalidEventError", err)
			}
			if !errors.Is(err, ErrInvalidEvent) || ExitCode(err) != 2 {
				t.Errorf("%v is not an InvalidEvent of exit code 2", err)
			}
			if invalid.Index != c.index || invalid.Field != c.field || !strings.HasPrefix(invalid.Reason, c.reason) {
				t.Errorf("got %d %q %q\nwant %d %q %q", invalid.Index, invalid.Field, invalid.Reason,
					c.index, c.field, c.reason)
			}
		})
	}
}

func TestGoValuesAccepted(t *testing.T) {
	type label string
	type level int8
	events := []Event{
		{"type": label("mutation"), "agent": label("a"), "kind": "k", "named": level(-3),
			"ints": []int64{1, MaxSafeInteger}, "u": uint32(7), "f32": float32(1.5),
			"strings": []string{"x"}, "objects": []map[string]any{{"a": nil}},
			"nested": map[string][]float64{"v": {0.5}}, "arr": [2]string{"p", "q"}},
		{"type": "message", "agent": "a", "body": "x", "parents": []label{"p1"},
			"event_id": nil, "run_id": nil, "step_id": nil, "attempt_id": nil},
		ToolCall("a", "t", "c1", nil),
		ToolResult("a", "t", "c1", "ok", nil),
	}
	prepared, err := PrepareAppend(StreamID{"s", "x"}, "a", events, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := Event{
		"type": "mutation", "agent": "a", "kind": "k", "named": int64(-3),
		"ints": []any{int64(1), int64(MaxSafeInteger)}, "u": int64(7), "f32": 1.5,
		"strings": []any{"x"}, "objects": []any{map[string]any{"a": nil}},
		"nested": map[string]any{"v": []any{0.5}}, "arr": []any{"p", "q"},
		"event_id": DeriveEventID(StreamID{"s", "x"}, "a", 0),
	}
	if d := differs(prepared.Fields[0], want, "fields"); d != "" {
		t.Errorf("plain values differ at %s", d)
	}
	// Defaults are left out; a named string is a plain string.
	if d := differs(prepared.Fields[1], Event{"type": "message", "agent": "a", "body": "x",
		"parents": []any{"p1"}, "event_id": DeriveEventID(StreamID{"s", "x"}, "a", 1)}, "fields"); d != "" {
		t.Errorf("the message differs at %s", d)
	}
	for i, fields := range prepared.Fields {
		got, err := Unpack(prepared.Payloads[i])
		if err != nil {
			t.Fatal(err)
		}
		if d := differs(got, fields, "payload"); d != "" {
			t.Errorf("event %d: payload differs at %s", i, d)
		}
	}
	// The caller's events are not changed.
	if _, ok := events[2]["event_id"]; ok {
		t.Error("PrepareAppend filled in an id in the caller's event")
	}
}

func TestDefaultsDoNotChangeTheDigest(t *testing.T) {
	stream := StreamID{"s", "x"}
	plain := []Event{ToolCall("a", "t", "c1", nil), ToolResult("a", "t", "c1", "ok", nil)}
	spelled := []Event{
		{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c1", "args": map[string]any{},
			"parents": []string{}, "run_id": nil},
		{"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "c1", "status": "ok",
			"result": nil, "event_id": nil},
	}
	a, err := PrepareAppend(stream, "a", plain, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	b, err := PrepareAppend(stream, "b", spelled, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Errorf("defaults changed the digest: %s, %s", a.Digest, b.Digest)
	}
	// A mutation's own null is its data.
	m1, _ := PrepareAppend(stream, "a", []Event{Mutation("a", "k", nil)}, DefaultLimits())
	m2, _ := PrepareAppend(stream, "a", []Event{Mutation("a", "k", map[string]any{"result": nil})}, DefaultLimits())
	if m1.Digest == m2.Digest {
		t.Error("a mutation's result: null was taken for a default")
	}
	// Given event ids are part of the content, generated ones are not: a retry under another
	// append_id has the same digest.
	if a.Fields[0]["event_id"] == b.Fields[0]["event_id"] {
		t.Error("two append ids derived the same event id")
	}
}

func TestLimits(t *testing.T) {
	stream := StreamID{"s", "x"}
	many := make([]Event, 1001)
	for i := range many {
		many[i] = Message("a", "x")
	}
	_, err := PrepareAppend(stream, "a", many, DefaultLimits())
	var invalid *InvalidEventError
	if !errors.As(err, &invalid) || invalid.Index != -1 || invalid.Reason != "1001 events in one append; the limit is 1000" {
		t.Errorf("1001 events: %v", err)
	}
	if _, err := PrepareAppend(stream, "a", many[:1000], DefaultLimits()); err != nil {
		t.Errorf("1000 events: %v", err)
	}
	if _, err := PrepareAppend(stream, "a", nil, DefaultLimits()); !errors.As(err, &invalid) || invalid.Reason != "an append needs at least one event" {
		t.Errorf("no events: %v", err)
	}
	// Just at the event limit passes, a byte more does not; the size is the canonical one.
	limits := DefaultLimits()
	limits.ArtifactThreshold = -1
	event := Message("a", "")
	canonical, _ := Canonical(event)
	limits.MaxEventBytes = len(canonical) + 10
	if _, err := PrepareAppend(stream, "a", []Event{Message("a", strings.Repeat("x", 10))}, limits); err != nil {
		t.Errorf("an event at the limit: %v", err)
	}
	_, err = PrepareAppend(stream, "a", []Event{Message("a", strings.Repeat("x", 11))}, limits)
	if !errors.As(err, &invalid) || invalid.Index != 0 || !strings.Contains(invalid.Reason, "the limit is") {
		t.Errorf("an event a byte over the limit: %v", err)
	}
	// A multi-byte character counts its UTF-8 bytes.
	_, err = PrepareAppend(stream, "a", []Event{Message("a", strings.Repeat("é", 6))}, limits)
	if err == nil {
		t.Error("12 bytes of text passed a limit of 10")
	}
}

func TestArtifacts(t *testing.T) {
	stream := StreamID{"s", "x"}
	limits := DefaultLimits()
	limits.ArtifactThreshold = 1024
	big := strings.Repeat("z", 2000)
	events := []Event{
		Message("a", big),
		Mutation("a", "k", map[string]any{"kind_stays": "k", "same": big, "small": "s"}),
		ToolCall("a", "t", "c1", map[string]any{"rows": strings.Split(strings.Repeat("row,", 300), ",")}),
		Message("a", "small"),
	}
	prepared, err := PrepareAppend(stream, "a", events, limits)
	if err != nil {
		t.Fatal(err)
	}
	if len(prepared.Artifacts) != 2 {
		t.Fatalf("%d artifacts, want the text once and the args", len(prepared.Artifacts))
	}
	if prepared.Uses[0].Count != 2 || prepared.Uses[1].Count != 1 {
		t.Errorf("uses %+v, want the text twice and the args once", prepared.Uses)
	}
	text := prepared.Artifacts[0]
	if text.MediaType != MediaText || string(text.Data) != big {
		t.Errorf("the text's artifact is %s of %d bytes", text.MediaType, len(text.Data))
	}
	args := prepared.Artifacts[1]
	if canonical, _ := Canonical(events[2]["args"]); args.MediaType != MediaJSON || string(args.Data) != string(canonical) {
		t.Errorf("the args' artifact is %s, not their canonical JSON", args.MediaType)
	}
	fetch := func(ref ArtifactRef) ([]byte, error) {
		for _, a := range prepared.Artifacts {
			if a.SHA256 == ref.SHA256 {
				return a.Data, nil
			}
		}
		return nil, Errorf(ErrNotFound, "no artifact %s", ref.SHA256)
	}
	for i := range events {
		payload, err := Unpack(prepared.Payloads[i])
		if err != nil {
			t.Fatal(err)
		}
		if d := payloadDiffers(payload, prepared.Fields[i]); d != "" {
			t.Errorf("event %d: %s", i, d)
		}
		refs := RefsIn(payload)
		if want := map[int]int{0: 1, 1: 1, 2: 1, 3: 0}[i]; len(refs) != want {
			t.Errorf("event %d has %d references, want %d", i, len(refs), want)
		}
		resolved, err := Resolve(payload, fetch)
		if err != nil {
			t.Fatal(err)
		}
		if d := differs(resolved, prepared.Fields[i], "resolved"); d != "" {
			t.Errorf("event %d resolved differs at %s", i, d)
		}
	}
	if _, ok := mustUnpack(t, prepared.Payloads[1])["kind"].(string); !ok {
		t.Error("a mutation's kind was moved out")
	}
	// The digest is of the events whole: the same as with artifacts off.
	limits.ArtifactThreshold = -1
	whole, err := PrepareAppend(stream, "a", events, limits)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Digest != prepared.Digest || len(whole.Artifacts) != 0 {
		t.Error("artifacts changed the digest, or were made with the threshold off")
	}
	// A fetch that fails is Resolve's error.
	missing := errors.New("gone")
	if _, err := Resolve(mustUnpack(t, prepared.Payloads[0]), func(ArtifactRef) ([]byte, error) { return nil, missing }); !errors.Is(err, missing) {
		t.Errorf("Resolve with a failing fetch: %v", err)
	}
	// Bytes that are not what the reference says are an error, not a panic.
	if _, err := Resolve(mustUnpack(t, prepared.Payloads[2]), func(ArtifactRef) ([]byte, error) { return []byte("{"), nil }); err == nil {
		t.Error("Resolve took bytes that are not JSON")
	}
}

func mustUnpack(t *testing.T, payload []byte) Event {
	t.Helper()
	fields, err := Unpack(payload)
	if err != nil {
		t.Fatal(err)
	}
	return fields
}

func TestNotes(t *testing.T) {
	call := ToolCall("a", "t", "c1", nil)
	result := ToolResult("a", "t", "c1", "ok", nil)
	call2 := ToolCall("a", "t", "c2", nil)
	call2["run_id"] = "r"
	prepared, err := PrepareAppend(StreamID{"s", "x"}, "a", []Event{call, result, call2}, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "c\x1fc1", "o\x1fc2\x1fr\x1ft"}
	for i, note := range prepared.Notes {
		if note != want[i] {
			t.Errorf("note %d %q, want %q", i, note, want[i])
		}
	}
	if !prepared.OpensAttempts() || OpensAttempt(prepared.Notes[1]) || !OpensAttempt(prepared.Notes[2]) {
		t.Error("OpensAttempt misread the notes")
	}
	if got := LuaNotes(prepared.Notes); got != "\x1e\x1ec\x1fc1\x1eo\x1fc2\x1fr\x1ft" {
		t.Errorf("LuaNotes %q", got)
	}
}

func TestInvalidKeys(t *testing.T) {
	_, err := PrepareAppend(StreamID{"s", "x"}, "a", []Event{Mutation("a", "k", map[string]any{"\xff": 1})}, DefaultLimits())
	var invalid *InvalidEventError
	if !errors.As(err, &invalid) || invalid.Index != 0 || !strings.Contains(invalid.Reason, "not valid UTF-8") {
		t.Errorf("a field name that is not UTF-8: %v", err)
	}
}

func TestLimitsLeftZeroTakeTheirDefaultsEachOnItsOwn(t *testing.T) {
	stream := StreamID{Session: "s", Name: "x"}
	// Only the event limit given: the others are the defaults, not zero.
	limits := Limits{MaxEventBytes: 2 << 20}
	big := Message("a", strings.Repeat("x", 100_000))
	prepared, err := PrepareAppend(stream, "a", []Event{Message("a", "one"), big, Message("a", "two")}, limits)
	if err != nil {
		t.Fatalf("an append under partly given limits: %v", err)
	}
	if len(prepared.Artifacts) != 1 {
		t.Errorf("the 100 KB body was kept as %d artifacts, want 1 (the default threshold)", len(prepared.Artifacts))
	}
	if got := limits.WithDefaults(); got.MaxEventBytes != 2<<20 || got.MaxEventsPerAppend != 1000 ||
		got.MaxAppendBytes != 8<<20 || got.ArtifactThreshold != DefaultArtifactThreshold {
		t.Errorf("WithDefaults gave %+v", got)
	}
	// A negative threshold turns artifacts off.
	limits.ArtifactThreshold = -1
	if prepared, err := PrepareAppend(stream, "a", []Event{big}, limits); err != nil || len(prepared.Artifacts) != 0 {
		t.Errorf("with artifacts off: %d artifacts, %v", len(prepared.Artifacts), err)
	}
}

// TestAValueInAMessageIsWrittenAsPythonWritesIt: a value a message quotes reads as Python's
// repr of it, not as Go prints a map.
func TestAValueInAMessageIsWrittenAsPythonWritesIt(t *testing.T) {
	event := Event{"type": map[string]any{"a": []any{int64(1), 2.5}}, "agent": "a"}
	_, err := PrepareAppend(StreamID{Session: "s", Name: "x"}, "a", []Event{event}, Limits{})
	want := "event 0, field 'type': unknown event type {'a': [1, 2.5]}; the vocabulary is " +
		"message, tool_call, tool_result, mutation" // Python's message, word for word
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
