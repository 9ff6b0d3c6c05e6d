package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// The golden vectors of testdata/golden.json were made by the repository's Python package:
//
//	cd /work/main && make install   # once: the package in .venv
//	.venv/bin/python go/model/testdata/golden.py generate
//
// They hold appends as Python prepares them (digest, event ids, attempt notes, artifacts and
// the msgpack payloads) and invalid appends with the index, field and reason Python names.
// The Go payloads of the same appends are kept in testdata/go_payloads.json, written by
//
//	go test ./model/ -run TestGoPayloads -update
//
// and checked by Python with
//
//	.venv/bin/python go/model/testdata/golden.py verify go/model/testdata/go_payloads.json
//
// which TestPythonDecodesGoPayloads runs whenever that Python is there.

var update = flag.Bool("update", false, "write testdata/go_payloads.json from the Go payloads")

type goldenAppend struct {
	Name      string         `json:"name"`
	Session   string         `json:"session"`
	Stream    string         `json:"stream"`
	AppendID  string         `json:"append_id"`
	Limits    map[string]any `json:"limits"`
	Events    any            `json:"events"`
	Digest    string         `json:"digest"`
	EventIDs  []string       `json:"event_ids"`
	Notes     []string       `json:"notes"`
	Artifacts []struct {
		SHA256    string `json:"sha256"`
		Size      int64  `json:"size"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"artifacts"`
	Uses     [][2]any `json:"uses"`
	Payloads []string `json:"payloads"`
}

type goldenInvalid struct {
	Name   string         `json:"name"`
	Limits map[string]any `json:"limits"`
	Events any            `json:"events"`
	Index  *int           `json:"index"`
	Field  *string        `json:"field"`
	Reason string         `json:"reason"`
}

type golden struct {
	Appends []goldenAppend  `json:"appends"`
	Invalid []goldenInvalid `json:"invalid"`
}

func readGolden(t testing.TB) golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var g golden
	if err := dec.Decode(&g); err != nil {
		t.Fatal(err)
	}
	if len(g.Appends) == 0 || len(g.Invalid) == 0 {
		t.Fatal("golden.json holds no vectors")
	}
	return g
}

// limitsOf is DefaultLimits with the Python names in given overriding it; a null threshold
// turns artifacts off, as None does in Python.
func limitsOf(t *testing.T, given map[string]any) Limits {
	t.Helper()
	limits := DefaultLimits()
	fields := map[string]*int{
		"max_event_bytes":       &limits.MaxEventBytes,
		"max_events_per_append": &limits.MaxEventsPerAppend,
		"max_append_bytes":      &limits.MaxAppendBytes,
		"artifact_threshold":    &limits.ArtifactThreshold,
		"max_artifact_bytes":    &limits.MaxArtifactBytes,
	}
	for name, value := range given {
		field, ok := fields[name]
		if !ok {
			t.Fatalf("unknown limit %s", name)
		}
		if value == nil {
			*field = -1
			continue
		}
		n, err := value.(json.Number).Int64()
		if err != nil {
			t.Fatal(err)
		}
		*field = int(n)
	}
	return limits
}

func prepareGolden(t *testing.T, a goldenAppend) PreparedAppend {
	t.Helper()
	stream, err := NewStreamID(a.Session, a.Stream)
	if err != nil {
		t.Fatal(err)
	}
	prepared, err := PrepareAppend(stream, a.AppendID, eventsOf(t, a.Events), limitsOf(t, a.Limits))
	if err != nil {
		t.Fatal(err)
	}
	return prepared
}

func TestGoldenAppends(t *testing.T) {
	for _, a := range readGolden(t).Appends {
		t.Run(a.Name, func(t *testing.T) {
			prepared := prepareGolden(t, a)
			if prepared.Digest != a.Digest {
				t.Errorf("digest %s, Python's %s", prepared.Digest, a.Digest)
			}
			for i, fields := range prepared.Fields {
				if fields["event_id"] != a.EventIDs[i] {
					t.Errorf("event %d id %v, Python's %s", i, fields["event_id"], a.EventIDs[i])
				}
			}
			if !reflect.DeepEqual(prepared.Notes, a.Notes) {
				t.Errorf("notes %q, Python's %q", prepared.Notes, a.Notes)
			}
			if len(prepared.Artifacts) != len(a.Artifacts) {
				t.Fatalf("%d artifacts, Python's %d", len(prepared.Artifacts), len(a.Artifacts))
			}
			for i, want := range a.Artifacts {
				got := prepared.Artifacts[i]
				if got.SHA256 != want.SHA256 || int64(len(got.Data)) != want.Size ||
					got.MediaType != want.MediaType || string(got.Data) != want.Data {
					t.Errorf("artifact %d: %s %d %s, Python's %s %d %s", i, got.SHA256,
						len(got.Data), got.MediaType, want.SHA256, want.Size, want.MediaType)
				}
			}
			var uses [][2]any
			for _, use := range prepared.Uses {
				uses = append(uses, [2]any{use.SHA256, json.Number(fmt.Sprint(use.Count))})
			}
			if len(uses)+len(a.Uses) > 0 && !reflect.DeepEqual(uses, a.Uses) {
				t.Errorf("uses %v, Python's %v", uses, a.Uses)
			}
			for i, hexed := range a.Payloads {
				theirs, err := hex.DecodeString(hexed)
				if err != nil {
					t.Fatal(err)
				}
				fromPython, err := Unpack(theirs)
				if err != nil {
					t.Fatalf("event %d: Python's payload: %v", i, err)
				}
				fromGo, err := Unpack(prepared.Payloads[i])
				if err != nil {
					t.Fatalf("event %d: Go's payload: %v", i, err)
				}
				if where := differs(fromGo, fromPython, "fields"); where != "" {
					t.Errorf("event %d: Go's payload and Python's differ at %s", i, where)
				}
				if where := payloadDiffers(fromGo, prepared.Fields[i]); where != "" {
					t.Errorf("event %d: the payload and the recorded fields differ at %s", i, where)
				}
			}
		})
	}
}

