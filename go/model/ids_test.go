package model

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDeriveEventID(t *testing.T) {
	// uuid.uuid5(namespace, "conf-1\x1frun-a\x1fa1\x1f1") as Python computes it.
	if got := DeriveEventID(StreamID{"conf-1", "run-a"}, "a1", 1); got != "0a0b1f51-ca79-50c3-b50b-1929cf5a824d" {
		t.Errorf("got %s", got)
	}
	// One deriver gives every id of an append, each the same every time it is asked.
	derive := newIDDeriver(StreamID{"conf-1", "run-a"}, "a2")
	for range 2 {
		if got := derive(0); got != "ad4819aa-a936-5afc-9c17-312bd9a0f148" {
			t.Errorf("got %s", got)
		}
	}
}

// TestConformanceEventIDs replays the appends of conformance/appends.json far enough to know
// which append wrote each version, and checks the generated ids its reads list.
func TestConformanceEventIDs(t *testing.T) {
	doc := readJSON(t, filepath.Join(conformance, "appends.json")).(map[string]any)
	checked := 0
	for _, item := range doc["scenarios"].([]any) {
		scenario := item.(map[string]any)
		session := scenario["session"].(string)
		written := map[string][]string{} // stream -> the id of each version, from 1
		for _, raw := range scenario["steps"].([]any) {
			step := raw.(map[string]any)
			expect := step["expect"].(map[string]any)
			if add, ok := step["append"].(map[string]any); ok {
				if _, failed := expect["error"]; failed || expect["deduplicated"] == true {
					continue
				}
				name := add["stream"].(string)
				for index, event := range eventsOf(t, add["events"]) {
					id, given := event["event_id"].(string)
					if !given {
						id = DeriveEventID(StreamID{session, name}, add["append_id"].(string), index)
					}
					written[name] = append(written[name], id)
				}
				continue
			}
			read, ok := step["read"].(map[string]any)
			ids, listed := expect["event_ids"].([]any)
			if !ok || !listed {
				continue
			}
			versions := expect["versions"].([]any)
			for i, want := range ids {
				v, _ := versions[i].(interface{ Int64() (int64, error) }).Int64()
				got := written[read["stream"].(string)][v-1]
				if got != want {
					t.Errorf("%s: version %d has id %s, want %s", scenario["name"], v, got, want)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("appends.json lists no event ids")
	}
}

func TestNames(t *testing.T) {
	good := []string{"s", "run-1", "a/b", "é", "\U0001F600", "\ufeff", strings.Repeat("x", 200),
		strings.Repeat("é", 200)}
	for _, name := range good {
		if _, err := NewStreamID(name, name); err != nil {
			t.Errorf("%q refused: %v", name, err)
		}
	}
	bad := []string{"", "a b", "a\tb", "a\nb", "x\x00", "x\x7f", "x\u0085", "x\u00a0", "x\u2028",
		"x\u3000", "x\u1680", "x\u200a", "{s}", "a}", "bad\xff", strings.Repeat("x", 201)}
	for _, name := range bad {
		_, err := NewStreamID(name, "ok")
		if !errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrInvalidEvent) {
			t.Errorf("session %q: %v, want InvalidInput", name, err)
		}
		if _, err := NewStreamID("ok", name); err == nil || !strings.Contains(err.Error(), "stream name") {
			t.Errorf("stream %q: %v", name, err)
		}
	}
	// A long value is quoted cut, not whole.
	err := CheckName(strings.Repeat("x", 5000), "session id")
	if err == nil || len(err.Error()) > 300 {
		t.Errorf("a long name's error: %d bytes", len(err.Error()))
	}
}

func TestAppendIDs(t *testing.T) {
	for _, id := range []string{"a", "flag:c1@0000000000001-000000", strings.Repeat("é", 512), "with space\n"} {
		if err := CheckAppendID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", 513), "bad\xff"} {
		if err := CheckAppendID(id); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%q: %v", id, err)
		}
	}
	for v, ok := range map[int64]bool{AnyVersion: true, 0: true, 7: true, -2: false} {
		if err := CheckExpectedVersion(v); (err == nil) != ok {
			t.Errorf("version %d: %v", v, err)
		}
	}
}

func TestCursors(t *testing.T) {
	if c := FormatCursor(1795993625879, 1); c != "1795993625879-000001" {
		t.Errorf("FormatCursor %s", c)
	}
	if FormatCursor(0, 0) != CursorZero {
		t.Error("FormatCursor(0, 0) is not CursorZero")
	}
	ms, seq, err := ParseCursor("1795993625879-000001")
	if err != nil || ms != 1795993625879 || seq != 1 {
		t.Errorf("ParseCursor %d %d %v", ms, seq, err)
	}
	// Short forms parse too, as Python's pattern takes them.
	if ms, seq, err := ParseCursor("5-3"); err != nil || ms != 5 || seq != 3 {
		t.Errorf("ParseCursor(5-3) %d %d %v", ms, seq, err)
	}
	for _, bad := range []string{"", "-", "1-", "-1", "12345678901234-0", "1-1234567", "a-1", "1_1", "1-1-1", " 1-1", "+1-1"} {
		if _, _, err := ParseCursor(bad); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ParseCursor(%q): %v", bad, err)
		}
		if _, err := RedisCursor(bad); err == nil {
			t.Errorf("RedisCursor(%q) took it", bad)
		}
	}
	if got := LedgerCursor("1795993625879-1"); got != "1795993625879-000001" {
		t.Errorf("LedgerCursor %s", got)
	}
	if got, err := RedisCursor("0001795993625-000010"); err != nil || got != "1795993625-10" {
		t.Errorf("RedisCursor %s %v", got, err)
	}
	if got := LedgerCursor("0-0"); got != CursorZero {
		t.Errorf("LedgerCursor(0-0) %s", got)
	}
	when := CursorTime("1795993625879-000001")
	if !when.Equal(time.UnixMilli(1795993625879)) || when.Location() != time.UTC {
		t.Errorf("CursorTime %v", when)
	}
	if !CursorTime("nonsense").IsZero() {
		t.Error("CursorTime of no cursor is not the zero time")
	}
	// Cursors sort as strings in the order of their times.
	if !(FormatCursor(999, 999999) < FormatCursor(1000, 0)) {
		t.Error("cursors do not sort as strings")
	}
}

