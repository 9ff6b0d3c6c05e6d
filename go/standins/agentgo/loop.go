package agentgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// loop is one run of the agent: its turns, from the progress it was given.
type loop struct {
	agent            *Agent
	model            ChatModel
	tools            []Tool
	systemPrompt     string
	maxTurns         int
	maxRetries       int
	callOptions      []CallOption
	commit           func(AgentMessage) error
	modelMiddlewares []ModelMiddleware
	toolMiddlewares  []ToolMiddleware
	state            AgentState
}

// run runs the loop: the prompts committed, then turn after turn. A turn is one model call
// (turn index CompletedTurns+1), its reply committed before any of its tools runs, then the
// tools one at a time, their results committed after the whole batch.
func (l *loop) run(ctx context.Context, prompts []AgentMessage) (RunSummary, error) {
	progress := &l.state.Progress
	summary := func(reason EndReason) RunSummary {
		return RunSummary{TurnCount: progress.CompletedTurns, ToolCalls: progress.ToolCalls,
			ToolErrors: progress.ToolErrors, EndReason: reason}
	}
	for _, prompt := range prompts {
		if err := l.commitMessage(prompt); err != nil {
			return summary(EndReasonError), fmt.Errorf("commit prompt message: %w", err)
		}
	}
	pending := copyMessages(progress.PendingMessages)
	progress.PendingMessages = nil
	// The progress says the last turn completed and none is due: nothing to do.
	if progress.CompletedTurns > 0 && !progress.NextTurn {
		return summary(EndReasonStop), nil
	}
	maxTurns := l.maxTurns
	if maxTurns <= 0 {
		maxTurns = defaultMaxTurns
	}
	for {
		if err := ctx.Err(); err != nil {
			return summary(EndReasonAborted), err
		}
		if progress.CompletedTurns >= maxTurns {
			return summary(EndReasonMaxTurns), &MaxTurnsError{Limit: maxTurns}
		}
		for _, msg := range pending {
			if err := l.commitMessage(msg); err != nil {
				return summary(EndReasonError), fmt.Errorf("commit message: %w", err)
			}
		}
		pending = nil
		turn := progress.CompletedTurns + 1
		reply, err := l.callModel(ctx, turn)
		if err != nil {
			if ctx.Err() != nil {
				return summary(EndReasonAborted), ctx.Err()
			}
			return summary(EndReasonError), err
		}
		if err := l.commitMessage(reply); err != nil {
			return summary(EndReasonError), fmt.Errorf("commit message: %w", err)
		}
		if reply.StopReason == StopReasonError || reply.StopReason == StopReasonAborted {
			progress.CompletedTurns = turn
			progress.NextTurn = false
			if reply.StopReason == StopReasonAborted {
				return summary(EndReasonAborted), nil
			}
			return summary(EndReasonError), nil
		}
		calls := reply.ToolCalls()
		progress.ToolCalls += len(calls)
		var results []ToolResult
		for _, call := range calls {
			result := l.runTool(ctx, turn, call)
			if result.IsError {
				progress.ToolErrors++
			}
			results = append(results, result)
		}
		// A turn's results enter the conversation together, after the whole batch ran.
		for _, result := range results {
			if err := l.commitMessage(toolResultMessage(result)); err != nil {
				return summary(EndReasonError), fmt.Errorf("commit message: %w", err)
			}
		}
		progress.CompletedTurns = turn
		progress.NextTurn = len(calls) > 0
		l.agent.setProgress(*progress)
		if !progress.NextTurn {
			return summary(EndReasonStop), nil
		}
	}
}

// commitMessage is the one way a message enters the conversation: the committer first, and
// only a committed message is appended.
func (l *loop) commitMessage(msg AgentMessage) error {
	if l.commit != nil {
		if err := l.commit(msg); err != nil {
			return err
		}
	}
	l.state.Messages = append(l.state.Messages, msg)
	if m, ok := msg.(Message); ok {
		l.state.TotalUsage.Add(m.Usage)
	}
	l.agent.setMessages(l.state.Messages)
	return nil
}

