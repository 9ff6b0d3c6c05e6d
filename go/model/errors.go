package model

import (
	"errors"
	"fmt"
	"strings"
)

// The kinds of error every store returns, as spec/ledger-v1.md section 4 names them. Test a
// returned error with errors.Is against these; reach the data an error carries (versions, the
// field of an invalid event) with errors.As and the typed errors below. A kind is also each of
// its parents' kinds: an ErrHistoryRewound is an ErrVersionConflict, an ErrInvalidEvent an
// ErrInvalidInput, an ErrUnsupported an ErrBackendRefused, an ErrLeaseLost an ErrRefused, and
// every one of them an ErrLedger.
var (
	ErrLedger                 = errors.New("ledger error")
	ErrInvalidInput           = &kind{"InvalidInput", ErrLedger}
	ErrInvalidEvent           = &kind{"InvalidEvent", ErrInvalidInput}
	ErrVersionConflict        = &kind{"VersionConflict", ErrLedger}
	ErrHistoryRewound         = &kind{"HistoryRewound", ErrVersionConflict}
	ErrIdempotencyConflict    = &kind{"IdempotencyConflict", ErrLedger}
	ErrBackendUnavailable     = &kind{"BackendUnavailable", ErrLedger}
	ErrBackendRefused         = &kind{"BackendRefused", ErrLedger}
	ErrUnsupported            = &kind{"Unsupported", ErrBackendRefused}
	ErrUnexpectedReply        = &kind{"UnexpectedReply", ErrBackendRefused}
	ErrRefused                = &kind{"Refused", ErrLedger}
	ErrSessionArchived        = &kind{"SessionArchived", ErrRefused}
	ErrLeaseLost              = &kind{"LeaseLost", ErrRefused}
	ErrNotFound               = &kind{"NotFound", ErrLedger}
	ErrDurabilityNotConfirmed = &kind{"DurabilityNotConfirmed", ErrLedger}
)

// kind is one error kind: its name, as the other languages and the command line print it, and
// the kind it is a case of.
type kind struct {
	name   string
	parent error
}

func (k *kind) Error() string { return k.name }

// Is makes a kind match its ancestors too, so errors.Is(err, ErrVersionConflict) holds for a
// HistoryRewound.
func (k *kind) Is(target error) bool {
	for p := k.parent; p != nil; {
		if p == target {
			return true
		}
		parent, ok := p.(*kind)
		if !ok {
			return false
		}
		p = parent.parent
	}
	return false
}

// Error is an error of one kind with its message, and the error that caused it, if any.
type Error struct {
	Kind  error
	Msg   string
	Cause error
}

// Errorf returns an *Error of the kind, its message formatted.
func Errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return e.Msg }

// Is reports whether target is this error's kind or one of the kind's ancestors.
func (e *Error) Is(target error) bool { return is(e.Kind, target) }

// Unwrap returns the cause, so errors.Is and errors.As reach a network error beneath.
func (e *Error) Unwrap() error { return e.Cause }

func is(k, target error) bool {
	if k == target {
		return true
	}
	if kk, ok := k.(*kind); ok {
		return kk.Is(target)
	}
	return false
}

// Name is the name of err's kind as the other languages print it ("VersionConflict"), or ""
// when err is not a ledger error.
func Name(err error) string {
	for _, k := range []error{
		ErrInvalidEvent, ErrInvalidInput, ErrHistoryRewound, ErrVersionConflict,
		ErrIdempotencyConflict, ErrBackendUnavailable, ErrUnsupported, ErrUnexpectedReply,
		ErrBackendRefused, ErrSessionArchived, ErrLeaseLost, ErrRefused, ErrNotFound,
		ErrDurabilityNotConfirmed,
	} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return ""
}

// ExitCode is the command line's exit code for err (spec/ledger-v1.md section 4): 0 for nil,
// 70 for an error that is not the ledger's.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrInvalidInput):
		return 2
	case errors.Is(err, ErrVersionConflict):
		return 3
	case errors.Is(err, ErrIdempotencyConflict):
		return 4
	case errors.Is(err, ErrBackendUnavailable):
		return 5
	case errors.Is(err, ErrNotFound):
		return 6
	case errors.Is(err, ErrDurabilityNotConfirmed):
		return 7
	case errors.Is(err, ErrBackendRefused):
		return 8
	case errors.Is(err, ErrRefused):
		return 1
	}
	return 70
}

// InvalidEventError is an event that breaks section 2 of the spec. Nothing of its append was
// written.
type InvalidEventError struct {
	Reason string
	// Index is the event's position in its append, or -1 when the fault is not one event's.
	Index int
	// Field is the path of the field at fault ("args.nested.deep[1]"), or "".
	Field string
}

func (e *InvalidEventError) Error() string {
	var parts []string
	if e.Index >= 0 {
		parts = append(parts, fmt.Sprintf("event %d", e.Index))
	}
	if e.Field != "" {
		parts = append(parts, fmt.Sprintf("field '%s'", e.Field))
	}
	if len(parts) == 0 {
		return e.Reason
	}
	return strings.Join(parts, ", ") + ": " + e.Reason
}

func (e *InvalidEventError) Is(target error) bool { return is(ErrInvalidEvent, target) }

// VersionConflictError is an append whose expected version was not the stream's. Nothing was
// written. A HistoryRewound is one too, with Rewound set: Expected is then the version this
// writer was acknowledged, Actual the shorter version found.
type VersionConflictError struct {
	Stream   StreamID
	Expected int64
	Actual   int64
	Rewound  bool
}

func (e *VersionConflictError) Error() string {
	if e.Rewound {
		return fmt.Sprintf("stream %s: version %d was acknowledged to this writer, the stream now "+
			"has %d events: history was rewound (a failover lost acknowledged events); nothing "+
			"written", e.Stream, e.Expected, e.Actual)
	}
	return fmt.Sprintf("stream %s: expected version %d, actual %d", e.Stream, e.Expected, e.Actual)
}

func (e *VersionConflictError) Is(target error) bool {
	if e.Rewound {
		return is(ErrHistoryRewound, target)
	}
	return is(ErrVersionConflict, target)
}

// IdempotencyConflictError is an append_id already used on the stream for other content.
type IdempotencyConflictError struct {
	Stream   StreamID
	AppendID string
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("stream %s: append_id '%s' was already used for different events",
		e.Stream, e.AppendID)
}

func (e *IdempotencyConflictError) Is(target error) bool {
	return is(ErrIdempotencyConflict, target)
}

// SessionArchivedError is an append to a session moved to an archive, which holds it
// read-only now.
type SessionArchivedError struct {
	Session string
	Archive string
}

func (e *SessionArchivedError) Error() string {
	return fmt.Sprintf("session '%s' is archived in %s; it takes no more appends", e.Session, e.Archive)
}

func (e *SessionArchivedError) Is(target error) bool { return is(ErrSessionArchived, target) }

// DurabilityNotConfirmedError is an append written on the primary whose durability was not
// confirmed in time. Result is what was committed; retrying with the same append_id is safe.
type DurabilityNotConfirmedError struct {
	Msg    string
	Result AppendResult
}

func (e *DurabilityNotConfirmedError) Error() string { return e.Msg }

func (e *DurabilityNotConfirmedError) Is(target error) bool {
	return is(ErrDurabilityNotConfirmed, target)
}
