package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// seedEvents adds to the corpus every append of the conformance and golden files, as JSON.
func seedEvents(f *testing.F) {
	add := func(events any) {
		data, err := json.Marshal(events)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	canonical := readJSON(f, filepath.Join(conformance, "canonical.json")).(map[string]any)
	for _, v := range canonical["vectors"].([]any) {
		add(v.(map[string]any)["events"])
	}
	appends := readJSON(f, filepath.Join(conformance, "appends.json")).(map[string]any)
	for _, s := range appends["scenarios"].([]any) {
		for _, step := range s.(map[string]any)["steps"].([]any) {
			if a, ok := step.(map[string]any)["append"].(map[string]any); ok {
				add(a["events"])
			}
		}
	}
	golden := readJSON(f, filepath.Join("testdata", "golden.json")).(map[string]any)
	for _, kind := range []string{"appends", "invalid"} {
		for _, a := range golden[kind].([]any) {
			add(a.(map[string]any)["events"])
		}
	}
}

// fuzzEvents reads the fuzzer's bytes as events: a JSON array of objects, or one object.
func fuzzEvents(data []byte) ([]Event, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	if m, ok := v.(map[string]any); ok {
		return []Event{m}, true
	}
	items, ok := v.([]any)
	if !ok {
		return nil, false
	}
	events := make([]Event, 0, len(items))
	for _, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, false
		}
		events = append(events, m)
	}
	return events, true
}

// FuzzPrepareAppend holds that no JSON makes PrepareAppend panic or fail but with an
// InvalidEventError, and that what it accepts is recorded faithfully: each payload unpacks to
// the recorded fields (references in place of the fields kept apart), the digest is the same
// when the same events are prepared again, and the recorded fields, the generated ids left
// out, are the same content.
func FuzzPrepareAppend(f *testing.F) {
	seedEvents(f)
	limits := DefaultLimits()
	// Small enough that fuzzed events reach the artifact and size rules.
	limits.ArtifactThreshold, limits.MaxEventBytes, limits.MaxArtifactBytes = 256, 2048, 1024
	stream := StreamID{"s", "x"}
	f.Fuzz(func(t *testing.T, data []byte) {
		events, ok := fuzzEvents(data)
		if !ok {
			return
		}
		prepared, err := PrepareAppend(stream, "a", events, limits)
		if err != nil {
			var invalid *InvalidEventError
			if !errors.As(err, &invalid) {
				t.Fatalf("an error that is not an InvalidEventError: %v", err)
			}
			return
		}
		if len(prepared.Fields) != len(events) || len(prepared.Payloads) != len(events) ||
			len(prepared.Notes) != len(events) {
			t.Fatal("not one record per event")
		}
		again, err := PrepareAppend(stream, "a", events, limits)
		if err != nil || again.Digest != prepared.Digest {
			t.Fatalf("a second preparation differs: %v", err)
		}
		if digest := digestByTransform(t, prepared.Fields, events); digest != prepared.Digest {
			t.Fatalf("digest %s, %s by jcs.Transform", prepared.Digest, digest)
		}
		for i := range events {
			fields, err := Unpack(prepared.Payloads[i])
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if d := payloadDiffers(fields, prepared.Fields[i]); d != "" {
				t.Fatalf("event %d: the payload differs at %s", i, d)
			}
		}
		var recorded []Event
		for i, fields := range prepared.Fields {
			normal := Event{}
			for name, value := range fields {
				normal[name] = value
			}
			if _, given := events[i]["event_id"].(string); !given {
				delete(normal, "event_id")
			}
			recorded = append(recorded, normal)
		}
		limits.MaxAppendBytes = 1 << 30 // the recorded fields are as large as the events
		same, err := PrepareAppend(stream, "b", recorded, limits)
		if err != nil || same.Digest != prepared.Digest {
			t.Fatalf("the recorded fields are other content: %v", err)
		}
	})
}

// digestByTransform is the digest of an append's canonical content (the recorded fields but
// the event ids the ledger generated) taken the way it was before the canonical writer: each
// event by canonicalByTransform, the parts joined into the canonical array.
func digestByTransform(t *testing.T, recorded, given []Event) string {
	t.Helper()
	parts := make([][]byte, len(recorded))
	for i, fields := range recorded {
		content := maps.Clone(fields)
		if _, ok := given[i]["event_id"].(string); !ok {
			delete(content, "event_id")
		}
		part, err := canonicalByTransform(map[string]any(content))
		if err != nil {
			t.Fatalf("event %d: the reference refuses it: %v", i, err)
		}
		parts[i] = part
	}
	sum := sha256.Sum256(slices.Concat([]byte{'['}, bytes.Join(parts, []byte{','}), []byte{']'}))
	return hex.EncodeToString(sum[:])
}

// FuzzCanonical holds that Canonical writes byte for byte what the route it replaced makes of
// the same value (encoding/json's bytes through jcs.Transform, canonicalByTransform), that it
// is what the RFC 8785 reference makes of the same JSON, valid UTF-8, and a fixed point: the
// canonical bytes read back canonicalise to themselves.
func FuzzCanonical(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join(conformance, "jcs", "input", "*.json"))
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	canonical := readJSON(f, filepath.Join(conformance, "canonical.json")).(map[string]any)
	for _, v := range canonical["vectors"].([]any) {
		f.Add([]byte(v.(map[string]any)["canonical"].(string)))
	}
	for _, seed := range []string{`-0`, `1e21`, `[1E-7, 0.000001, 123e-2]`, `{"\u00e9":1,"e\u0301":2}`,
		`"\ud83d\ude00"`, `9007199254740991`, `[[[[[[]]]]]]`} {
		f.Add([]byte(seed))
	}
	edges := readJSON(f, filepath.Join("testdata", "canonical_edges.json")).(map[string]any)
	for _, v := range edges["vectors"].([]any) {
		f.Add([]byte(v.(map[string]any)["json"].(string)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil || dec.More() {
			return
		}
		out, err := Canonical(v)
		if err != nil {
			var invalid *InvalidEventError
			if !errors.As(err, &invalid) {
				t.Fatalf("an error that is not an InvalidEventError: %v", err)
			}
			return
		}
		plain, _ := jsonValue(v, 1)
		if replaced, err := canonicalByTransform(plain); err != nil || !bytes.Equal(replaced, out) {
			t.Fatalf("the writer and jcs.Transform differ:\n%q\n%q (%v)", out, replaced, err)
		}
		if !utf8.Valid(out) {
			t.Fatalf("not UTF-8: %q", out)
		}
		dec = json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		var back any
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("canonical bytes that are not JSON: %q: %v", out, err)
		}
		// An integral float beyond 2^53 is written as an integer literal, which reads back as
		// a float, as Artifact values are read: ReadNumbers.
		again, err := Canonical(ReadNumbers(back))
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point:\n%q\n%q (%v)", out, again, err)
		}
		// The reference agrees wherever it takes the input: valid UTF-8 without duplicate keys
		// or lone surrogates, which it refuses and encoding/json replaces.
		if utf8.Valid(data) {
			if reference, err := jcs.Transform(data); err == nil && !bytes.Equal(reference, out) {
				t.Fatalf("the reference differs:\n%q\n%q", out, reference)
			}
		}
		if reference, err := jcs.Transform(out); err != nil || !bytes.Equal(reference, out) {
			t.Fatalf("the reference changes canonical bytes:\n%q\n%q (%v)", out, reference, err)
		}
	})
}
