package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// vectorsFile is where the vectors are, from the repository's root.
const vectorsFile = "conformance/appends.json"

// vectors is conformance/appends.json: sequences of appends and reads on one session, with the
// outcome each must have.
type vectors struct {
	Version   int        `json:"version"`
	About     string     `json:"about"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	Name    string `json:"name"`
	Session string `json:"session"`
	Steps   []step `json:"steps"`
}

type step struct {
	Append *struct {
		Stream   string        `json:"stream"`
		Expected any           `json:"expected_version"` // an integer, or "any"
		AppendID string        `json:"append_id"`
		Events   []model.Event `json:"events"`
	} `json:"append"`
	Read *struct {
		Stream string `json:"stream"`
		After  int64  `json:"after_version"`
	} `json:"read"`
	Scan *struct {
		After *string `json:"after"` // null: from the start
	} `json:"scan"`
	Expect map[string]any `json:"expect"`
}

// What an expectation may say; any other key fails the replay, so no vector is passed unread.
var expectKeys = map[string]bool{
	"first_version": true, "last_version": true, "deduplicated": true,
	"error": true, "expected": true, "actual": true, "index": true, "field": true,
	"versions": true, "bodies": true, "event_ids": true, "streams": true,
}

// findVectors walks up from dir to the directory holding conformance/, and returns the
// vectors' path there.
func findVectors(dir string) (string, error) {
	for start := dir; ; {
		path := filepath.Join(dir, filepath.FromSlash(vectorsFile))
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s in %s or above it", vectorsFile, start)
		}
		dir = parent
	}
}

// loadVectors reads the vectors, numbers as the Go values an append takes: integers as int64.
func loadVectors(t testing.TB) vectors {
	t.Helper()
	dir, err := os.Getwd()
	must(t, err, "the working directory")
	path, err := findVectors(dir)
	must(t, err, "finding the vectors")
	data, err := os.ReadFile(path)
	must(t, err, "reading the vectors")
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	decoder.DisallowUnknownFields()
	var found vectors
	must(t, decoder.Decode(&found), "decoding the vectors")
	if found.Version != 1 {
		t.Fatalf("vectors of version %d, want 1", found.Version)
	}
	if len(found.Scenarios) == 0 {
		t.Fatalf("no scenarios in the vectors")
	}
	for _, sc := range found.Scenarios {
		for i := range sc.Steps {
			st := &sc.Steps[i]
			if st.Append != nil {
				for _, event := range st.Append.Events {
					model.ReadNumbers(event) // in place
				}
				st.Append.Expected = model.ReadNumbers(st.Append.Expected)
			}
			st.Expect = model.ReadNumbers(st.Expect).(map[string]any)
		}
	}
	return found
}

// origin is where an event came from: what its generated id is derived from, or its own.
type origin struct {
	appendID string
	index    int
	given    string
}

// runVectors replays every scenario of the vectors on s, each on a session of its own: the
// vector's session id with a suffix. A generated event id is derived from the session id, so
// the store's ids are checked against the ids derived for that session, and the vector's own
// against those derived for the vector's session: together, the store derives what the
// vectors say.
func runVectors(t *testing.T, s store.Log) {
	for _, sc := range loadVectors(t).Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			session := newSession(t, sc.Session)
			origins := map[model.StreamID]map[int64]origin{}
			for n, st := range sc.Steps {
				at := fmt.Sprintf("step %d", n)
				for key := range st.Expect {
					if !expectKeys[key] {
						t.Fatalf("%s: an expectation this suite does not know: %q", at, key)
					}
				}
				switch {
				case st.Append != nil:
					replayAppend(t, s, at, session, st, origins)
				case st.Read != nil:
					ref := streamOf(t, session, st.Read.Stream)
					events := readStream(t, s, ref, store.ReadStreamOptions{After: st.Read.After})
					if want, ok := st.Expect["versions"]; ok {
						equal(t, anys(versions(events)), want, at+": versions")
					}
					checkEvents(t, at, sc.Session, events, st.Expect, origins)
				case st.Scan != nil:
					after := ""
					if st.Scan.After != nil {
						after = *st.Scan.After
					}
					events, err := s.ScanSession(ctx(t), session, store.ScanOptions{After: after})
					must(t, err, at+": ScanSession")
					checkEvents(t, at, sc.Session, events, st.Expect, origins)
				default:
					t.Fatalf("%s: a step that is no append, read or scan", at)
				}
			}
		})
	}
}

func replayAppend(t *testing.T, s store.Log, at, session string, st step, origins map[model.StreamID]map[int64]origin) {
	t.Helper()
	spec := st.Append
	ref := streamOf(t, session, spec.Stream)
	expected := model.AnyVersion
	switch v := spec.Expected.(type) {
	case int64:
		expected = v
	case string:
		if v != "any" {
			t.Fatalf("%s: expected_version %q", at, v)
		}
	default:
		t.Fatalf("%s: expected_version %v (%T)", at, v, v)
	}
	r, err := s.Append(ctx(t), ref, expected, spec.AppendID, spec.Events)

	if kind, ok := st.Expect["error"]; ok {
		if err == nil {
			t.Fatalf("%s: no error, want %v", at, kind)
		}
		equal(t, model.Name(err), kind, at+": the error's kind")
		var conflict *model.VersionConflictError
		var invalid *model.InvalidEventError
		for _, name := range []string{"expected", "actual", "index", "field"} {
			want, ok := st.Expect[name]
			if !ok {
				continue
			}
			var got any
			switch {
			case (name == "expected" || name == "actual") && errors.As(err, &conflict):
				got = map[string]int64{"expected": conflict.Expected, "actual": conflict.Actual}[name]
			case name == "index" && errors.As(err, &invalid):
				got = int64(invalid.Index)
			case name == "field" && errors.As(err, &invalid):
				got = invalid.Field
			default:
				t.Fatalf("%s: error %v (%T) says nothing of its %s", at, err, err, name)
			}
			equal(t, got, want, at+": the error's "+name)
		}
		return
	}
	must(t, err, at+": Append")
	equal(t, []any{r.FirstVersion, r.LastVersion, r.Deduplicated},
		[]any{st.Expect["first_version"], st.Expect["last_version"], st.Expect["deduplicated"]}, at+": the result")
	if r.Deduplicated {
		return
	}
	if origins[ref] == nil {
		origins[ref] = map[int64]origin{}
	}
	for i, event := range spec.Events {
		given, _ := event["event_id"].(string)
		origins[ref][r.FirstVersion+int64(i)] = origin{appendID: spec.AppendID, index: i, given: given}
	}
}

// checkEvents checks the events a read or scan returned against what the step expects of them.
func checkEvents(t *testing.T, at, vectorSession string, events []model.RecordedEvent, expect map[string]any, origins map[model.StreamID]map[int64]origin) {
	t.Helper()
	if want, ok := expect["bodies"]; ok {
		equal(t, bodies(events), want, at+": bodies")
	}
	if want, ok := expect["streams"]; ok {
		names := make([]any, len(events))
		for i, e := range events {
			names[i] = e.Stream.Name
		}
		equal(t, names, want, at+": streams")
	}
	want, ok := expect["event_ids"].([]any)
	if !ok {
		if _, given := expect["event_ids"]; given {
			t.Fatalf("%s: event_ids is no list", at)
		}
		return
	}
	if len(want) != len(events) {
		t.Fatalf("%s: %d events, %d event ids expected", at, len(events), len(want))
	}
	for i, e := range events {
		from, ok := origins[e.Stream][e.Version]
		if !ok {
			t.Fatalf("%s: event %s@%d was appended by no step", at, e.Stream, e.Version)
		}
		mine, theirs := from.given, from.given
		if from.given == "" {
			mine = model.DeriveEventID(e.Stream, from.appendID, from.index)
			theirs = model.DeriveEventID(model.StreamID{Session: vectorSession, Name: e.Stream.Name}, from.appendID, from.index)
		}
		equal(t, e.EventID(), mine, fmt.Sprintf("%s: the store's id of event %d", at, i))
		equal(t, want[i], theirs, fmt.Sprintf("%s: the vector's id of event %d, derived", at, i))
	}
}

func anys(values []int64) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = v
	}
	return out
}