func TestDurability(t *testing.T) {
	cases := map[string]Durability{
		"local":          {0, false, time.Second},
		" replicas:2 ":   {2, false, time.Second},
		"aof":            {0, true, time.Second},
		"aof+replicas:1": {1, true, time.Second},
		"replicas:99":    {99, false, time.Second},
	}
	for text, want := range cases {
		got, err := ParseDurability(text, time.Second)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", text, got, err)
		}
		if got.String() != strings.TrimSpace(text) {
			t.Errorf("%q prints as %q", text, got)
		}
		if got.Local() != (text == "local") {
			t.Errorf("%q Local() %v", text, got.Local())
		}
	}
	for _, text := range []string{"", "remote", "replicas:0", "replicas:100", "replicas:01", "aof+replicas", "replicas:-1", "AOF", "replicas: 1"} {
		if _, err := ParseDurability(text, time.Second); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%q: %v", text, err)
		}
	}
	if _, err := ParseDurability("aof", time.Microsecond); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("a timeout under a millisecond: %v", err)
	}
	if local := Local(); !local.Local() || local.String() != "local" || local.Timeout != DefaultDurabilityTimeout {
		t.Errorf("Local is %+v", local)
	}
}

func TestQuoted(t *testing.T) {
	cases := map[string]string{
		"plain":                    "'plain'",
		"new\nline":                `"new\nline"`,
		"it's":                     `"it's"`,
		"bad\xff":                  `"bad\xff"`,
		strings.Repeat("é", 100):   "'" + strings.Repeat("é", 79) + "… (cut of 100 characters)",
		strings.Repeat("\x00", 50): `"` + strings.Repeat(`\x00`, 19) + `\x0… (cut of 50 characters)`,
	}
	for value, want := range cases {
		if got := quoted(value, 80); got != want {
			t.Errorf("quoted(%q) = %s, want %s", value, got, want)
		}
	}
}