// payloadDiffers is where an event's unpacked payload differs from its recorded fields, or
// "": each field alike, but those kept apart, which must be references to their artifacts.
func payloadDiffers(payload, fields Event) string {
	if len(payload) != len(fields) {
		return fmt.Sprintf("%d fields against %d", len(payload), len(fields))
	}
	for name, value := range payload {
		recorded, ok := fields[name]
		if !ok {
			return name + " (not recorded)"
		}
		ref, isRef := value.(ArtifactRef)
		if !isRef {
			if d := differs(value, recorded, name); d != "" {
				return d
			}
			continue
		}
		data, media := []byte(nil), MediaJSON
		if s, ok := recorded.(string); ok {
			data, media = []byte(s), MediaText
		} else if c, err := canonicalPlain(recorded); err == nil {
			data = c
		}
		sum := sha256.Sum256(data)
		if ref != (ArtifactRef{hex.EncodeToString(sum[:]), int64(len(data)), media}) {
			return fmt.Sprintf("%s (%+v is not the reference of its value)", name, ref)
		}
	}
	return ""
}

// differs is where a and b differ, types and the sign of zero included, or "".
func differs(a, b any, where string) string {
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return fmt.Sprintf("%s (%T %v against %T %v)", where, a, a, b, b)
	}
	switch x := a.(type) {
	case Event:
		return differs(map[string]any(x), map[string]any(b.(Event)), where)
	case map[string]any:
		y := b.(map[string]any)
		if len(x) != len(y) {
			return fmt.Sprintf("%s (%d keys against %d)", where, len(x), len(y))
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, ok := y[k]
			if !ok {
				return fmt.Sprintf("%s.%s (missing)", where, k)
			}
			if d := differs(x[k], v, where+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		y := b.([]any)
		if len(x) != len(y) {
			return fmt.Sprintf("%s (%d items against %d)", where, len(x), len(y))
		}
		for i := range x {
			if d := differs(x[i], y[i], fmt.Sprintf("%s[%d]", where, i)); d != "" {
				return d
			}
		}
		return ""
	case float64:
		if math.Float64bits(x) != math.Float64bits(b.(float64)) {
			return fmt.Sprintf("%s (%v against %v)", where, x, b)
		}
		return ""
	}
	if a != b {
		return fmt.Sprintf("%s (%v against %v)", where, a, b)
	}
	return ""
}

func TestGoldenInvalid(t *testing.T) {
	for _, c := range readGolden(t).Invalid {
		t.Run(c.Name, func(t *testing.T) {
			_, err := PrepareAppend(StreamID{"s", "x"}, "a", eventsOf(t, c.Events), limitsOf(t, c.Limits))
			var invalid *InvalidEventError
			if !errors.As(err, &invalid) {
				t.Fatalf("error %v, want an InvalidEventError", err)
			}
			index, field := -1, ""
			if c.Index != nil {
				index = *c.Index
			}
			if c.Field != nil {
				field = *c.Field
			}
			if invalid.Index != index || invalid.Field != field || invalid.Reason != c.Reason {
				t.Errorf("got %d %q %q\nPython %d %q %q", invalid.Index, invalid.Field,
					invalid.Reason, index, field, c.Reason)
			}
		})
	}
}

// goPayloads is the Go payloads of the golden appends, by name, in hex.
func goPayloads(t *testing.T) map[string][]string {
	out := map[string][]string{}
	for _, a := range readGolden(t).Appends {
		for _, payload := range prepareGolden(t, a).Payloads {
			out[a.Name] = append(out[a.Name], hex.EncodeToString(payload))
		}
	}
	return out
}

// TestGoPayloads holds the Go payloads to the bytes Python was shown to decode
// (testdata/go_payloads.json): a change to the encoding is made on purpose, with -update, and
// checked by Python again.
func TestGoPayloads(t *testing.T) {
	path := filepath.Join("testdata", "go_payloads.json")
	payloads := goPayloads(t)
	if *update {
		data, err := json.MarshalIndent(payloads, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept map[string][]string
	if err := json.Unmarshal(data, &kept); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(kept, payloads) {
		t.Errorf("the Go payloads are not those of %s; run with -update and have Python verify "+
			"them (see the top of this file)", path)
	}
}

// python is the repository's Python with the package installed, or "".
func python() string {
	if path := os.Getenv("LEDGER_BUS_PYTHON"); path != "" {
		return path
	}
	path, err := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "python"))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

func TestPythonDecodesGoPayloads(t *testing.T) {
	py := python()
	if py == "" {
		t.Skip("no Python with the package (make install, or LEDGER_BUS_PYTHON)")
	}
	if testing.Short() {
		t.Skip("starts Python")
	}
	data, err := json.Marshal(goPayloads(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "golden.py"), "verify", "-")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Python refused the Go payloads: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
