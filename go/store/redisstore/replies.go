package redisstore

import (
	"fmt"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// One parser per Lua script the store calls, each turning the raw reply (as go-redis gives it
// over RESP2: bulk strings as string, integers as int64, arrays as []any) into a typed value,
// so that no caller reads a reply by position. The kinds are the scripts' own first elements,
// as the Python parsers (ledger_bus/store/redis/replies.py) name them. A reply of a shape a
// parser does not know is model.ErrUnexpectedReply: the server runs other scripts than these.

// The kinds of append.lua's reply. Nothing is written unless the kind is appendOK.
const (
	appendOK         = "ok"         // written
	appendDup        = "dup"        // written before under this append_id
	appendIdem       = "idem"       // the append_id was used for other events
	appendArchived   = "archived"   // the session moved to an archive
	appendFenced     = "fenced"     // the lease holding the append named is over
	appendConflict   = "conflict"   // the expected version is not the stream's
	appendRewound    = "rewound"    // the stream is shorter than acknowledged to this writer
	appendNoArtifact = "noartifact" // an artifact written before the call is gone: again
	appendNoPerm     = "noperm"     // the ACL refuses one of the script's writes
)

// appendReply is append.lua's reply; the fields its kind has are set.
type appendReply struct {
	kind string
	// first, last, cursor and generation: ok and dup (generation: of the original, for dup);
	// opened: ok, how many attempts it opened.
	first, last, opened, generation int64
	cursor                          string
	// version: conflict and rewound, the stream's version.
	version int64
	// token: fenced, the lease's current token (0: none drawn).
	token int64
	// where: archived, the archive. key: noartifact and noperm; command: noperm.
	where, key, command string
}

// committed reports whether the append's events are in the log: written now, or before by
// the same append.
func (r appendReply) committed() bool { return r.kind == appendOK || r.kind == appendDup }

// unexpected is the error of a reply of a shape the parser of script does not know.
func unexpected(script string, reply any) error {
	text := fmt.Sprintf("%q", reply)
	if s, ok := reply.([]any); ok {
		text = fmt.Sprintf("%q", s)
	}
	if utf8.RuneCountInString(text) > 200 {
		text = string([]rune(text)[:199]) + "…"
	}
	return model.Errorf(model.ErrUnexpectedReply, "%s replied %s: a shape this SDK does not know", script, text)
}

// fields reads a reply's elements, remembering the first that is not what was asked.
type fields struct {
	reply []any
	bad   bool
}

func (f *fields) str(at int) string {
	if at < len(f.reply) {
		if s, ok := f.reply[at].(string); ok {
			return s
		}
	}
	f.bad = true
	return ""
}

func (f *fields) integer(at int) int64 {
	if at < len(f.reply) {
		if n, ok := f.reply[at].(int64); ok {
			return n
		}
	}
	f.bad = true
	return 0
}

// parseAppendReply reads append.lua's reply, by its first element.
func parseAppendReply(raw any) (appendReply, error) {
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return appendReply{}, unexpected("append.lua", raw)
	}
	f := &fields{reply: list}
	r := appendReply{kind: f.str(0)}
	size := 0
	switch r.kind {
	case appendOK:
		size = 6
		r.first, r.last, r.cursor = f.integer(1), f.integer(2), f.str(3)
		r.opened, r.generation = f.integer(4), f.integer(5)
	case appendDup:
		size = 5
		r.first, r.last, r.cursor, r.generation = f.integer(1), f.integer(2), f.str(3), f.integer(4)
	case appendIdem:
		size = 1
	case appendArchived:
		size = 2
		r.where = f.str(1)
	case appendFenced:
		size = 2
		r.token = f.integer(1)
	case appendConflict, appendRewound:
		size = 2
		r.version = f.integer(1)
	case appendNoArtifact:
		size = 2
		r.key = f.str(1)
	case appendNoPerm:
		size = 3
		r.command, r.key = f.str(1), f.str(2)
	default:
		f.bad = true
	}
	if f.bad || len(list) != size {
		return appendReply{}, unexpected("append.lua", raw)
	}
	return r, nil
}

// flag reads a reply of 1 or 0, as script gives it: true for 1.
func flag(script string, raw any) (bool, error) {
	n, ok := raw.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, unexpected(script, raw)
	}
	return n == 1, nil
}

// parseArtifactPutReply reads artifact_put.lua's reply: true when the artifact is there, false
// when the upload came out short and must be written again.
func parseArtifactPutReply(raw any) (bool, error) { return flag("artifact_put.lua", raw) }

// parseLeaseReply reads lease.lua's reply: the token of the holding (acquire, renew) or 1
// (release) when the owner holds the lease afterwards or let it go; 0 when another owner holds
// it or, for renew and release, it is gone.
func parseLeaseReply(raw any) (int64, error) {
	n, ok := raw.(int64)
	if !ok || n < 0 {
		return 0, unexpected("lease.lua", raw)
	}
	return n, nil
}

// parseEntries reads a reply of log entries as XRANGE gives them, [[id, [field, value, ...]],
// ...], as go-redis's XMessage; script names the script for the error.
func parseEntries(script string, raw any) ([]redis.XMessage, error) {
	list, ok := raw.([]any)
	if !ok {
		return nil, unexpected(script, raw)
	}
	out := make([]redis.XMessage, 0, len(list))
	for _, item := range list {
		pair, ok := item.([]any)
		if !ok || len(pair) != 2 {
			return nil, unexpected(script, raw)
		}
		id, ok := pair[0].(string)
		flat, isList := pair[1].([]any)
		if !ok || !isList || len(flat)%2 != 0 {
			return nil, unexpected(script, raw)
		}
		values := make(map[string]any, len(flat)/2)
		for i := 0; i < len(flat); i += 2 {
			name, ok := flat[i].(string)
			value, isText := flat[i+1].(string)
			if !ok || !isText {
				return nil, unexpected(script, raw)
			}
			values[name] = value
		}
		out = append(out, redis.XMessage{ID: id, Values: values})
	}
	return out, nil
}

// parseReadStreamReply reads read_stream.lua's reply: the log entries, oldest first.
func parseReadStreamReply(raw any) ([]redis.XMessage, error) {
	return parseEntries("read_stream.lua", raw)
}

// parseNamesReply reads a reply that is a list of names, as prune_consumers.lua gives the
// consumers it removed; script names the script for the error.
func parseNamesReply(script string, raw any) ([]string, error) {
	list, ok := raw.([]any)
	if !ok {
		return nil, unexpected(script, raw)
	}
	f := &fields{reply: list}
	names := make([]string, len(list))
	for i := range list {
		names[i] = f.str(i)
	}
	if f.bad {
		return nil, unexpected(script, raw)
	}
	return names, nil
}
