package model

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestEventLines holds RecordedEvent's JSON to the lines Python writes of the same events
// (testdata/golden.json, "lines"): the ledger's keys first, in their order and spelled alike,
// then the same fields with the same values, numbers spelled alike too. Python writes the
// event's own fields in the order it got them, Go in the order of their names.
func TestEventLines(t *testing.T) {
	var doc struct {
		Appends []goldenAppend `json:"appends"`
		Lines   []struct {
			Append  string `json:"append"`
			Index   int    `json:"index"`
			Version int64  `json:"version"`
			Cursor  string `json:"cursor"`
			Line    string `json:"line"`
		} `json:"lines"`
	}
	data := readFile(t, "testdata/golden.json")
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Lines) == 0 {
		t.Fatal("no lines")
	}
	payloads := map[string][]string{}
	for _, a := range doc.Appends {
		payloads[a.Name] = a.Payloads
	}
	for _, line := range doc.Lines {
		t.Run(fmt.Sprintf("%s/%d", line.Append, line.Index), func(t *testing.T) {
			payload, err := hex.DecodeString(payloads[line.Append][line.Index])
			if err != nil {
				t.Fatal(err)
			}
			fields := mustUnpack(t, payload)
			a := goldenOf(t, doc.Appends, line.Append)
			event := RecordedEvent{Stream: StreamID{a.Session, a.Stream}, Version: line.Version,
				Cursor: line.Cursor, Fields: fields}
			got := lineOf(t, event)
			want := strings.TrimSuffix(line.Line, "\n")
			// The ledger's keys, up to recorded_at, are the same bytes.
			end := strings.Index(want, `"recorded_at":`) + len(`"recorded_at":"2026-11-29T23:07:05.879Z"`)
			if !bytes.HasPrefix(got, []byte(want[:end])) {
				t.Errorf("\n got %s\nwant %s", got, want)
			}
			if d := differs(numbersAsText(t, got), numbersAsText(t, []byte(want)), "line"); d != "" {
				t.Errorf("the lines differ at %s\n got %s\nwant %s", d, got, want)
			}
			// The event's own fields follow in the order of their names.
			var keys []string
			dec := json.NewDecoder(bytes.NewReader(got))
			dec.Token()
			for dec.More() {
				key, _ := dec.Token()
				keys = append(keys, key.(string))
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					t.Fatal(err)
				}
			}
			rest := keys[8:]
			for i := 1; i < len(rest); i++ {
				if rest[i-1] > rest[i] {
					t.Errorf("fields out of order: %q", rest)
				}
			}
		})
	}
}

// lineOf is v's JSON as a line of JSONL is written: by an Encoder without HTML escapes.
func lineOf(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func goldenOf(t *testing.T, appends []goldenAppend, name string) goldenAppend {
	t.Helper()
	for _, a := range appends {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no append %q", name)
	return goldenAppend{}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := readFileErr(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// numbersAsText is a JSON text's value with numbers as their text (json.Number as string), so
// that 1 and 1.0 differ.
func numbersAsText(t *testing.T, data []byte) any {
	t.Helper()
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case json.Number:
			return "number " + string(x)
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
		}
		return v
	}
	return walk(decodeJSON(t, data))
}

func TestRecordedEventJSON(t *testing.T) {
	event := RecordedEvent{
		Stream:  StreamID{"s1", "run-a"},
		Version: 3,
		Cursor:  "1795993625879-000001",
		Fields: Event{"type": "tool_result", "agent": "a", "event_id": "e1", "tool": "t",
			"attempt_id": "c1", "status": "ok", "result": map[string]any{"z": 1.0, "a": []any{"<&>", "\u2028"}},
			"zz": ArtifactRef{SHA256: strings.Repeat("ab", 32), Size: 9, MediaType: MediaText}},
	}
	got := lineOf(t, event)
	want := `{"session":"s1","stream":"run-a","version":3,"cursor":"1795993625879-000001",` +
		`"type":"tool_result","agent":"a","event_id":"e1","recorded_at":"2026-11-29T23:07:05.879Z",` +
		`"attempt_id":"c1","result":{"a":["<&>","` + "\u2028" + `"],"z":1.0},"status":"ok","tool":"t",` +
		`"zz":{"artifact":"sha256:` + strings.Repeat("ab", 32) + `","size":9,"media_type":"text/plain; charset=utf-8"}}`
	if string(got) != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	if !event.RecordedAt().Equal(CursorTime(event.Cursor)) || event.Type() != "tool_result" ||
		event.Agent() != "a" || event.EventID() != "e1" {
		t.Error("the accessors disagree with the fields")
	}
	// A pointer marshals the same; json.Marshal adds its HTML escapes, which change the bytes
	// but not the value.
	if byPointer := lineOf(t, &event); !bytes.Equal(byPointer, got) {
		t.Error("a *RecordedEvent marshals otherwise")
	}
	escaped, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	if d := differs(numbersAsText(t, escaped), numbersAsText(t, got), "line"); d != "" {
		t.Errorf("json.Marshal's line differs at %s", d)
	}
}

func readFileErr(path string) ([]byte, error) { return os.ReadFile(path) }