// callModel asks the model for the turn's reply, through the model middlewares, retrying an
// error that says it is retryable; every attempt of the turn is the execution model-<turn>.
func (l *loop) callModel(ctx context.Context, turn int) (Message, error) {
	request := LLMRequest{Messages: RepairMessageSequence(ToMessages(l.state.Messages)), Tools: toolSpecs(l.tools)}
	if l.systemPrompt != "" {
		request.Messages = append([]Message{SystemMsg(l.systemPrompt)}, request.Messages...)
	}
	execute := func(ctx context.Context, call ModelExecution) (ModelResult, error) {
		if l.model == nil {
			return ModelResult{}, ErrNoModel
		}
		response, err := l.model.Generate(ctx, call.Request.Messages, call.Request.Tools, call.Options...)
		if err != nil {
			return ModelResult{}, err
		}
		msg := response.Message
		msg.Timestamp = time.Now()
		return ModelResult{Message: msg, HasCompletedToolCalls: msg.HasToolCalls()}, nil
	}
	retries := max(l.maxRetries, 0)
	for attempt := 1; ; attempt++ {
		execution := newModelExecution(turn, attempt)
		execution.Request = request
		execution.Options = l.callOptions
		result, err := executeModel(ctx, execution, l.modelMiddlewares, execute)
		if err == nil {
			return result.Message, nil
		}
		var retryable RetryableError
		if attempt > retries || errors.Is(err, context.Canceled) || !errors.As(err, &retryable) || !retryable.Retryable() {
			return Message{}, err
		}
	}
}

// runTool runs one call through the tool middlewares. A middleware's error becomes the call's
// error result, and the result is always the call's.
func (l *loop) runTool(ctx context.Context, turn int, call ToolCall) ToolResult {
	execution := ToolExecution{Execution: Execution{ID: call.ID, Kind: ExecutionKindTool, TurnIndex: turn, Attempt: 1}, Call: call}
	next := func(ctx context.Context, execution ToolExecution) (ToolResult, error) {
		return l.executeTool(ctx, execution.Call), nil
	}
	for i := len(l.toolMiddlewares) - 1; i >= 0; i-- {
		middleware, inner := l.toolMiddlewares[i], next
		next = func(ctx context.Context, execution ToolExecution) (ToolResult, error) {
			return middleware(ctx, execution, inner)
		}
	}
	result, err := next(ctx, execution)
	if err != nil {
		result = toolFailure(call, err.Error())
	}
	result.ToolCallID = call.ID
	if !result.IsError && result.ToolName == "" {
		result.ToolName = call.Name
	}
	return result
}

// executeTool runs the tool itself.
func (l *loop) executeTool(ctx context.Context, call ToolCall) ToolResult {
	if ctx.Err() != nil {
		return toolFailure(call, "Tool execution cancelled.")
	}
	var tool Tool
	for _, t := range l.tools {
		if t.Name() == call.Name {
			tool = t
		}
	}
	if tool == nil {
		return toolFailure(call, fmt.Sprintf("tool %q not found", call.Name))
	}
	if ct, ok := tool.(ContentTool); ok {
		blocks, err := ct.ExecuteContent(ctx, call.Args)
		if err != nil {
			return toolFailure(call, err.Error())
		}
		text := ""
		for _, b := range blocks {
			text += b.Text
		}
		content, _ := json.Marshal(text)
		return ToolResult{ToolCallID: call.ID, ToolName: call.Name, Content: content, ContentBlocks: blocks}
	}
	output, err := tool.Execute(ctx, call.Args)
	if err != nil {
		return toolFailure(call, err.Error())
	}
	return ToolResult{ToolCallID: call.ID, ToolName: call.Name, Content: output}
}

func toolSpecs(tools []Tool) []ToolSpec {
	specs := make([]ToolSpec, 0, len(tools))
	for _, t := range tools {
		specs = append(specs, ToolSpec{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
	}
	return specs
}

// RepairMessageSequence gives each tool call without a result a synthetic error result, and
// drops results of calls that are not there, so that a provider accepts the sequence.
func RepairMessageSequence(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	for i, msg := range msgs {
		out = append(out, msg)
		calls := msg.ToolCalls()
		if msg.Role != RoleAssistant || len(calls) == 0 {
			continue
		}
		answered := map[string]bool{}
		for _, next := range msgs[i+1:] {
			if next.Role != RoleTool {
				break
			}
			if id, ok := next.Metadata["tool_call_id"].(string); ok {
				answered[id] = true
			}
		}
		for _, call := range calls {
			if !answered[call.ID] {
				out = append(out, ToolResultMsg(call.ID, []byte(`"Tool result missing (conversation was truncated or interrupted)."`), true))
			}
		}
	}
	known := map[string]bool{}
	for _, msg := range out {
		for _, call := range msg.ToolCalls() {
			known[call.ID] = true
		}
	}
	cleaned := out[:0:0]
	for _, msg := range out {
		if id, ok := msg.Metadata["tool_call_id"].(string); ok && msg.Role == RoleTool && !known[id] {
			continue
		}
		cleaned = append(cleaned, msg)
	}
	return cleaned
}
