package model

import (
	"bytes"
	"time"
	"unicode/utf8"
)

// AnyVersion is the expected version that accepts whatever version the stream has.
const AnyVersion int64 = -1

// Event is one event as an append takes it and a read returns it: its fields as JSON values
// (nil, bool, string, the Go integer and float types, []any and map[string]any), "type" and
// "agent" among them. Build one with Message, ToolCall, ToolResult or Mutation, or as a map
// literal; Validate checks it as strictly as every other implementation does.
type Event map[string]any

// StreamID names one optimistic-concurrency partition of a session. Make one with NewStreamID,
// which checks both names.
type StreamID struct {
	Session string
	Name    string
}

func (s StreamID) String() string { return s.Session + "/" + s.Name }

// RecordedEvent is one committed event: its fields as appended (event_id filled in), and where
// and when it was committed.
type RecordedEvent struct {
	Stream  StreamID
	Version int64
	// Cursor orders the session's events in commit order, as strings; pass it back to reads.
	Cursor string
	Fields Event
}

// RecordedAt is the commit time the cursor carries, in UTC with millisecond precision.
func (e RecordedEvent) RecordedAt() time.Time { return CursorTime(e.Cursor) }

// Type is the event's type: message, tool_call, tool_result or mutation.
func (e RecordedEvent) Type() string { return e.str("type") }

// Agent is the agent that wrote the event.
func (e RecordedEvent) Agent() string { return e.str("agent") }

// EventID is the event's id, generated at append when the writer gave none.
func (e RecordedEvent) EventID() string { return e.str("event_id") }

func (e RecordedEvent) str(name string) string {
	text, _ := e.Fields[name].(string)
	return text
}

// AppendResult is what an append committed, or had committed before when Deduplicated.
type AppendResult struct {
	Stream       StreamID
	FirstVersion int64
	LastVersion  int64
	// Cursor is the cursor of the append's last event.
	Cursor       string
	Deduplicated bool
	// Durability is what the append waited for ("local" unless asked otherwise); Replicas how
	// many replicas confirmed it and AOF whether the primary's AOF was fsynced.
	Durability string
	Replicas   int
	AOF        bool
}

// OpenAttempt is a requested call with no terminal event yet (spec/ledger-v1.md section 7).
type OpenAttempt struct {
	Session   string
	AttemptID string
	// RunID is the run that asked for it, "" when the call named none.
	RunID  string
	Tool   string
	Stream string
	Cursor string
	// FlaggedCursor is the cursor of the reconcile.unresolved that flagged it, "" until one has.
	FlaggedCursor string
}

// recordedAtLayout is how the ledger's lines show a commit time, as the Python package writes
// it: ISO 8601 UTC with milliseconds, "2026-11-29T23:01:02.345Z".
const recordedAtLayout = "2006-01-02T15:04:05.000Z"

// lineKeys are the keys an event's line begins with, in order (spec/ledger-v1.md section 3.8).
var lineKeys = []string{"session", "stream", "version", "cursor", "type", "agent", "event_id", "recorded_at"}

// MarshalJSON writes the event as the flat JSON object of its line, as `ledger-bus read -o
// jsonl` writes it: session, stream, version, cursor, type, agent, event_id and recorded_at
// first, then the event's other fields in the order of their names. A reference to an
// artifact shows as ArtifactRef.MarshalJSON has it. Strings carry only the escapes JSON
// requires, as the Python package writes them; json.Marshal adds its HTML escapes to what a
// MarshalJSON returns, so write lines with a json.Encoder whose SetEscapeHTML is false.
func (e RecordedEvent) MarshalJSON() ([]byte, error) {
	ledger := map[string]any{
		"session":     e.Stream.Session,
		"stream":      e.Stream.Name,
		"version":     e.Version,
		"cursor":      e.Cursor,
		"type":        e.Fields["type"],
		"agent":       e.Fields["agent"],
		"event_id":    e.Fields["event_id"],
		"recorded_at": e.RecordedAt().Format(recordedAtLayout),
	}
	buf := []byte{'{'}
	write := func(key string, value any) error {
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(appendString(buf, key), ':')
		var err error
		buf, err = appendJSON(buf, value)
		return err
	}
	for _, key := range lineKeys {
		if err := write(key, ledger[key]); err != nil {
			return nil, err
		}
	}
	for _, key := range sortedKeys(e.Fields) {
		if _, ok := ledger[key]; ok {
			continue
		}
		if err := write(key, e.Fields[key]); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// appendJSON appends the JSON of a value of an event's fields as the Python package writes
// it: strings with only the escapes JSON requires, and a float that happens to be integral
// with a fraction ("100.0"), so that reading the line back gives a float again.
func appendJSON(buf []byte, value any) ([]byte, error) {
	switch v := value.(type) {
	case string:
		return appendString(buf, v), nil
	case float64:
		text, err := marshalNoEscape(v)
		if err != nil {
			return nil, err
		}
		buf = append(buf, text...)
		if !bytes.ContainsAny(text, ".eE") {
			buf = append(buf, ".0"...)
		}
		return buf, nil
	case []any:
		buf = append(buf, '[')
		for i, item := range v {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = appendJSON(buf, item); err != nil {
				return nil, err
			}
		}
		return append(buf, ']'), nil
	case Event:
		return appendJSON(buf, map[string]any(v))
	case map[string]any:
		buf = append(buf, '{')
		for i, key := range sortedKeys(v) {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(appendString(buf, key), ':')
			var err error
			if buf, err = appendJSON(buf, v[key]); err != nil {
				return nil, err
			}
		}
		return append(buf, '}'), nil
	}
	text, err := marshalNoEscape(value)
	if err != nil {
		return nil, err
	}
	return append(buf, text...), nil
}

// appendString appends s as a JSON string with the escapes JSON requires and no others: `"`,
// `\` and the C0 controls (\b, \t, \n, \f, \r, else \u00XX), the rest as UTF-8, as RFC 8785
// and the Python package write strings. Each byte that is not UTF-8 becomes U+FFFD, as
// encoding/json has it. The runs between escapes are copied whole.
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				buf = utf8.AppendRune(append(buf, s[start:i]...), utf8.RuneError)
				start = i + 1
			}
			i += size
			continue
		}
		if plainASCII[c] {
			i++
			continue
		}
		buf = appendEscape(append(buf, s[start:i]...), c)
		i++
		start = i
	}
	return append(append(buf, s[start:]...), '"')
}

// plainASCII says which ASCII bytes a JSON string holds as they are: all but `"`, `\` and the
// C0 controls.
var plainASCII = func() (plain [utf8.RuneSelf]bool) {
	for c := range plain {
		plain[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return plain
}()

// appendEscape appends the escape of an ASCII byte JSON does not take as it is.
func appendEscape(buf []byte, c byte) []byte {
	const hexDigits = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(buf, '\\', c)
	case '\b':
		return append(buf, '\\', 'b')
	case '\t':
		return append(buf, '\\', 't')
	case '\n':
		return append(buf, '\\', 'n')
	case '\f':
		return append(buf, '\\', 'f')
	case '\r':
		return append(buf, '\\', 'r')
	}
	return append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}
