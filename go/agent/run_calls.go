package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// CallOption changes how one call is recorded.
type CallOption func(*callSettings)

type callSettings struct {
	safe bool
	step string
}

// SafeToReplay declares the call's tool harmless to run twice: a resumed run that finds its
// attempt unfinished closes it as abandoned and runs the tool again, instead of stopping with
// ErrUnresolvedAttempt. The run records the declaration (a tool.declared mutation) once, before
// the tool's first request, so that the reconciler knows it too.
func SafeToReplay() CallOption { return func(s *callSettings) { s.safe = true } }

// Step names the logical step the call belongs to, which survives retries and resumes; by
// default a run's n-th call is the step <run id>/c<n>.
func Step(id string) CallOption { return func(s *callSettings) { s.step = id } }

// Begun is a call begun with BeginCall.
type Begun struct {
	// Replayed says the step was done before the run resumed: Value is its recorded result,
	// and the tool must not run.
	Replayed bool
	Value    any
	// Attempt is the attempt whose request was committed, when the tool is to run: pass it to
	// EndCall with the outcome. When Replayed, it is the attempt whose result Value is.
	Attempt Attempt
}

// Call runs fn as the tool tool with args, recorded: its request committed first, then its
// result, and returns what fn returned. When the request cannot be committed fn does not run
// (ErrRequestNotRecorded); when fn fails its error is recorded and returned. A resumed run
// returns the recorded result of a step it did before (whoever recorded it: the run, or an
// operator's `ledger-bus resolve`) without calling fn, converted to T through its JSON when it
// is not a T already; it returns a *ToolFailedError for a recorded error, and a
// *UnresolvedAttemptError for a call requested and never finished, unless the tool is
// SafeToReplay.
//
// args and the result are recorded as JSON: values of the JSON kinds as they are, others
// (structs) as encoding/json writes them.
func Call[T any](ctx context.Context, run *Run, tool string, args map[string]any, fn func(ctx context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	begun, err := run.BeginCall(ctx, tool, args, opts...)
	if err != nil {
		return zero, err
	}
	if begun.Replayed {
		return as[T](begun.Value)
	}
	value, err := fn(run.CallContext(ctx, begun.Attempt))
	if err != nil {
		if rerr := run.endCall(ctx, begun.Attempt, StatusError, Failure(err), err); rerr != nil {
			return zero, rerr
		}
		return zero, err
	}
	recorded, perr := plain(value)
	if perr != nil {
		return zero, &OutcomeNotRecordedError{Tool: tool, AttemptID: begun.Attempt.AttemptID,
			Cause: model.Errorf(model.ErrInvalidEvent, "the result is not JSON: %v", perr)}
	}
	if err := run.EndCall(ctx, begun.Attempt, StatusOK, recorded); err != nil {
		return zero, err
	}
	return value, nil
}

// Call is the package-level Call with a result of any type: a resumed run returns the
// recorded value as it was read (JSON numbers as int64 or float64, objects as
// map[string]any).
func (run *Run) Call(ctx context.Context, tool string, args map[string]any, fn func(ctx context.Context) (any, error), opts ...CallOption) (any, error) {
	return Call(ctx, run, tool, args, fn, opts...)
}

// BeginCall is the first half of Call, for a loop that runs the tool itself: the recorded
// result of a step done before (Replayed), else the Attempt once its request is committed. An
// error of kind ErrRequestNotRecorded: the request could not be committed, and the tool must
// not run.
func (run *Run) BeginCall(ctx context.Context, tool string, args map[string]any, opts ...CallOption) (Begun, error) {
	var settings callSettings
	for _, opt := range opts {
		opt(&settings)
	}
	run.calls++
	stepID := settings.step
	if stepID == "" {
		stepID = fmt.Sprintf("%s/c%d", run.id, run.calls)
	}
	earlier := run.history.attempts[stepID]
	if len(earlier) > 0 {
		value, done, again, err := run.replay(ctx, stepID, earlier, settings.safe)
		if err != nil {
			return Begun{}, err
		}
		if !again {
			return Begun{Replayed: true, Value: value, Attempt: Attempt{Tool: fieldText(done.Fields, "tool"), AttemptID: fieldText(done.Fields, "attempt_id"),
				StepID: stepID, CallID: done.EventID()}}, nil
		}
	}
	attemptID := run.attemptID(stepID, len(earlier)+1)
	key := model.IdempotencyKey(run.rec.session, run.id, stepID, run.incarnation)
	if settings.safe && !run.declared[tool] {
		// Unsafe is the default; a tool safe to run twice says so once per run, before its
		// first request, so that whoever finds its attempt unresolved knows.
		event := model.Event{"type": model.TypeMutation, "kind": "tool.declared", "tool": tool, "safe_to_replay": true}
		if _, err := run.write(ctx, event, nil); err != nil {
			return Begun{}, err
		}
		run.declared[tool] = true
	}
	callID, recorded, err := run.request(ctx, tool, args, attemptID, stepID, key)
	if err != nil {
		return Begun{}, err
	}
	return Begun{Attempt: Attempt{Tool: tool, AttemptID: attemptID, StepID: stepID, CallID: callID,
		IdempotencyKey: key, Args: recorded}}, nil
}

// EndCall is the second half of Call: the attempt's outcome, status StatusOK or StatusError,
// and its result (JSON). An *OutcomeNotRecordedError: it could not be committed.
func (run *Run) EndCall(ctx context.Context, attempt Attempt, status string, value any) error {
	return run.endCall(ctx, attempt, status, value, nil)
}

func (run *Run) endCall(ctx context.Context, attempt Attempt, status string, value any, toolErr error) error {
	event := ResultEvent(attempt.Tool, attempt.AttemptID, attempt.StepID, status, value)
	// The call ran: its outcome is recorded even when ctx ended (a tool that returns on
	// cancellation, the usual case in Go), or its attempt would stay open for the reconciler.
	// The store's own timeout still bounds the write.
	if _, err := run.write(context.WithoutCancel(ctx), event, []string{attempt.CallID}); err != nil {
		return &OutcomeNotRecordedError{Tool: attempt.Tool, AttemptID: attempt.AttemptID, Cause: err, ToolErr: toolErr}
	}
	return nil
}

// request commits a call's tool_call and returns its event id and its arguments as recorded.
func (run *Run) request(ctx context.Context, tool string, args map[string]any, attemptID, stepID, key string) (string, map[string]any, error) {
	recorded, err := plainArgs(args)
	if err != nil {
		return "", nil, newError(ErrRequestNotRecorded, model.Errorf(model.ErrInvalidEvent, "%v", err),
			"%s was not called: its arguments are not JSON: %v", tool, err)
	}
	callID, err := run.write(ctx, RequestEvent(tool, recorded, attemptID, stepID, key), nil)
	if err != nil {
		var unconfirmed *model.DurabilityNotConfirmedError
		if errors.As(err, &unconfirmed) {
			// Written on the primary but not confirmed as durable as the store asks: a
			// failover could lose it, and a tool run on an unconfirmed request could run
			// again unseen.
			return "", nil, newError(ErrRequestNotRecorded, err,
				"%s was not called: its request was written but not confirmed durable: %v", tool, err)
		}
		return "", nil, newError(ErrRequestNotRecorded, err, "%s was not called: its request was not recorded: %v", tool, err)
	}
	return callID, recorded, nil
}

// attemptID is <step>#<n> for the n-th attempt at a step, <step>#<n>@<v> in a later
// incarnation of the run id, whose run.started has version v (spec/ledger-v1.md section 7).
func (run *Run) attemptID(stepID string, n int) string {
	if run.incarnation == 1 {
		return fmt.Sprintf("%s#%d", stepID, n)
	}
	return fmt.Sprintf("%s#%d@%d", stepID, n, run.incarnation)
}

// replay is what a resumed run does at a step it requested before: the recorded value and
// the tool_call it answers (again false), an error, or again true when the tool is to run
// afresh.
func (run *Run) replay(ctx context.Context, stepID string, earlier []model.RecordedEvent, safe bool) (value any, done model.RecordedEvent, again bool, err error) {
	for _, call := range earlier {
		result, ok := run.history.results[fieldText(call.Fields, "attempt_id")]
		if !ok || IsAbandoned(result) || IsNotDone(result) {
			continue
		}
		if result.Fields["status"] == StatusOK {
			return result.Fields["result"], call, false, nil
		}
		return nil, call, false, &ToolFailedError{Tool: fieldText(call.Fields, "tool"),
			AttemptID: fieldText(call.Fields, "attempt_id"), Result: result.Fields["result"]}
	}
	latest := earlier[len(earlier)-1]
	if result, ok := run.history.results[fieldText(latest.Fields, "attempt_id")]; ok && IsNotDone(result) {
		// A probe found the last attempt's effect never took place: call again, safe to
		// replay or not; the key it carries again makes a late first attempt harmless.
		return nil, latest, true, nil
	}
	if !safe {
		return nil, latest, false, &UnresolvedAttemptError{AttemptID: fieldText(latest.Fields, "attempt_id"),
			Tool: fieldText(latest.Fields, "tool")}
	}
	// Safe to replay: close the abandoned attempt explicitly (unless a crash right after its
	// close left it closed), then run a new one.
	if _, closed := run.history.results[fieldText(latest.Fields, "attempt_id")]; !closed {
		if _, err := run.write(ctx, AbandonedEvent(latest, stepID), []string{latest.EventID()}); err != nil {
			return nil, latest, false, err
		}
	}
	return nil, latest, true, nil
}

// -- delegation ---------------------------------------------------------------------------

// Delegate asks another agent to do something: a delegate call whose child run links back to
// it. The child, in any process and any language, starts the run ChildRunID with parents
// [CallEventID]; FinishDelegation records the outcome here. On resume, a delegation the run
// already asked for is returned as recorded, with the same child run, and not asked again.
// childRunID "" makes a new one.
func (run *Run) Delegate(ctx context.Context, agent, objective, childRunID string) (Delegation, error) {
	run.calls++
	stepID := fmt.Sprintf("%s/c%d", run.id, run.calls)
	attemptID := run.attemptID(stepID, 1)
	for _, earlier := range run.history.attempts[stepID] {
		if earlier.Fields["tool"] == "delegate" {
			args, _ := earlier.Fields["args"].(map[string]any)
			return Delegation{StepID: stepID, AttemptID: attemptID, ChildRunID: fieldText(args, "child_run"),
				CallEventID: earlier.EventID(), Agent: agent}, nil
		}
	}
	if childRunID == "" {
		childRunID = shortID()
	}
	args := map[string]any{"agent": agent, "objective": objective, "child_run": childRunID}
	key := model.IdempotencyKey(run.rec.session, run.id, stepID, run.incarnation)
	callID, _, err := run.request(ctx, "delegate", args, attemptID, stepID, key)
	if err != nil {
		return Delegation{}, err
	}
	return Delegation{StepID: stepID, AttemptID: attemptID, ChildRunID: childRunID, CallEventID: callID, Agent: agent}, nil
}

// FinishDelegation records the delegation's outcome, unless a resumed run recorded it before
// its crash.
func (run *Run) FinishDelegation(ctx context.Context, d Delegation, status string, result any) error {
	if _, done := run.history.results[d.AttemptID]; done {
		return nil
	}
	return run.EndCall(ctx, Attempt{Tool: "delegate", AttemptID: d.AttemptID, StepID: d.StepID, CallID: d.CallEventID}, status, result)
}
