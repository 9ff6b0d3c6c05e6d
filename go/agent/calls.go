package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// DefaultLeaseTTL is how long a run stays alive without renewal, unless its recorder says
// otherwise; the run renews it every third of that.
const DefaultLeaseTTL = 10 * time.Second

// Abandoned is the reason a recorder gives in the tool_result that closes an attempt a crash
// left unfinished, before a tool safe to replay runs again.
const Abandoned = "abandoned by a crash; replayed on resume"

// Support is how strongly a recorder keeps one of its guarantees.
type Support string

// The levels of Support, as the adapters publish them.
const (
	Strict      Support = "strict"
	BestEffort  Support = "best_effort"
	Unsupported Support = "unsupported"
)

// Capabilities is what a recorder guarantees, in the vocabulary the adapters publish; a run
// records it in its run.started.
type Capabilities struct {
	Profile           string
	RequestBeforeCall Support
	RecordOutcome     Support
	Recovery          Support
}

// Fields is the capabilities as a run.started carries them.
func (c Capabilities) Fields() map[string]any {
	return map[string]any{
		"profile":             c.Profile,
		"request_before_call": string(c.RequestBeforeCall),
		"record_outcome":      string(c.RecordOutcome),
		"recovery":            string(c.Recovery),
	}
}

// Attempt is a call whose request is committed: what its result is recorded against.
type Attempt struct {
	Tool      string
	AttemptID string
	StepID    string
	// CallID is the event id of its tool_call, the parent of its tool_result.
	CallID string
	// IdempotencyKey is the logical call's key, the same for every attempt at it.
	IdempotencyKey string
	// Args are the call's arguments as recorded.
	Args map[string]any
}

// Delegation is a delegation in flight: the call that asked for it and the child run that
// does it.
type Delegation struct {
	StepID      string
	AttemptID   string
	ChildRunID  string
	CallEventID string
	Agent       string
}

// RequestEvent is a call's tool_call, committed before the call runs, with the logical call's
// idempotency key, as the Python recorder writes it.
func RequestEvent(tool string, args map[string]any, attemptID, stepID, key string) model.Event {
	if args == nil {
		args = map[string]any{}
	}
	return model.Event{"type": model.TypeToolCall, "tool": tool, "args": args,
		"attempt_id": attemptID, "step_id": stepID, "idempotency_key": key}
}

// ResultEvent is a call's tool_result: its outcome, status "ok" or "error", as the Python
// recorder writes it.
func ResultEvent(tool, attemptID, stepID, status string, value any) model.Event {
	return model.Event{"type": model.TypeToolResult, "tool": tool, "attempt_id": attemptID,
		"step_id": stepID, "status": status, "result": value}
}

// AbandonedEvent is the tool_result that closes an attempt a crash left unfinished, before a
// tool safe to replay runs again: nobody knows whether it took effect.
func AbandonedEvent(call model.RecordedEvent, stepID string) model.Event {
	tool, _ := call.Fields["tool"].(string)
	attempt, _ := call.Fields["attempt_id"].(string)
	return ResultEvent(tool, attempt, stepID, "error",
		map[string]any{"outcome": "unknown", "reason": Abandoned})
}

// IsAbandoned says whether a tool_result only closes an attempt a crash left unfinished: no
// outcome of the step, which a later attempt has.
func IsAbandoned(result model.RecordedEvent) bool {
	value, ok := result.Fields["result"].(map[string]any)
	return ok && len(value) == 2 && value["outcome"] == "unknown" && value["reason"] == Abandoned
}

// NotDone is the outcome a reconciler's probe records for a call whose effect did not take
// place: the resumed run calls the tool again, under the same key.
const NotDone = "not_done"

// IsNotDone says whether a tool_result is a probe's finding that the call's effect did not
// take place: the step runs again, under the same idempotency key.
func IsNotDone(result model.RecordedEvent) bool {
	if by, ok := result.Fields["settled_by"].(map[string]any); !ok || len(by) == 0 {
		return false
	}
	value, ok := result.Fields["result"].(map[string]any)
	return ok && value["outcome"] == NotDone
}

// Failure is what a tool_result with status "error" records of err: {"error": its type's
// name, "message": its text}, as the Python recorder records an exception.
func Failure(err error) map[string]any {
	return map[string]any{"error": errorName(err), "message": err.Error()}
}

// errorName names err as an exception's class would be: a ledger error by its kind
// ("VersionConflict"), another by its type ("PathError"), "Error" for the anonymous ones
// (errors.New, fmt.Errorf), whose types are unexported.
func errorName(err error) string {
	if name := Name(err); name != "" {
		return name
	}
	t := reflect.TypeOf(err)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if r, _ := utf8.DecodeRuneInString(t.Name()); unicode.IsUpper(r) {
			return t.Name()
		}
	}
	return "Error"
}

// plain returns v as a value an event may hold. JSON values pass as they are, so an integer
// stays an integer and a float a float, as the Python package records them; anything else
// (a struct, a pointer, a json.Marshaler) goes through encoding/json first, as its JSON.
func plain(v any) (any, error) {
	if _, err := model.Canonical(v); err == nil {
		return v, nil
	}
	text, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	decoder := json.NewDecoder(bytes.NewReader(text))
	decoder.UseNumber()
	var out any
	if err := decoder.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// plainArgs is a call's arguments as plain values: an object.
func plainArgs(args map[string]any) (map[string]any, error) {
	if args == nil {
		return map[string]any{}, nil
	}
	value, err := plain(args)
	if err != nil {
		return nil, err
	}
	out, ok := value.(map[string]any)
	if !ok {
		return nil, errors.New("a call's arguments are an object")
	}
	return out, nil
}

// as returns a recorded value as a T: itself when it is one, else through its JSON (a struct
// from the object recorded).
func as[T any](value any) (T, error) {
	if v, ok := value.(T); ok {
		return v, nil
	}
	var out T
	if value == nil {
		return out, nil
	}
	text, err := json.Marshal(value)
	if err == nil {
		err = json.Unmarshal(text, &out)
	}
	if err != nil {
		return out, fmt.Errorf("the recorded result does not fit %T: %w", out, err)
	}
	return out, nil
}
