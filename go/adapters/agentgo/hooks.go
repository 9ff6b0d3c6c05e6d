package agentgo

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// The declarations in this file are AgentGo's hook and message types as the adapter reaches
// them: the same names, fields and JSON as github.com/compforge/agentgo's own (its source at
// commit 08885226). A message's whole JSON is mirrored, so that the conversation the adapter
// keeps is AgentGo's; of the hooks' other types (an LLM request, a tool result), only what the
// adapter reads. They stand in for AgentGo's package while the Go module proxy does not serve
// it; once it does, these declarations give way to AgentGo's own types (the methods declared
// here to AgentGo's), and the adapter's code reads them as it reads these. Each comment names
// the AgentGo declaration it follows.

// ExecutionKind is agentgo.ExecutionKind: what an execution runs.
type ExecutionKind string

// The kinds of execution the adapter records.
const (
	ExecutionKindModel ExecutionKind = "model"
	ExecutionKindTool  ExecutionKind = "tool"
)

// Execution is agentgo.Execution: the coordinate of one logical execution. ID stays the same
// across physical retries and across a recovery of the same turn (a tool's ID is its call's
// id); Attempt counts the physical attempts from one.
type Execution struct {
	ID        string
	Kind      ExecutionKind
	ParentID  string
	TurnIndex int
	Attempt   int
}

// Role is agentgo.Role.
type Role string

// The roles of a message.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
	RoleTool      Role = "tool"
)

// ContentType is agentgo.ContentType.
type ContentType string

// The kinds of content block.
const (
	ContentText     ContentType = "text"
	ContentThinking ContentType = "thinking"
	ContentToolCall ContentType = "toolCall"
	ContentImage    ContentType = "image"
	ContentToolRef  ContentType = "tool_reference"
)

// ContentBlock is agentgo.ContentBlock: a tagged union, one payload per Type.
type ContentBlock struct {
	Type     ContentType `json:"type"`
	Text     string      `json:"text,omitempty"`
	Thinking string      `json:"thinking,omitempty"`
	ToolCall *ToolCall   `json:"tool_call,omitempty"`
	Image    *ImageData  `json:"image,omitempty"`
	ToolName string      `json:"tool_name,omitempty"`
}

// ImageData is agentgo.ImageData: an image as base64 data or a URL.
type ImageData struct {
	Data     string `json:"data,omitempty"`
	URL      string `json:"url,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
}

// StopReason is agentgo.StopReason.
type StopReason string

// Cost is agentgo.Cost, in US dollars.
type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read"`
	CacheWrite float64 `json:"cache_write"`
	Total      float64 `json:"total"`
}

// Usage is agentgo.Usage: one model call's tokens.
type Usage struct {
	Provider    string `json:"provider,omitempty"`
	Model       string `json:"model,omitempty"`
	Input       int    `json:"input"`
	Output      int    `json:"output"`
	CacheRead   int    `json:"cache_read"`
	CacheWrite  int    `json:"cache_write"`
	TotalTokens int    `json:"total_tokens"`
	Cost        *Cost  `json:"cost,omitempty"`
}

// Message is agentgo.Message: a model-level message of content blocks. A tool's result is a
// message of RoleTool whose Metadata["tool_call_id"] names the call.
type Message struct {
	Role       Role           `json:"role"`
	Content    []ContentBlock `json:"content"`
	StopReason StopReason     `json:"stop_reason,omitempty"`
	Usage      *Usage         `json:"usage,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Timestamp  time.Time      `json:"timestamp"`
}

// TextContent is agentgo.Message.TextContent: the text blocks, joined.
func (m Message) TextContent() string {
	var b strings.Builder
	for _, block := range m.Content {
		if block.Type == ContentText {
			b.WriteString(block.Text)
		}
	}
	return b.String()
}

// ToolCalls is agentgo.Message.ToolCalls: the message's tool call blocks.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, block := range m.Content {
		if block.Type == ContentToolCall && block.ToolCall != nil {
			calls = append(calls, *block.ToolCall)
		}
	}
	return calls
}

// ToolCall is agentgo.ToolCall: a tool invocation the model asked for.
type ToolCall struct {
	ID               string          `json:"id"`
	Name             string          `json:"name"`
	Args             json.RawMessage `json:"args"`
	ArgsInvalid      bool            `json:"args_invalid,omitempty"`
	ArgsRawText      string          `json:"args_raw_text,omitempty"`
	ArgsParseError   string          `json:"args_parse_error,omitempty"`
	ThoughtSignature string          `json:"thought_signature,omitempty"`
}

// ToolResult is agentgo.ToolResult: a tool's outcome, its content JSON.
type ToolResult struct {
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"-"`
	Content    json.RawMessage `json:"content,omitempty"`
	IsError    bool            `json:"is_error,omitempty"`
}

// ToolExecution is agentgo.ToolExecution: the model's call and its execution coordinate, whose
// ID is the call's id.
type ToolExecution struct {
	Execution
	Call ToolCall
}

// ToolExecuteFunc is agentgo.ToolExecuteFunc: the rest of a tool middleware chain.
type ToolExecuteFunc func(context.Context, ToolExecution) (ToolResult, error)

// ToolMiddleware is agentgo.ToolMiddleware, installed with agentgo.WithToolMiddlewares. AgentGo
// turns a middleware's error into the call's tool result; it does not stop the run.
type ToolMiddleware func(context.Context, ToolExecution, ToolExecuteFunc) (ToolResult, error)

// LLMRequest is agentgo.LLMRequest, as far as the adapter reads it: the messages sent.
type LLMRequest struct {
	Messages []Message
}

// ModelExecution is agentgo.ModelExecution: one physical provider attempt.
type ModelExecution struct {
	Execution
	Request LLMRequest
}

// ModelResult is agentgo.ModelResult: what the loop takes from one model attempt.
type ModelResult struct {
	Message               Message
	HasCompletedToolCalls bool
}

// ModelExecuteFunc is agentgo.ModelExecuteFunc: the rest of a model middleware chain.
type ModelExecuteFunc func(context.Context, ModelExecution) (ModelResult, error)

// ModelMiddleware is agentgo.ModelMiddleware: it wraps one physical provider attempt, and may
// return a known result without calling next.
type ModelMiddleware func(context.Context, ModelExecution, ModelExecuteFunc) (ModelResult, error)
