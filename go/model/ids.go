package model

import (
	"crypto/sha1"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// CursorZero is the cursor before every event: a read from it starts at the beginning.
const CursorZero = "0000000000000-000000"

// EventIDNamespace is the uuid5 namespace of the event ids the ledger generates
// (spec/ledger-v1.md section 2.3).
const EventIDNamespace = "5c1b6a0e-4f3a-5d8e-9b2c-7a6e0d1f2b3c"

var eventIDNamespace = uuid.MustParse(EventIDNamespace)

// NewStreamID returns the stream of a session, both names checked with CheckName.
func NewStreamID(session, name string) (StreamID, error) {
	if err := CheckName(session, "session id"); err != nil {
		return StreamID{}, err
	}
	if err := CheckName(name, "stream name"); err != nil {
		return StreamID{}, err
	}
	return StreamID{Session: session, Name: name}, nil
}

// CheckName returns an InvalidInput error unless value can be a session id or a stream name:
// 1 to 200 characters, none of them whitespace, a control character or a brace. Both become
// parts of Redis keys, where a brace would move the hash tag (and so the slot), and of
// one-line output, which whitespace and control characters would break. what names the value
// in the message ("session id").
func CheckName(value, what string) error {
	if !isNameText(value) {
		return Errorf(ErrInvalidInput, "%s must be 1-200 characters with no whitespace, control "+
			"characters or braces; got %s", what, quoted(value, 80))
	}
	return nil
}

func isNameText(value string) bool {
	if value == "" || !utf8.ValidString(value) {
		return false
	}
	count := 0
	for _, r := range value {
		count++
		if count > 200 || !nameRune(r) {
			return false
		}
	}
	return true
}

// nameRune reports whether r may stand in a name: not whitespace as Python's \s has it (which,
// unlike Go's unicode.IsSpace, leaves out U+FEFF and includes the C0 separators), not a
// control character (C0, DEL, C1), not a brace.
func nameRune(r rune) bool {
	switch {
	case r <= 0x20, r >= 0x7f && r <= 0xa0:
		return false
	case r == '{', r == '}':
		return false
	case r == 0x1680, r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029, r == 0x202f,
		r == 0x205f, r == 0x3000:
		return false
	}
	return true
}

// CheckAppendID returns an InvalidInput error unless id is a usable append_id: 1 to 512
// characters of valid UTF-8.
func CheckAppendID(id string) error {
	if id == "" || !utf8.ValidString(id) || utf8.RuneCountInString(id) > 512 {
		return Errorf(ErrInvalidInput, "append_id must be a non-empty string of at most 512 "+
			"characters of valid Unicode, got %s", quoted(id, 80))
	}
	return nil
}

// CheckExpectedVersion returns an InvalidInput error unless v is AnyVersion or a version >= 0.
func CheckExpectedVersion(v int64) error {
	if v < AnyVersion {
		return Errorf(ErrInvalidInput, "expected_version must be an int >= 0 or AnyVersion, got %d", v)
	}
	return nil
}

// quoted is a string as an error message quotes it, as the Python package's messages do: in
// single quotes, or escaped when it holds control characters, quotes or bytes that are not
// UTF-8, and cut to width characters with its length said, so that a hostile megabyte never
// becomes a megabyte of error line.
func quoted(value string, width int) string {
	text := "'" + value + "'"
	if !utf8.ValidString(value) || strings.ContainsFunc(value, unicode.IsControl) ||
		strings.ContainsRune(value, '\'') {
		text = strconv.Quote(value)
	}
	if utf8.RuneCountInString(text) <= width {
		return text
	}
	cut := text
	for i := range text {
		if width == 0 {
			cut = text[:i]
			break
		}
		width--
	}
	return fmt.Sprintf("%s… (cut of %d characters)", cut, utf8.RuneCountInString(value))
}

// FormatCursor returns the cursor of the Redis stream entry ms-seq: both parts zero-padded, to
// 13 and 6 digits, so that cursors sort as strings in commit order.
func FormatCursor(ms int64, seq int64) string {
	return fmt.Sprintf("%013d-%06d", ms, seq)
}

// ParseCursor returns the millisecond time and sequence number of a cursor, or an
// InvalidInput error for text that is not one: 1 to 13 digits, a dash, 1 to 6 digits.
func ParseCursor(c string) (ms, seq int64, err error) {
	msText, seqText, ok := strings.Cut(c, "-")
	if !ok || !digits(msText, 13) || !digits(seqText, 6) {
		return 0, 0, Errorf(ErrInvalidInput, "not a cursor: %s", quoted(c, 80))
	}
	// At most 13 and 6 digits: neither can overflow an int64.
	ms, _ = strconv.ParseInt(msText, 10, 64)
	seq, _ = strconv.ParseInt(seqText, 10, 64)
	return ms, seq, nil
}

func digits(text string, most int) bool {
	if text == "" || len(text) > most {
		return false
	}
	for i := 0; i < len(text); i++ {
		if text[i] < '0' || text[i] > '9' {
			return false
		}
	}
	return true
}

// CursorTime is the commit time a cursor carries, in UTC with millisecond precision; the zero
// time for text that is not a cursor.
func CursorTime(c string) time.Time {
	ms, _, err := ParseCursor(c)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// LedgerCursor returns the cursor of a Redis stream entry id ("<ms>-<seq>"), padded to the
// fixed width cursors have.
func LedgerCursor(redisEntryID string) string {
	msText, seqText, _ := strings.Cut(redisEntryID, "-")
	return pad(msText, 13) + "-" + pad(seqText, 6)
}

func pad(text string, width int) string {
	if len(text) >= width {
		return text
	}
	return strings.Repeat("0", width-len(text)) + text
}

// RedisCursor returns the Redis stream entry id of a cursor ("<ms>-<seq>", unpadded), or an
// InvalidInput error for text that is not a cursor.
func RedisCursor(cursor string) (string, error) {
	ms, seq, err := ParseCursor(cursor)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(ms, 10) + "-" + strconv.FormatInt(seq, 10), nil
}

// DeriveEventID returns the id the ledger gives the event at index of an append when the
// writer gave it none: uuid5 in EventIDNamespace of the session, the stream name, the
// append_id and the index in decimal, joined by U+001F. Every retry of the append, in every
// language, derives the same ids.
func DeriveEventID(stream StreamID, appendID string, index int) string {
	return newIDDeriver(stream, appendID)(index)
}

// newIDDeriver returns DeriveEventID for one append: the part common to all its events is
// joined once, and the name and the hash state are reused from one event to the next (the
// derived ids do not share them).
func newIDDeriver(stream StreamID, appendID string) func(index int) string {
	const sep = '\x1f'
	name := make([]byte, 0, len(stream.Session)+len(stream.Name)+len(appendID)+3+20)
	name = append(append(name, stream.Session...), sep)
	name = append(append(name, stream.Name...), sep)
	name = append(append(name, appendID...), sep)
	prefix := len(name)
	h := sha1.New()
	return func(index int) string {
		name = strconv.AppendInt(name[:prefix], int64(index), 10)
		return uuid.NewHash(h, eventIDNamespace, name, 5).String()
	}
}
