package model

import (
	"slices"
	"strconv"
	"strings"
)

// Notes say what each event of an append means for the open attempts a store keeps
// (spec/ledger-v1.md section 7), in the notation the Redis append script reads, so that it
// never decodes an event:
//
//	o␟<attempt_id>␟<run_id>␟<tool>   a tool_call opens its attempt
//	c␟<attempt_id>                   a tool_result closes it
//	f␟<attempt_id>␟<ms>-<seq>        a reconcile.unresolved flags the attempt whose call has
//	                                 that cursor (or whichever is open, with no cursor)
//	s␟<run_id>␟<tool>                a tool.declared marks the run's tool safe to replay
//
// ␟ is U+001F; "" is an event that means nothing for them.
const noteSep = "\x1f"

// noteOf is the note of one event's fields, already checked.
func noteOf(fields Event) string {
	str := func(name string) (string, bool) {
		s, ok := fields[name].(string)
		return s, ok
	}
	kind, _ := str("type")
	switch kind {
	case TypeToolCall:
		attempt, _ := str("attempt_id")
		run, _ := str("run_id")
		tool, _ := str("tool")
		return "o" + noteSep + attempt + noteSep + run + noteSep + tool
	case TypeToolResult:
		attempt, _ := str("attempt_id")
		return "c" + noteSep + attempt
	case TypeMutation:
	default:
		return ""
	}
	what, _ := str("kind")
	attempt, isAttempt := str("attempt_id")
	if what == "reconcile.unresolved" && isAttempt {
		named, present := fields["call_cursor"]
		if !present || named == nil {
			return "f" + noteSep + attempt + noteSep
		}
		cursor, _ := named.(string)
		ms, seq, err := ParseCursor(cursor)
		if err != nil {
			// A call_cursor that is no cursor names no call: the flag marks nothing.
			return ""
		}
		return "f" + noteSep + attempt + noteSep + strconv.FormatInt(ms, 10) + "-" + strconv.FormatInt(seq, 10)
	}
	run, isRun := str("run_id")
	tool, isTool := str("tool")
	if what == "tool.declared" && fields["safe_to_replay"] == true && isRun && isTool && identText(tool) {
		return "s" + noteSep + run + noteSep + tool
	}
	return ""
}

// settled leaves out of one append's notes the requests of attempts the append also ends, as
// the Python package does: such an attempt is never open (the call and its result commit
// together), and its result's note still closes it should an earlier append have left it open.
// It changes notes and returns it.
func settled(notes []string) []string {
	if !slices.ContainsFunc(notes, closesAttempt) {
		// Nothing to settle: an append of calls alone, the common one.
		return notes
	}
	opened := map[string][]int{}
	for at, note := range notes {
		kind, rest, _ := strings.Cut(note, noteSep)
		attempt, _, _ := strings.Cut(rest, noteSep)
		switch kind {
		case "o":
			opened[attempt] = append(opened[attempt], at)
		case "c":
			for _, open := range opened[attempt] {
				notes[open] = ""
			}
			delete(opened, attempt)
		}
	}
	return notes
}

func closesAttempt(note string) bool {
	return strings.HasPrefix(note, "c"+noteSep)
}

// LuaNotes is the notes of one append as the append script takes them in one argument: each
// begun by U+001E.
func LuaNotes(notes []string) string {
	return "\x1e" + strings.Join(notes, "\x1e")
}

// OpensAttempt reports whether an event's note opens an attempt: an append with such a note
// lists its session among those with open attempts before it runs.
func OpensAttempt(note string) bool {
	return strings.HasPrefix(note, "o"+noteSep)
}
