package agent

import (
	"errors"
	"fmt"

	"github.com/ledger-bus/ledger-bus/go/internal/pyrepr"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// The kinds of error a run meets around its calls, with the names the Python package gives
// them. Test a returned error with errors.Is against these; each is also a model.ErrLedger
// (and ErrLeaseLost a model.ErrRefused). The typed errors below carry what each says
// (errors.As).
var (
	// ErrRequestNotRecorded: a call's request could not be committed, so the call did not run.
	ErrRequestNotRecorded = &kind{"RequestNotRecorded"}
	// ErrOutcomeNotRecorded: a call ran but its result could not be committed; the attempt
	// stays open, for the reconciler to flag.
	ErrOutcomeNotRecorded = &kind{"OutcomeNotRecorded"}
	// ErrUnresolvedAttempt: on resume, a call was found requested and never finished, and its
	// tool is not safe to replay: recovery stops there for a decision (`ledger-bus resolve`).
	ErrUnresolvedAttempt = &kind{"UnresolvedAttempt"}
	// ErrToolFailed: on resume, a call's recorded outcome was an error.
	ErrToolFailed = &kind{"ToolFailed"}
	// ErrLeaseLost: the run's lease expired or passed to another process; it may not write.
	// It is model.ErrLeaseLost, the kind a store refuses a fenced append with (a
	// *model.LeaseLostError), so errors.Is holds either way: a run whose renewal found the
	// lease lost and a write the store refused are the same kind.
	ErrLeaseLost = model.ErrLeaseLost
	// ErrRunHeld: the run id's lease is held by another live process.
	ErrRunHeld = &kind{"RunHeld"}
)

// kind is one of this package's error kinds: a case of model.ErrLedger.
type kind struct{ name string }

func (k *kind) Error() string { return k.name }

// Is makes every kind a model.ErrLedger too.
func (k *kind) Is(target error) bool { return target == model.ErrLedger }

// Name is the name of err's kind as the Python package names its exception
// ("UnresolvedAttempt"), or model.Name(err) for the kinds every store returns.
func Name(err error) string {
	for _, k := range []*kind{ErrRequestNotRecorded, ErrOutcomeNotRecorded, ErrUnresolvedAttempt,
		ErrToolFailed, ErrRunHeld} {
		if errors.Is(err, k) {
			return k.name
		}
	}
	return model.Name(err)
}

// Error is an error of one of this package's kinds with its message, and the store's error
// that caused it, if any.
type Error struct {
	Kind  error
	Msg   string
	Cause error
}

func (e *Error) Error() string { return e.Msg }

// Is reports whether target is this error's kind or one of the kind's ancestors (a
// LeaseLost is a model.ErrRefused), or model.ErrLedger.
func (e *Error) Is(target error) bool {
	return target == model.ErrLedger || errors.Is(e.Kind, target)
}

// Unwrap returns the cause, so errors.Is reaches a store's error kind beneath
// (model.ErrVersionConflict, model.ErrBackendUnavailable).
func (e *Error) Unwrap() error { return e.Cause }

func newError(kind error, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Cause: cause}
}

// OutcomeNotRecordedError is a call that ran whose result could not be committed: the attempt
// stays open. Cause is the store's error, ToolErr what the tool itself returned (nil when it
// succeeded); errors.Is and errors.As reach both.
type OutcomeNotRecordedError struct {
	Tool      string
	AttemptID string
	Cause     error
	ToolErr   error
}

func (e *OutcomeNotRecordedError) Error() string {
	return fmt.Sprintf("%s ran (attempt %s) but its result was not recorded: %v", e.Tool, e.AttemptID, e.Cause)
}

// Is reports whether target is ErrOutcomeNotRecorded or model.ErrLedger.
func (e *OutcomeNotRecordedError) Is(target error) bool {
	return target == ErrOutcomeNotRecorded || target == model.ErrLedger
}

// Unwrap returns the store's error and the tool's, when it failed.
func (e *OutcomeNotRecordedError) Unwrap() []error {
	if e.ToolErr == nil {
		return []error{e.Cause}
	}
	return []error{e.Cause, e.ToolErr}
}

// UnresolvedAttemptError is, on resume, a call requested and never finished whose tool is not
// safe to replay. Close it (`ledger-bus resolve <session> <attempt>`) and resume again: the
// run then returns the outcome the resolution recorded.
type UnresolvedAttemptError struct {
	AttemptID string
	Tool      string
}

func (e *UnresolvedAttemptError) Error() string {
	return fmt.Sprintf("attempt %s of %s was requested and has no result; it is not safe to"+
		" replay, so recovery stops here for a decision (reconcile it, then resume)", e.AttemptID, e.Tool)
}

// Is reports whether target is ErrUnresolvedAttempt or model.ErrLedger.
func (e *UnresolvedAttemptError) Is(target error) bool {
	return target == ErrUnresolvedAttempt || target == model.ErrLedger
}

// ToolFailedError is, on resume, a call whose recorded outcome was an error: what the tool
// returned when it first ran, or what an operator resolved it with. Result is the recorded
// result ({"error": ..., "message": ...} for a tool that failed in a recorder).
type ToolFailedError struct {
	Tool      string
	AttemptID string
	Result    any
}

func (e *ToolFailedError) Error() string {
	return fmt.Sprintf("%s failed when first run: %s", e.Tool, pyrepr.Repr(e.Result))
}

// Is reports whether target is ErrToolFailed or model.ErrLedger.
func (e *ToolFailedError) Is(target error) bool {
	return target == ErrToolFailed || target == model.ErrLedger
}
