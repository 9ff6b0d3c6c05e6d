package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/gowebpki/jcs"
)

// conformance is the repository's conformance directory, which every implementation replays.
const conformance = "../../conformance"

// readJSON reads a JSON file as Python's json module would: numbers as json.Number, which
// the model reads as integers or floats by their spelling.
func readJSON(t testing.TB, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeJSON(t, data)
}

func decodeJSON(t testing.TB, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// eventsOf is a JSON array of event objects as []Event.
func eventsOf(t testing.TB, v any) []Event {
	t.Helper()
	items, ok := v.([]any)
	if !ok {
		t.Fatalf("events are a %T", v)
	}
	events := make([]Event, len(items))
	for i, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			t.Fatalf("event %d is a %T", i, item)
		}
		events[i] = m
	}
	return events
}

func TestConformanceCanonical(t *testing.T) {
	doc := readJSON(t, filepath.Join(conformance, "canonical.json")).(map[string]any)
	vectors := doc["vectors"].([]any)
	if len(vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, item := range vectors {
		vector := item.(map[string]any)
		t.Run(vector["name"].(string), func(t *testing.T) {
			events := eventsOf(t, vector["events"])
			prepared, err := PrepareAppend(StreamID{"s", "x"}, "a", events, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if prepared.Digest != vector["sha256"] {
				t.Errorf("digest %s, want %s", prepared.Digest, vector["sha256"])
			}
			sum := sha256.Sum256([]byte(vector["canonical"].(string)))
			if hex.EncodeToString(sum[:]) != vector["sha256"] {
				t.Errorf("the vector's own canonical text does not have its digest")
			}
			want := vector["canonical_events"].([]any)
			var parts []string
			for i, fields := range prepared.Fields {
				// The recorded fields hold the generated event_id, which the canonical
				// content does not.
				normal := Event{}
				for name, value := range fields {
					normal[name] = value
				}
				if given, ok := events[i]["event_id"]; !ok || given == nil {
					delete(normal, "event_id")
				}
				got, err := Canonical(normal)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want[i] {
					t.Errorf("event %d canonical\n got %s\nwant %s", i, got, want[i])
				}
				parts = append(parts, string(got))
			}
			whole := "[" + strings.Join(parts, ",") + "]"
			if whole != vector["canonical"] {
				t.Errorf("canonical\n got %s\nwant %s", whole, vector["canonical"])
			}
		})
	}
}

// canonicalByTransform is the route the canonical writer replaced, kept as its reference:
// encoding/json's bytes of a plain value (jsonValue's), brought to RFC 8785 form by the
// reference implementation's jcs.Transform, which parses them again.
func canonicalByTransform(plain any) ([]byte, error) {
	text, err := marshalNoEscape(plain)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(text)
}

// checkAgainstTransform fails unless the writer's bytes of v are the reference route's.
func checkAgainstTransform(t testing.TB, v any, got []byte) {
	t.Helper()
	plain, f := jsonValue(v, 1)
	if f != nil {
		t.Fatalf("not a JSON value: %s", f.reason)
	}
	want, err := canonicalByTransform(plain)
	if err != nil {
		t.Fatalf("the reference refuses it: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the writer and jcs.Transform differ:\n writer    %q\n reference %q", got, want)
	}
}

// TestCanonicalEdges holds the writer, and the reference route, to the edge cases of
// testdata/canonical_edges.json: key order by UTF-16 code units, -0, 1e21, 5e-324, exponents,
// escapes, lone surrogates.
func TestCanonicalEdges(t *testing.T) {
	doc := readJSON(t, filepath.Join("testdata", "canonical_edges.json")).(map[string]any)
	for _, item := range doc["vectors"].([]any) {
		vector := item.(map[string]any)
		t.Run(vector["name"].(string), func(t *testing.T) {
			value := decodeJSON(t, []byte(vector["json"].(string)))
			got, err := Canonical(value)
			if err != nil {
				t.Fatal(err)
			}
			if want := vector["canonical"].(string); string(got) != want {
				t.Errorf("\n got %q\nwant %q", got, want)
			}
			checkAgainstTransform(t, value, got)
		})
	}
}

// TestKeyOrderIsUTF16 compares compareUTF16 with the order of the keys' UTF-16 code units,
// over keys from every range whose order differs between UTF-8 and UTF-16, and their
// neighbours.
func TestKeyOrderIsUTF16(t *testing.T) {
	chars := []string{"", "\x00", "a", "z", "\u007f", "\u0080", "\u00e9", "\u07ff", "\u0800",
		"\ud7ff", "\ue000", "\uefff", "\uf000", "\ufb33", "\ufffd", "\uffff", "\U00010000",
		"\U0001f600", "\U0010ffff"}
	var keys []string
	for _, a := range chars {
		for _, b := range chars {
			keys = append(keys, a+b, "k"+a+"x"+b)
		}
	}
	units := func(s string) []uint16 { return utf16.Encode([]rune(s)) }
	for _, a := range keys {
		for _, b := range keys {
			got, want := compareUTF16(a, b), slices.Compare(units(a), units(b))
			if (got < 0) != (want < 0) || (got == 0) != (want == 0) {
				t.Fatalf("compareUTF16(%q, %q) = %d, UTF-16 order says %d", a, b, got, want)
			}
		}
	}
}

func TestJCSVectors(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(conformance, "jcs", "input", "*.json"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	for _, name := range names {
		t.Run(filepath.Base(name), func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(conformance, "jcs", "output", filepath.Base(name)))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Canonical(readJSON(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("\n got %s\nwant %s", got, want)
			}
			checkAgainstTransform(t, readJSON(t, name), got)
		})
	}
}

func TestCanonicalGoValues(t *testing.T) {
	type label string
	type count uint16
	cases := []struct {
		name  string
		value any
		want  string
	}{
		{"nil", nil, `null`},
		{"every integer kind", []any{int8(-8), int16(16), int32(-32), int64(64), uint(1), uint8(8),
			uint16(16), uint32(32), uint64(MaxSafeInteger), -MaxSafeInteger}, `[-8,16,-32,64,1,8,16,32,9007199254740991,-9007199254740991]`},
		{"floats in ECMAScript form", []any{0.1, 1e21, 1e-7, math.Copysign(0, -1), 100.0, float32(0.5)},
			`[0.1,1e+21,1e-7,0,100,0.5]`},
		{"json.Number by its spelling", []any{json.Number("7"), json.Number("7.0"), json.Number("1E2")}, `[7,7,100]`},
		{"json.RawMessage", json.RawMessage(` {"b": [1, 2.5], "a": null} `), `{"a":null,"b":[1,2.5]}`},
		{"named kinds", map[label]any{"k": count(3), "l": label("x")}, `{"k":3,"l":"x"}`},
		{"common slices and maps", map[string]any{"s": []string{"a"}, "m": []map[string]any{{"x": true}},
			"e": Event{"z": 1}, "i": []int{1, 2}, "ms": map[string]string{"q": "r"}},
			`{"e":{"z":1},"i":[1,2],"m":[{"x":true}],"ms":{"q":"r"},"s":["a"]}`},
		{"nil slices and maps are empty", map[string]any{"s": []string(nil), "m": map[string]any(nil)},
			`{"m":{},"s":[]}`},
		{"arrays", [2]bool{true, false}, `[true,false]`},
		{"no HTML escapes", "<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{"line separators as they are", "a\u2028b\u2029c", "\"a\u2028b\u2029c\""},
		{"control characters escaped", "\x00\x1f\b\f\n\r\t\x7f", `"\u0000\u001f\b\f\n\r\t` + "\x7f" + `"`},
		{"keys by UTF-16 code units", map[string]any{"\U0001F600": 1, "\uFB33": 2, "z": 3},
			"{\"z\":3,\"\U0001F600\":1,\"\uFB33\":2}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonical(c.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("\n got %s\nwant %s", got, c.want)
			}
			checkAgainstTransform(t, c.value, got)
		})
	}
}

