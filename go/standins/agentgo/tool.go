package agentgo

import (
	"context"
	"encoding/json"
	"time"
)

// ToolCall is a tool invocation the model asked for.
type ToolCall struct {
	ID               string          `json:"id"`
	Name             string          `json:"name"`
	Args             json.RawMessage `json:"args"`
	ArgsInvalid      bool            `json:"args_invalid,omitempty"`
	ArgsRawText      string          `json:"args_raw_text,omitempty"`
	ArgsParseError   string          `json:"args_parse_error,omitempty"`
	ThoughtSignature string          `json:"thought_signature,omitempty"`
}

// ToolResult is a tool's outcome.
type ToolResult struct {
	ToolCallID    string          `json:"tool_call_id"`
	ToolName      string          `json:"-"`
	Content       json.RawMessage `json:"content,omitempty"`
	ContentBlocks []ContentBlock  `json:"-"`
	IsError       bool            `json:"is_error,omitempty"`
	Details       any             `json:"details,omitempty"`
}

// Tool is a tool the model may call.
type Tool interface {
	Name() string
	Description() string
	Schema() map[string]any
	Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

// ContentTool is a tool whose result is content blocks (images, say); the loop calls
// ExecuteContent instead of Execute.
type ContentTool interface {
	ExecuteContent(ctx context.Context, args json.RawMessage) ([]ContentBlock, error)
}

// ToolExecution is the model's call and the execution coordinate of one physical attempt; its
// Execution.ID is the call's id.
type ToolExecution struct {
	Execution
	Call ToolCall
}

// ToolExecuteFunc is the rest of a tool middleware chain.
type ToolExecuteFunc func(context.Context, ToolExecution) (ToolResult, error)

// ToolMiddleware wraps one tool call, its first middleware outermost. Its error becomes the
// call's error result; the run goes on.
type ToolMiddleware func(context.Context, ToolExecution, ToolExecuteFunc) (ToolResult, error)

// FuncTool is a function as a Tool.
type FuncTool struct {
	name        string
	description string
	schema      map[string]any
	fn          func(context.Context, json.RawMessage) (json.RawMessage, error)
}

// NewFuncTool makes fn a tool.
func NewFuncTool(name, description string, schema map[string]any, fn func(context.Context, json.RawMessage) (json.RawMessage, error)) *FuncTool {
	return &FuncTool{name: name, description: description, schema: schema, fn: fn}
}

// Name is the tool's name.
func (t *FuncTool) Name() string { return t.name }

// Description is what the tool does.
func (t *FuncTool) Description() string { return t.description }

// Schema is the JSON schema of its arguments.
func (t *FuncTool) Schema() map[string]any { return t.schema }

// Execute runs the function.
func (t *FuncTool) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return t.fn(ctx, args)
}

// toolResultMessage is the message a tool's result enters the conversation as.
func toolResultMessage(tr ToolResult) Message {
	if len(tr.ContentBlocks) > 0 {
		return Message{Role: RoleTool, Content: tr.ContentBlocks, Timestamp: time.Now(),
			Metadata: map[string]any{"tool_call_id": tr.ToolCallID, "tool_name": tr.ToolName, "is_error": tr.IsError}}
	}
	msg := ToolResultMsg(tr.ToolCallID, tr.Content, tr.IsError)
	if tr.ToolName != "" {
		msg.Metadata["tool_name"] = tr.ToolName
	}
	return msg
}

func toolFailure(call ToolCall, msg string) ToolResult {
	content, _ := json.Marshal(msg)
	return ToolResult{ToolCallID: call.ID, ToolName: call.Name, Content: content, IsError: true}
}
