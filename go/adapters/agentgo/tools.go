package agentgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// inflight is a tool call being run, in the context its tool runs with: a run started there
// is its child (a subagent's).
type inflight struct {
	run     *Run
	attempt agent.Attempt
	callID  string
}

type callKey struct{}

// ToolMiddleware records each tool call as an attempt keyed on AgentGo's execution id (the
// call's id): its tool_call committed before the tool runs (when that write fails the tool
// does not run), its tool_result after, status ok with the result's content, or error with
// the error content (or the error) the tool gave.
//
// The step is the call's turn and id. On a resumed run, a call recorded before returns its
// recorded outcome, whoever recorded it (the run before its crash, or an operator's
// `ledger-bus resolve`), and the tool does not run again; a recorded error is an error result.
// A call a crash left unresolved halts the run (Run.Halted, and the committer refuses the next
// message), unless its tool is safe to replay: AgentGo would tell the model the call failed,
// and the model might ask again. So does a call whose request could not be recorded, or whose
// outcome could not.
func (l *Ledger) ToolMiddleware() ToolMiddleware {
	return func(ctx context.Context, exec ToolExecution, next ToolExecuteFunc) (ToolResult, error) {
		r, err := runOf(ctx)
		if err != nil {
			return ToolResult{}, err
		}
		return r.callTool(ctx, exec, next)
	}
}

func (r *Run) callTool(ctx context.Context, exec ToolExecution, next ToolExecuteFunc) (ToolResult, error) {
	tool := exec.Call.Name
	answer := func(content any, isError bool) (ToolResult, error) {
		raw, err := json.Marshal(content)
		if err != nil {
			return ToolResult{}, err
		}
		return ToolResult{ToolCallID: exec.Call.ID, ToolName: tool, Content: raw, IsError: isError}, nil
	}
	opts := []agent.CallOption{agent.Step(toolStep(r, exec.Execution))}
	if slices.Contains(r.ledger.safe, tool) {
		opts = append(opts, agent.SafeToReplay())
	}

	r.mu.Lock()
	if halted := r.halted; halted != nil {
		r.mu.Unlock()
		return ToolResult{}, halted
	}
	if exec.ID == "" {
		err := r.halt(model.Errorf(model.ErrInvalidInput, "a call of %s with no id: its attempt could not be found again", tool))
		r.mu.Unlock()
		return ToolResult{}, err
	}
	begun, err := r.run.BeginCall(ctx, tool, argsOf(exec.Call.Args), opts...)
	if err != nil {
		var failed *agent.ToolFailedError
		if errors.As(err, &failed) {
			r.mu.Unlock()
			return answer(failed.Result, true)
		}
		// Unresolved, or not requested (the tool did not run), or the run no longer ours:
		// AgentGo would make the error the call's result and go on; the run stops instead.
		err = r.halt(err)
		r.mu.Unlock()
		return ToolResult{}, err
	}
	if begun.Replayed && begun.Attempt.Tool != tool {
		err := r.halt(model.Errorf(model.ErrInvalidInput, "step %s is a call of %s in the ledger, not of %s",
			begun.Attempt.StepID, begun.Attempt.Tool, tool))
		r.mu.Unlock()
		return ToolResult{}, err
	}
	r.mu.Unlock()
	if begun.Replayed {
		return answer(begun.Value, false)
	}

	// The tool runs with the call in its context (a run started there is the call's child),
	// and with no run of the adapter's: a subagent's calls are not its parent's.
	called := context.WithValue(context.WithValue(ctx, callKey{}, inflight{run: r, attempt: begun.Attempt, callID: exec.Call.ID}),
		runKey{}, (*Run)(nil))
	result, toolErr := next(called, exec)
	status, value := agent.StatusOK, contentOf(result.Content)
	switch {
	case toolErr != nil:
		status, value = agent.StatusError, agent.Failure(toolErr)
	case result.IsError:
		status = agent.StatusError
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.run.EndCall(ctx, begun.Attempt, status, value); err != nil {
		// The tool ran and nobody will know how it went: the run goes no further, and its
		// attempt stays open for the reconciler.
		return ToolResult{}, r.halt(err)
	}
	return result, toolErr
}

// argsOf is a call's arguments as the tool_call records them: the JSON object the model gave,
// or {"args": what it gave} when that is not an object.
func argsOf(raw json.RawMessage) map[string]any {
	value := contentOf(raw)
	if args, ok := value.(map[string]any); ok {
		return args
	}
	if value == nil {
		return map[string]any{}
	}
	return map[string]any{"args": value}
}

// contentOf is JSON as a value an event holds (integers kept integers, as Python reads them),
// or the text itself when it is not JSON.
func contentOf(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	var value any
	if err := decoder.Decode(&value); err != nil || decoder.More() {
		return string(raw)
	}
	return model.ReadNumbers(value)
}