func TestCanonicalRefusals(t *testing.T) {
	type point struct{ X int }
	deep := any(1)
	for range 10_000 {
		deep = []any{deep}
	}
	cases := []struct {
		name  string
		value any
		field string
		text  string
	}{
		{"a struct", map[string]any{"p": point{1}}, "p", "model.point is not a JSON value"},
		{"a pointer", map[string]any{"p": new(int)}, "p", "*int is not a JSON value"},
		{"a channel", []any{make(chan int)}, "[0]", "chan int is not a JSON value"},
		{"a func", map[string]any{"f": func() {}}, "f", "func() is not a JSON value"},
		{"bytes", map[string]any{"b": []byte("x")}, "b", "[]uint8 is not a JSON value"},
		{"NaN", map[string]any{"x": []any{1, math.NaN()}}, "x[1]", "nan is not a JSON number"},
		{"Inf", map[string]any{"x": math.Inf(1)}, "x", "inf is not a JSON number"},
		{"-Inf", map[string]any{"x": math.Inf(-1)}, "x", "-inf is not a JSON number"},
		{"2^53", map[string]any{"n": int64(1 << 53)}, "n", "integer outside"},
		{"-2^53", map[string]any{"n": -(1 << 53)}, "n", "integer outside"},
		{"a uint64 too big", map[string]any{"n": uint64(math.MaxUint64)}, "n", "integer outside"},
		{"a big json.Number", map[string]any{"n": json.Number("123456789012345678901234567890")}, "n", "integer outside"},
		{"a json.Number that is none", map[string]any{"n": json.Number("x1")}, "n", "is not a JSON number"},
		{"a float json.Number too big", map[string]any{"n": json.Number("1e999")}, "n", "is not a JSON number"},
		{"invalid UTF-8", map[string]any{"a": map[string]any{"s": "bad \xff"}}, "a.s", "not valid UTF-8"},
		{"an invalid UTF-8 key", map[string]any{"a": map[string]any{"\xfe": 1}}, "a", "not valid UTF-8"},
		{"a key that is not a string", map[string]any{"m": map[int]any{1: "x"}}, "m", "object key 1 is not a string"},
		{"an ArtifactRef", map[string]any{"r": ArtifactRef{}}, "r", "ArtifactRef is not a JSON value"},
		{"a bad RawMessage", map[string]any{"r": json.RawMessage(`{`)}, "r", "not JSON"},
		{"deep nesting", map[string]any{"a": deep}, "a" + strings.Repeat("[0]", 5) + "...(120 more)...[0][0]",
			"nested more than 128 levels deep"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Canonical(c.value)
			var invalid *InvalidEventError
			if !errors.As(err, &invalid) {
				t.Fatalf("error %v, want an InvalidEventError", err)
			}
			if !errors.Is(err, ErrInvalidEvent) || !errors.Is(err, ErrInvalidInput) {
				t.Errorf("error %v is not of kind InvalidEvent", err)
			}
			if invalid.Field != c.field {
				t.Errorf("field %q, want %q", invalid.Field, c.field)
			}
			if !strings.Contains(invalid.Reason, c.text) {
				t.Errorf("reason %q, want it to say %q", invalid.Reason, c.text)
			}
		})
	}
}

func TestDepthLimit(t *testing.T) {
	// The event object is level 1: a value of 126 nested arrays in a field stands at levels 2
	// to 127, and one more level is still allowed; two more are not.
	nest := func(levels int) any {
		v := any(1)
		for range levels {
			v = []any{v}
		}
		return v
	}
	event := func(v any) []Event { return []Event{{"type": "mutation", "agent": "a", "kind": "k", "v": v}} }
	if _, err := PrepareAppend(StreamID{"s", "x"}, "a", event(nest(127)), DefaultLimits()); err != nil {
		t.Fatalf("127 levels in a field: %v", err)
	}
	_, err := PrepareAppend(StreamID{"s", "x"}, "a", event(nest(128)), DefaultLimits())
	var invalid *InvalidEventError
	if !errors.As(err, &invalid) || !strings.Contains(invalid.Reason, "nested more than 128") {
		t.Fatalf("128 levels in a field: %v", err)
	}
}
