package agentgo

import (
	"context"
	"fmt"
)

// LLMRequest is the input of one model call.
type LLMRequest struct {
	Messages []Message
	Tools    []ToolSpec
}

// LLMResponse is the result of one model call.
type LLMResponse struct {
	Message Message
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name         string `json:"name"`
	Description  string `json:"description"`
	Parameters   any    `json:"parameters"`
	DeferLoading bool   `json:"defer_loading,omitempty"`
	Strict       *bool  `json:"strict,omitempty"`
}

// ThinkingLevel is how deeply a model that can reason does.
type ThinkingLevel string

// The thinking levels.
const (
	ThinkingAuto    ThinkingLevel = ""
	ThinkingOff     ThinkingLevel = "off"
	ThinkingMinimal ThinkingLevel = "minimal"
	ThinkingLow     ThinkingLevel = "low"
	ThinkingMedium  ThinkingLevel = "medium"
	ThinkingHigh    ThinkingLevel = "high"
)

// CallOption sets a parameter of one model call.
type CallOption func(*CallConfig)

// CallConfig is a call's parameters, from its CallOptions.
type CallConfig struct {
	ThinkingLevel  ThinkingLevel
	ThinkingBudget int
	APIKey         string
	SessionID      string
	PromptCacheKey string
	MaxTokens      int
	ToolChoice     any
}

// ResolveCallConfig applies opts.
func ResolveCallConfig(opts []CallOption) CallConfig {
	var cfg CallConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// WithThinking sets a call's thinking level.
func WithThinking(level ThinkingLevel) CallOption {
	return func(c *CallConfig) { c.ThinkingLevel = level }
}

// WithCallPromptCacheKey sets a call's prompt-cache routing key.
func WithCallPromptCacheKey(key string) CallOption {
	return func(c *CallConfig) { c.PromptCacheKey = key }
}

// WithMaxTokens sets a call's output token limit.
func WithMaxTokens(tokens int) CallOption {
	return func(c *CallConfig) { c.MaxTokens = tokens }
}

// StreamEventType is the kind of a streamed event.
type StreamEventType string

// StreamEvent is one event of a streamed reply. The stand-in's loop does not stream.
type StreamEvent struct {
	Type    StreamEventType
	Message Message
	Delta   string
	Err     error
}

// ChatModel is a model provider.
type ChatModel interface {
	Generate(ctx context.Context, messages []Message, tools []ToolSpec, opts ...CallOption) (*LLMResponse, error)
	GenerateStream(ctx context.Context, messages []Message, tools []ToolSpec, opts ...CallOption) (<-chan StreamEvent, error)
	SupportsTools() bool
}

// RetryableError is an error that says whether asking again may succeed.
type RetryableError interface {
	Retryable() bool
}

// ModelExecution is one physical model attempt. Execution.ID names the logical call and stays
// the same across retries and across a run restored at the turn's boundary.
type ModelExecution struct {
	Execution
	Request LLMRequest
	Options []CallOption
}

// ModelResult is what the loop takes from a model attempt.
type ModelResult struct {
	Message               Message
	HasCompletedToolCalls bool
}

// ModelExecuteFunc is the rest of a model middleware chain.
type ModelExecuteFunc func(context.Context, ModelExecution) (ModelResult, error)

// ModelMiddleware wraps one physical provider attempt, its first middleware outermost; it may
// return a known result without calling next.
type ModelMiddleware func(context.Context, ModelExecution, ModelExecuteFunc) (ModelResult, error)

// executeModel runs one model attempt through the middlewares (AgentGo's ExecuteModel finds
// them in the context; the stand-in is given them).
func executeModel(ctx context.Context, execution ModelExecution, middlewares []ModelMiddleware, next ModelExecuteFunc) (ModelResult, error) {
	for i := len(middlewares) - 1; i >= 0; i-- {
		middleware, inner := middlewares[i], next
		next = func(ctx context.Context, call ModelExecution) (ModelResult, error) {
			return middleware(ctx, call, inner)
		}
	}
	return next(ctx, execution)
}

// modelExecutionID is derived from the turn, not the attempt: a retry, or a run restored at
// the turn's boundary, addresses the same logical call.
func modelExecutionID(turnIndex int) string { return fmt.Sprintf("model-%d", turnIndex) }

func newModelExecution(turnIndex, attempt int) ModelExecution {
	return ModelExecution{Execution: Execution{ID: modelExecutionID(turnIndex), Kind: ExecutionKindModel,
		TurnIndex: turnIndex, Attempt: attempt}}
}
