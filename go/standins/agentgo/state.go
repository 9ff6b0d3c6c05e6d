package agentgo

import "context"

// ExecutionKind is what an execution runs.
type ExecutionKind string

// The kinds of execution.
const (
	ExecutionKindModel   ExecutionKind = "model"
	ExecutionKindTool    ExecutionKind = "tool"
	ExecutionKindCompact ExecutionKind = "compact"
)

// Execution is the coordinate of one logical execution: ID stays the same across physical
// retries, Attempt counts them from one. IDs are scoped to one AgentGo run.
type Execution struct {
	ID        string
	Kind      ExecutionKind
	ParentID  string
	TurnIndex int
	Attempt   int
}

// WithAttempt is the same execution at another attempt.
func (e Execution) WithAttempt(attempt int) Execution {
	e.Attempt = attempt
	return e
}

type executionKey struct{}

// ContextWithExecution associates nested work with its parent execution.
func ContextWithExecution(ctx context.Context, execution Execution) context.Context {
	return context.WithValue(ctx, executionKey{}, execution)
}

// ExecutionFromContext is the nearest parent execution.
func ExecutionFromContext(ctx context.Context) (Execution, bool) {
	execution, ok := ctx.Value(executionKey{}).(Execution)
	return execution, ok
}

// RunProgress is the loop's progress, what a run continues from at a completed turn's
// boundary.
type RunProgress struct {
	Active                bool // false once the run ended
	NextTurn              bool // the loop decided to go beyond the completed turns
	CompletedTurns        int
	LengthRecoveries      int
	ToolCalls             int
	ToolErrors            int
	ConsecutiveToolErrors map[string]int
	PendingMessages       []AgentMessage // accepted for the next turn
}

// AgentState is the agent's state. Its durable part is Messages, TotalUsage and Progress; the
// rest is the process's.
type AgentState struct {
	SystemPrompt     string
	Messages         []AgentMessage
	Tools            []Tool
	IsRunning        bool
	StreamMessage    AgentMessage
	PendingToolCalls map[string]struct{}
	TotalUsage       Usage
	Progress         RunProgress
	Error            string
}

// AgentSnapshot is the state and the input accepted into the agent's queues.
type AgentSnapshot struct {
	State         AgentState
	SteeringQueue []AgentMessage
	FollowUpQueue []AgentMessage
}

// RunKind is how a run was started.
type RunKind string

// The kinds of run.
const (
	RunKindPrompt   RunKind = "prompt"
	RunKindContinue RunKind = "continue"
)

// BeforeRunContext is an accepted run about to start: the snapshot it would start from and
// its input.
type BeforeRunContext struct {
	Kind     RunKind
	Snapshot AgentSnapshot
	Input    []AgentMessage
}

// BeforeRunHook runs once before each accepted run; the snapshot it returns is what the run
// starts from. Its error refuses the run (no AfterRun follows).
type BeforeRunHook func(context.Context, BeforeRunContext) (AgentSnapshot, error)

// EndReason is why a run ended.
type EndReason string

// The reasons a run ends.
const (
	EndReasonStop     EndReason = "stop"
	EndReasonMaxTurns EndReason = "max_turns"
	EndReasonAborted  EndReason = "aborted"
	EndReasonError    EndReason = "error"
)

// RunSummary is what a run did.
type RunSummary struct {
	TurnCount  int
	ToolCalls  int
	ToolErrors int
	EndReason  EndReason
}

// AfterRunContext is a run that ended: its final snapshot, its summary and its error.
type AfterRunContext struct {
	Kind     RunKind
	Snapshot AgentSnapshot
	Summary  RunSummary
	Err      error
}

// AfterRunHook runs once after each accepted run; its error makes the run's result an error.
type AfterRunHook func(context.Context, AfterRunContext) error

func cloneRunProgress(progress RunProgress) RunProgress {
	if progress.ConsecutiveToolErrors != nil {
		errs := make(map[string]int, len(progress.ConsecutiveToolErrors))
		for k, v := range progress.ConsecutiveToolErrors {
			errs[k] = v
		}
		progress.ConsecutiveToolErrors = errs
	}
	progress.PendingMessages = copyMessages(progress.PendingMessages)
	return progress
}

// activateRunProgress is the progress a run starts with: a prompt starts from turn one, a
// continuation from the progress it was given when a turn is due or the run had not ended.
func activateRunProgress(progress RunProgress, continuing bool) RunProgress {
	if continuing && (progress.Active || progress.NextTurn) {
		progress = cloneRunProgress(progress)
		progress.Active = true
		return progress
	}
	return RunProgress{Active: true}
}
