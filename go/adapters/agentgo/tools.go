package agentgo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// inflight is a tool call being run, in the context its tool runs with: a run started there
// is its child (a subagent's).
type inflight struct {
	run     *Run
	attempt agent.Attempt
	turn    int
	callID  string
}

type callKey struct{}

// richResult is the key under which a tool result's content is recorded when the result also
// carries content blocks (an image, say) or details: {"agentgo.tool_result": {"content": ...,
// "content_blocks": [...], "details": ...}}. A plain result is its content alone, as every SDK
// and `ledger-bus resolve` record one.
const richResult = "agentgo.tool_result"

// ToolMiddleware records each tool call as an attempt keyed on AgentGo's execution (the turn,
// counted from one within the run, and the call's id): its tool_call committed before the tool
// runs (when that write fails the tool does not run), its tool_result after, status ok with
// the result's content (with its content blocks and details, when it has them), or error with
// the error content (or the error) the tool gave.
//
// On a resumed run, a call recorded before returns its recorded outcome, whoever recorded it
// (the run before its crash, or an operator's `ledger-bus resolve`), and the tool does not run
// again; a recorded error is an error result. A call a crash left unresolved halts the run
// (Run.Halted, and the committer refuses the next message), unless its tool is safe to replay:
// AgentGo would tell the model the call failed, and the model might ask again. So does a call
// whose request could not be recorded, or whose outcome could not.
func (l *Ledger) ToolMiddleware() ag.ToolMiddleware {
	return func(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
		r, err := runOf(ctx)
		if err != nil {
			return ag.ToolResult{}, err
		}
		return r.callTool(ctx, exec, next)
	}
}

func (r *Run) callTool(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
	tool := exec.Call.Name
	opts := []agent.CallOption{agent.Step(toolStep(r, exec.Execution))}
	if slices.Contains(r.ledger.safe, tool) {
		opts = append(opts, agent.SafeToReplay())
	}

	r.mu.Lock()
	if halted := r.halted; halted != nil {
		r.mu.Unlock()
		return ag.ToolResult{}, halted
	}
	if exec.ID == "" {
		err := r.halt(model.Errorf(model.ErrInvalidInput, "a call of %s with no id: its attempt could not be found again", tool))
		r.mu.Unlock()
		return ag.ToolResult{}, err
	}
	begun, err := r.run.BeginCall(ctx, tool, argsOf(exec.Call.Args), opts...)
	if err != nil {
		var failed *agent.ToolFailedError
		if errors.As(err, &failed) {
			r.mu.Unlock()
			return recordedResult(exec.Call, failed.Result, true)
		}
		// Unresolved, or not requested (the tool did not run), or the run no longer ours:
		// AgentGo would make the error the call's result and go on; the run stops instead.
		err = r.halt(err)
		r.mu.Unlock()
		return ag.ToolResult{}, err
	}
	if begun.Replayed && begun.Attempt.Tool != tool {
		err := r.halt(model.Errorf(model.ErrInvalidInput, "step %s is a call of %s in the ledger, not of %s",
			begun.Attempt.StepID, begun.Attempt.Tool, tool))
		r.mu.Unlock()
		return ag.ToolResult{}, err
	}
	r.mu.Unlock()
	if begun.Replayed {
		return recordedResult(exec.Call, begun.Value, false)
	}

	// The tool runs with the call in its context (a run started there is the call's child;
	// agent.CallFrom gives the tool its idempotency key), and with no run of the adapter's: a
	// subagent's calls are not its parent's.
	called := context.WithValue(context.WithValue(ctx, callKey{}, inflight{run: r, attempt: begun.Attempt, turn: exec.TurnIndex, callID: exec.Call.ID}),
		runKey{}, (*Run)(nil))
	called = r.run.CallContext(called, begun.Attempt)
	result, toolErr := next(called, exec)
	status, value := agent.StatusOK, outcomeOf(result)
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
		return ag.ToolResult{}, r.halt(err)
	}
	return result, toolErr
}

// toolStep is a tool call's step: its turn and its call's id, which survive retries and
// resumes (a provider's call ids are unique within a reply, not always across replies).
func toolStep(r *Run, e ag.Execution) string {
	return fmt.Sprintf("%s/tool/t%d/%s", r.ID(), e.TurnIndex, e.ID)
}

// outcomeOf is what a tool_result records of a result: its content, or, with content blocks
// or details, all three under richResult.
func outcomeOf(result ag.ToolResult) any {
	content := contentOf(result.Content)
	if len(result.ContentBlocks) == 0 && result.Details == nil {
		return content
	}
	rich := map[string]any{"content": content}
	if len(result.ContentBlocks) > 0 {
		rich["content_blocks"] = jsonValue(result.ContentBlocks)
	}
	if result.Details != nil {
		rich["details"] = jsonValue(result.Details)
	}
	return map[string]any{richResult: rich}
}

// recordedResult is a recorded outcome as the result AgentGo's loop takes.
func recordedResult(call ag.ToolCall, value any, isError bool) (ag.ToolResult, error) {
	result := ag.ToolResult{ToolCallID: call.ID, ToolName: call.Name, IsError: isError}
	if wrapped, ok := value.(map[string]any); ok && len(wrapped) == 1 {
		if rich, ok := wrapped[richResult].(map[string]any); ok {
			value = rich["content"]
			if blocks, ok := rich["content_blocks"]; ok {
				raw, err := json.Marshal(blocks)
				if err == nil {
					err = json.Unmarshal(raw, &result.ContentBlocks)
				}
				if err != nil {
					return ag.ToolResult{}, model.Errorf(model.ErrInvalidEvent, "the recorded content blocks of %s: %v", call.ID, err)
				}
			}
			result.Details = rich["details"]
		}
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return ag.ToolResult{}, err
	}
	result.Content = raw
	return result, nil
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
