package agentgo

import (
	"encoding/json"
	"strings"
	"time"
)

// Role is a message's role.
type Role string

// The roles of a message.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
	RoleTool      Role = "tool"
)

// ContentType is the kind of a ContentBlock.
type ContentType string

// The kinds of content block.
const (
	ContentText     ContentType = "text"
	ContentThinking ContentType = "thinking"
	ContentToolCall ContentType = "toolCall"
	ContentImage    ContentType = "image"
	ContentToolRef  ContentType = "tool_reference"
)

// ContentBlock is a tagged union: one payload per Type.
type ContentBlock struct {
	Type     ContentType `json:"type"`
	Text     string      `json:"text,omitempty"`
	Thinking string      `json:"thinking,omitempty"`
	ToolCall *ToolCall   `json:"tool_call,omitempty"`
	Image    *ImageData  `json:"image,omitempty"`
	ToolName string      `json:"tool_name,omitempty"`
}

// ImageData is an image as base64 data or a URL.
type ImageData struct {
	Data     string `json:"data,omitempty"`
	URL      string `json:"url,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
}

// TextBlock is a text block.
func TextBlock(text string) ContentBlock { return ContentBlock{Type: ContentText, Text: text} }

// ThinkingBlock is a thinking block.
func ThinkingBlock(thinking string) ContentBlock {
	return ContentBlock{Type: ContentThinking, Thinking: thinking}
}

// ToolCallBlock is a tool call block.
func ToolCallBlock(tc ToolCall) ContentBlock {
	return ContentBlock{Type: ContentToolCall, ToolCall: &tc}
}

// ImageBlock is an image given as base64 data.
func ImageBlock(data, mimeType string) ContentBlock {
	return ContentBlock{Type: ContentImage, Image: &ImageData{Data: data, MimeType: mimeType}}
}

// StopReason is why a model stopped.
type StopReason string

// The reasons a model stops.
const (
	StopReasonStop    StopReason = "stop"
	StopReasonLength  StopReason = "length"
	StopReasonToolUse StopReason = "toolUse"
	StopReasonError   StopReason = "error"
	StopReasonSafety  StopReason = "safety"
	StopReasonAborted StopReason = "aborted"
)

// Cost is one model call's cost in US dollars.
type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read"`
	CacheWrite float64 `json:"cache_write"`
	Total      float64 `json:"total"`
}

// Add adds other to c.
func (c *Cost) Add(other *Cost) {
	if other == nil {
		return
	}
	c.Input += other.Input
	c.Output += other.Output
	c.CacheRead += other.CacheRead
	c.CacheWrite += other.CacheWrite
	c.Total += other.Total
}

// Usage is one model call's tokens.
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

// Add adds other to u.
func (u *Usage) Add(other *Usage) {
	if other == nil {
		return
	}
	u.Input += other.Input
	u.Output += other.Output
	u.CacheRead += other.CacheRead
	u.CacheWrite += other.CacheWrite
	u.TotalTokens += other.TotalTokens
	if other.Cost != nil {
		if u.Cost == nil {
			u.Cost = &Cost{}
		}
		u.Cost.Add(other.Cost)
	}
}

// AgentMessage is the application's message: what the loop, the committer and the state
// carry. Message is one; an application may add its own.
type AgentMessage interface {
	GetRole() Role
	GetTimestamp() time.Time
	Raw() AgentMessage
	Priority() int
	Compact(ratio float64) (AgentMessage, float64)
	TextContent() string
	ThinkingContent() string
	HasToolCalls() bool
	ToMessage() (message Message, include bool)
}

// Message is a model-level message of content blocks. A tool's result is a message of RoleTool
// whose Metadata["tool_call_id"] names its call.
type Message struct {
	Role       Role           `json:"role"`
	Content    []ContentBlock `json:"content"`
	StopReason StopReason     `json:"stop_reason,omitempty"`
	Usage      *Usage         `json:"usage,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Timestamp  time.Time      `json:"timestamp"`
}

// GetRole is the message's role.
func (m Message) GetRole() Role { return m.Role }

// GetTimestamp is when the message was made.
func (m Message) GetTimestamp() time.Time { return m.Timestamp }

// Raw is the message itself.
func (m Message) Raw() AgentMessage { return m }

// Priority is the message's priority when context is trimmed.
func (m Message) Priority() int { return 0 }

// Compact is the message unchanged: the stand-in trims no context.
func (m Message) Compact(float64) (AgentMessage, float64) { return m, 1 }

// ToMessage is the model representation of m. A reply that failed or was aborted stays in the
// transcript but is not sent to a model again.
func (m Message) ToMessage() (Message, bool) {
	if m.StopReason == StopReasonError || m.StopReason == StopReasonAborted {
		return Message{}, false
	}
	return m, true
}

// TextContent is the text blocks, joined.
func (m Message) TextContent() string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == ContentText {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// ThinkingContent is the thinking blocks, joined.
func (m Message) ThinkingContent() string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == ContentThinking {
			sb.WriteString(b.Thinking)
		}
	}
	return sb.String()
}

// ToolCalls is the message's tool call blocks.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, b := range m.Content {
		if b.Type == ContentToolCall && b.ToolCall != nil {
			calls = append(calls, *b.ToolCall)
		}
	}
	return calls
}

// HasToolCalls says whether the message asks for a tool.
func (m Message) HasToolCalls() bool {
	for _, b := range m.Content {
		if b.Type == ContentToolCall {
			return true
		}
	}
	return false
}

// ToMessages lowers application messages to the model protocol, leaving out those that opt out.
func ToMessages(messages []AgentMessage) []Message {
	out := make([]Message, 0, len(messages))
	for _, message := range messages {
		if message == nil {
			continue
		}
		if m, include := message.ToMessage(); include {
			out = append(out, m)
		}
	}
	return out
}

// ToAgentMessages is messages as AgentMessages.
func ToAgentMessages(msgs []Message) []AgentMessage {
	out := make([]AgentMessage, len(msgs))
	for i, m := range msgs {
		out[i] = m
	}
	return out
}

// CollectMessages is the Messages among msgs.
func CollectMessages(msgs []AgentMessage) []Message {
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		if msg, ok := m.(Message); ok {
			out = append(out, msg)
		}
	}
	return out
}

// UserMsg is a user's message of plain text.
func UserMsg(text string) Message {
	return Message{Role: RoleUser, Content: []ContentBlock{TextBlock(text)}, Timestamp: time.Now()}
}

// SystemMsg is a system message.
func SystemMsg(text string) Message {
	return Message{Role: RoleSystem, Content: []ContentBlock{TextBlock(text)}, Timestamp: time.Now()}
}

// ToolResultMsg is a tool's result as a message.
func ToolResultMsg(toolCallID string, content json.RawMessage, isError bool) Message {
	return Message{
		Role:      RoleTool,
		Content:   []ContentBlock{TextBlock(string(content))},
		Metadata:  map[string]any{"tool_call_id": toolCallID, "is_error": isError},
		Timestamp: time.Now(),
	}
}

// AbortMsg is the assistant's marker of an interrupted run; phase is "inference" or
// "tool_execution".
func AbortMsg(text, phase string) Message {
	return Message{Role: RoleAssistant, Content: []ContentBlock{TextBlock(text)}, StopReason: StopReasonAborted,
		Metadata: map[string]any{"abort_phase": phase}, Timestamp: time.Now()}
}

func copyMessages(msgs []AgentMessage) []AgentMessage {
	if msgs == nil {
		return nil
	}
	return append([]AgentMessage(nil), msgs...)
}
