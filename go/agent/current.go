package agent

import "context"

// CurrentCall is a recorded call as its tool sees it. A tool hands IdempotencyKey to the
// system it acts on (a payment API's Idempotency-Key) so that the attempt after a crash does
// not act twice.
type CurrentCall struct {
	Tool      string
	SessionID string
	RunID     string
	StepID    string
	AttemptID string
	// IdempotencyKey is the same for every attempt at this call, in every process and SDK.
	IdempotencyKey string
	Args           map[string]any
}

type currentCallKey struct{}

// CallFrom is the recorded call a tool's context carries (Call gives its fn one); false
// outside a recorded call.
func CallFrom(ctx context.Context) (CurrentCall, bool) {
	call, ok := ctx.Value(currentCallKey{}).(CurrentCall)
	return call, ok
}

// WithCall is ctx carrying call, for a loop that runs a begun call's tool itself
// (Run.CallContext makes it from an Attempt).
func WithCall(ctx context.Context, call CurrentCall) context.Context {
	return context.WithValue(ctx, currentCallKey{}, call)
}

// CallContext is ctx carrying the begun attempt's call, for its tool.
func (run *Run) CallContext(ctx context.Context, attempt Attempt) context.Context {
	return WithCall(ctx, CurrentCall{Tool: attempt.Tool, SessionID: run.rec.session, RunID: run.id,
		StepID: attempt.StepID, AttemptID: attempt.AttemptID, IdempotencyKey: attempt.IdempotencyKey, Args: attempt.Args})
}
